// sbx exec: one JSON request on stdin, one JSON response on stdout (runtime/exec.hpp). Exit 0
// whenever a response was produced, whatever the program did; 125 with {"error": ...} on stdout
// for a malformed request or when sbx itself could not set up.
#include <cstdio>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "runtime/exec.hpp"
#include "runtime/signals.hpp"

namespace sbx::cli {
namespace {
struct ExecFlags {
  std::string trace_file;
};

int json_error(const std::string& stage, const std::string& message) {
  nlohmann::json e = {{"error", {{"stage", stage}, {"message", message}}}};
  std::printf("%s\n", e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::fprintf(stderr, "sbx: exec: %s\n", message.c_str());
  return 125;
}
}  // namespace

void add_exec_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  static ExecFlags f;
  auto* exec = app.add_subcommand("exec", "Run generated code from a JSON request on stdin; JSON response on stdout");
  exec->add_option("--trace-file", f.trace_file, "Also write the trace record to this file");
  out.push_back({exec, [&g]() -> int {
    // Bounded: a request is code plus inputs, not a data set.
    constexpr std::size_t kMaxRequest = 64u << 20;
    std::string text;
    {
      // Waiting for the caller's request, before any sandbox exists: Ctrl-C ends sbx as usual.
      CallerSignalMaskScope interruptible;
      char buf[65536];
      for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, stdin)) > 0;) {
        text.append(buf, n);
        if (text.size() > kMaxRequest) return json_error("usage", "request larger than 64 MiB");
      }
    }
    nlohmann::json rq;
    try {
      rq = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      return json_error("usage", std::string("exec request is not valid JSON: ") + e.what());
    }
    ExecContext ctx;
    ctx.dirs = resolve_dirs(g.state_dir);
    ctx.invocation_argv = g.argv;
    ctx.trace_file = f.trace_file;
    auto resp = run_exec(rq, ctx);
    if (!resp) return json_error(resp.error().stage, resp.error().describe());
    // Program output is arbitrary bytes: invalid UTF-8 is replaced rather than failing the dump.
    std::printf("%s\n", resp->dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }, true});
}

}  // namespace sbx::cli
