// `sbx mcp`'s server loop (runtime/server/mcp_server.cpp, runtime/server/mcp_protocol.cpp): the input is what a
// client writes to the server's stdin — any lines, requests, notifications, 2025-03-26 batches,
// overlong or broken JSON — served by the real loop from a memfd to a memfd. No sandbox is
// started: the launcher refuses every call (the answer is then the call's tool error), so what is
// fuzzed is the protocol half and the loop's line handling, never a process.
// Checked besides "no crash, no sanitizer report": every line the server writes is valid JSON and
// is a JSON-RPC 2.0 message — a response (jsonrpc "2.0", an id that is a string, a number or null,
// exactly one of result or error; an error with an integer code and a string message), a
// notification, or a non-empty batch of responses. A message that needs no answer gets none.
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/base/json_io.hpp"
#include "runtime/server/mcp_server.hpp"
#include "runtime/base/signals.hpp"

using nlohmann::json;

namespace {

class RefusingLauncher : public sbx::mcp::SandboxLauncher {
 public:
  sbx::Result<sbx::mcp::Worker> launch(const json&) override {
    return sbx::make_error("mcp", "no sandbox in the fuzz target");
  }
};

bool valid_id(const json& id) { return id.is_string() || id.is_number_integer() || id.is_number_unsigned() || id.is_null(); }

bool valid_message(const json& m) {
  if (!m.is_object() || m.value("jsonrpc", json()) != "2.0") return false;
  if (m.contains("method")) return m["method"].is_string() && !m.contains("result") && !m.contains("error");
  if (!m.contains("id") || !valid_id(m["id"])) return false;
  if (m.contains("result") == m.contains("error")) return false;
  if (m.contains("result")) return m["result"].is_object();
  const json& e = m["error"];
  return e.is_object() && e.contains("code") && e["code"].is_number_integer() && e.contains("message") &&
         e["message"].is_string();
}


}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // What main.cpp does before serve(): the forwarded signals are blocked (the loop reads them
  // from a signalfd).
  sigset_t set;
  sbx::forwarded_signals(&set);
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  sbx::UniqueFd in(::memfd_create("fuzz-mcp-in", MFD_CLOEXEC)), out(::memfd_create("fuzz-mcp-out", MFD_CLOEXEC));
  if (!in.ok() || !out.ok()) std::abort();
  for (std::size_t off = 0; off < size;) {
    ssize_t n = ::write(in.get(), data + off, size - off);
    if (n <= 0) std::abort();
    off += static_cast<std::size_t>(n);
  }
  ::lseek(in.get(), 0, SEEK_SET);
  sbx::mcp::ServerConfig cfg;
  cfg.max_queued = 4;
  RefusingLauncher launcher;
  if (sbx::mcp::serve(cfg, launcher, in.get(), out.get()) != 0) std::abort();
  ::lseek(out.get(), 0, SEEK_SET);
  auto written = sbx::read_bounded_fd(out.get(), std::size_t{1} << 30, "mcp", "the server's output");
  if (!written) std::abort();
  const std::string& text = *written;
  std::size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    if (nl == std::string::npos) std::abort();  // every message ends its line
    json m = json::parse(text.substr(start, nl - start), nullptr, false);
    if (m.is_discarded()) std::abort();
    if (m.is_array()) {
      if (m.empty()) std::abort();
      for (auto& r : m)
        if (!valid_message(r) || r.contains("method")) std::abort();
    } else if (!valid_message(m)) {
      std::abort();
    }
    start = nl + 1;
  }
  return 0;
}
