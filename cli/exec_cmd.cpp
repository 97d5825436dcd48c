// sbx exec: one JSON request on stdin, one JSON response on stdout (runtime/typed/exec.hpp). Exit 0
// whenever a response was produced, whatever the program did; 125 with {"error": ...} on stdout
// for a malformed request or when sbx itself could not set up.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "runtime/record/trace_mirror.hpp"
#include "runtime/typed/exec.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/launch/preflight.hpp"
#include "runtime/base/signals.hpp"
#include "runtime/launch/tenant.hpp"

namespace sbx::cli {
namespace {
struct ExecFlags {
  std::string trace_file;
  std::string events;
  std::string trace_db;
  std::optional<std::string> tenant;      // --tenant '' is a bad name, not "none"
  std::string profile = kDefaultProfile;  // its limits are the request's ceilings
  std::vector<std::string> allow_hosts;   // the operator's egress rules; a request names none
  bool dry_run = false;
};

// How long a caller that signalled sbx exec may take to finish writing its request.
constexpr int kRequestGraceMs = 2000;

int json_error(Stage stage, const std::string& message) {
  nlohmann::json e = {{"error", {{"stage", stage.name()}, {"message", message}}}};
  std::printf("%s\n", dump_json(e, -1).c_str());
  std::fprintf(stderr, "sbx: exec: %s\n", printable(message).c_str());
  return 125;
}
}  // namespace

void add_exec_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  static ExecFlags f;
  auto* exec = app.add_subcommand("exec", "Run generated code from a JSON request on stdin; JSON response on stdout");
  exec->add_option("--trace-file", f.trace_file, "Also write the trace record to this file");
  exec->add_option(
      "--events", f.events,
      "Stream live events as JSON lines to FILE, a FIFO or fd:N (never blocks the run; drops are counted)");
  exec->add_option("--trace-db", f.trace_db, kTraceDbHelp);
  exec->add_option("--profile", f.profile,
                   "Profile name or JSON file the request runs under; its limits are the request's ceilings "
                   "(default: untrusted)");
  exec->add_option(
      "--allow-host", f.allow_hosts,
      "Allow egress to HOST[:PORT] through sbx's filtering proxy: a name, *.domain, an IP, [IPv6] or a CIDR; "
      "ports 80 and 443 unless given (repeatable)");
  exec->add_option("--tenant", f.tenant,
                   "Run as tenant NAME: its ceilings bind the request (and the profile); its own host ids and store")
      ->check(tenant_option_check, "NAME");
  exec->add_flag("--dry-run", f.dry_run,
                 "Check the request and every check of a run; print the merged spec and what would enforce each limit "
                 "as JSON; run nothing");
  out.push_back({exec,
                 [&g]() -> int {
                   // Bounded in size and depth (json_io.hpp): a request is code plus inputs, not a data set.
                   // The forwarded signals stay blocked while the request is read (main.cpp): a SIGTERM now is
                   // recorded by the run as a signal before the program started, once the request is complete.
                   // A request still not complete 2 s after the signal: no call exists, exit 128+N.
                   int interrupted = 0;
                   Result<std::string> text = read_to_end_holding_signals(
                       STDIN_FILENO, kMaxRequestBytes, kRequestGraceMs, &interrupted, "usage", "the exec request");
                   if (!text && interrupted) {
                     json_error("signal", text.error().message);
                     return 128 + interrupted;
                   }
                   if (!text) return json_error("usage", text.error().describe());
                   auto rq = parse_json_doc(*text, {kMaxRequestBytes}, "usage", "exec request");
                   if (!rq) return json_error("usage", rq.error().message);
                   if (!f.dry_run)
                     if (auto st = check_trace_file(f.trace_file); !st)
                       return json_error("usage", st.error().describe());
                   ExecContext ctx;
                   ctx.dry_run = f.dry_run;
                   ctx.dirs = resolve_dirs(g.state_dir);
                   ctx.invocation_argv = g.argv;
                   ctx.trace_file = f.trace_file;
                   ctx.events = f.events;
                   set_trace_db_flag(f.trace_db);
                   ctx.profile = f.profile;
                   ctx.allow_hosts = f.allow_hosts;
                   if (f.tenant) {
                     if (auto st = check_tenant_name(*f.tenant); !st) return json_error("usage", st.error().message);
                     ctx.before_run = [](RunRequest& run) { return apply_named_tenant(f.tenant, run); };
                   }
                   auto resp = run_exec(*rq, ctx);
                   if (!resp) return json_error(resp.error().stage, resp.error().describe());
                   // Program output is arbitrary bytes: invalid UTF-8 is escaped losslessly and the escaped
                   // strings listed under "escaped_strings" (json_io.hpp), never replaced or fatal.
                   std::printf("%s\n", dump_json(*resp, 2).c_str());
                   return 0;
                 },
                 true});
}

}  // namespace sbx::cli
