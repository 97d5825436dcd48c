#include "runtime/session/session_request.hpp"

#include <unistd.h>

#include <algorithm>

#include "runtime/base/clock.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/session/session_agent.hpp"
#include "runtime/session/session_store.hpp"
#include "runtime/session/session_tunnel.hpp"
#include "runtime/session/session_wire.hpp"

namespace sbx {
namespace {
// The runner's wall time past --max: the server ends the session at --max itself (ended_by
// "max"); the run's own timeout is the backstop should the server be gone.
constexpr std::int64_t kRunnerSlackMs = 30000;
// How long the runner waits for the server's end.json once the sandbox ended by itself: the
// server writes it as soon as it sees the agent's channel close, within milliseconds; the bound
// is for a host too loaded to run it (an ASan build beside another suite), and polled every 50 ms.
constexpr std::int64_t kEndFileWaitMs = 10000;
constexpr useconds_t kEndFilePollUs = 50000;

// How the session ended and its calls, for the session run's record: the server's end.json
// (written before it closed the agent's stdin, or at once when the sandbox ended by itself: the
// runner may get here first and waits for it, bounded). A server that is gone (no longer
// listening: killed) writes none; then "server_gone" (as its tombstone says) with the calls its
// session.json last counted.
nlohmann::json session_end(const std::string& dir) {
  const std::int64_t until = monotonic_ms() + kEndFileWaitMs;
  std::string ended_by = "sandbox_ended";
  for (;;) {
    auto end = read_session_file(dir, "end.json");
    if (end) {
      nlohmann::json out = {{"ended_by", json_str(*end, "ended_by", "?")}};
      if (auto it = end->find("calls"); it != end->end() && it->is_number_unsigned()) out["calls"] = *it;
      return out;
    }
    if (!session_server_answers(dir)) {
      ended_by = "server_gone";
      break;
    }
    if (monotonic_ms() >= until) break;
    ::usleep(kEndFilePollUs);
  }
  nlohmann::json out = {{"ended_by", ended_by}};
  if (auto meta = read_session_file(dir, "session.json"))
    if (auto it = meta->find("calls"); it != meta->end() && it->is_number_unsigned()) out["calls"] = *it;
  return out;
}
}  // namespace

Status make_session_request(RunRequest& req, SessionSettings& s, const std::string& self_exe, const std::string& kernel,
                            const Tenant* tenant) {
  RunSpec& spec = req.spec;
  if (s.idle_ms < 1 || s.max_ms < 1 || s.max_ms > kSessionMaxCeilingMs)
    return make_error("usage", "session: --max must be from 1ms to 24h and --idle at least 1ms");
  s.call_timeout_ms = spec.limits.timeout_ms.value_or(s.call_timeout_ms);
  s.call_output_limit = spec.limits.output_limit_bytes.value_or(s.call_output_limit);
  spec.limits.timeout_ms = s.max_ms + kRunnerSlackMs;
  spec.limits.output_limit_bytes = kSessionStreamBytes;
  if (tenant) {
    auto ceiling = [tenant](const char* key) {
      const auto& keys = tenant->limit_keys_set;
      return std::find(keys.begin(), keys.end(), key) != keys.end();
    };
    if (ceiling("timeout_ms") && tenant->limits.timeout_ms) {
      std::int64_t t = *tenant->limits.timeout_ms;
      if (s.max_ms > t)
        return make_error("usage", "session: --max " + std::to_string(s.max_ms) + "ms passes tenant '" + tenant->name +
                                       "''s timeout ceiling (" + std::to_string(t) +
                                       "ms), which bounds a session's whole life: give --max of at most that");
      spec.limits.timeout_ms = std::min(*spec.limits.timeout_ms, t);
    }
    if (ceiling("output_limit_bytes") && tenant->limits.output_limit_bytes)
      spec.limits.output_limit_bytes = std::min(*spec.limits.output_limit_bytes, *tenant->limits.output_limit_bytes);
  }
  // The session's own places: a mount there would replace the agent, the workspace or the
  // kernel's sockets.
  auto own = [](const std::string& dst) {
    return dst == kWorkspace || dst == kAgentPath || dst == kKernelDir ||
           dst.starts_with(std::string(kKernelDir) + "/");
  };
  for (const auto& t : spec.tmpfs)
    if (own(t.dst)) return make_error("usage", "session: --tmpfs " + t.dst + " is the session's own; mount elsewhere");
  for (const auto* list : {&spec.binds, &spec.inputs})
    for (const auto& b : *list)
      if (own(b.dst))
        return make_error("usage",
                          "session: a bind on " + b.dst + " is the session's own; bind elsewhere (e.g. /data)");
  spec.argv = {std::string(kAgentPath), "session-agent"};
  spec.binds.push_back(BindMount{self_exe, std::string(kAgentPath), false, false});
  spec.tmpfs.push_back(TmpfsMount{std::string(kWorkspace), kWorkspaceDefaultBytes, false});
  spec.workdir = std::string(kWorkspace);
  if (!kernel.empty()) spec.tmpfs.push_back(TmpfsMount{std::string(kKernelDir), 1LL << 20, true});
  req.run_id = make_run_id();
  s.run_id = req.run_id;
  req.io.stdin_plan = StdinPlan{StdinMode::pipe, "socket", true};
  s.meta = {{"id", s.id},
            {"run_id", s.run_id},
            {"started_at", rfc3339_now()},
            {"uid", ::getuid()},
            {"profile", spec.profile},
            {"image", spec.image},
            {"idle_ms", s.idle_ms},
            {"max_ms", s.max_ms},
            {"call_timeout_ms", s.call_timeout_ms},
            {"call_output_limit", s.call_output_limit},
            {"workspace_bytes", kWorkspaceDefaultBytes},
            {"calls", 0},
            {"state", "starting"}};
  if (req.record_extra.contains("tenant")) s.meta["tenant"] = req.record_extra["tenant"];
  if (!kernel.empty()) s.meta["kernel"] = kernel;
  nlohmann::json session = {{"id", s.id},
                            {"idle_ms", s.idle_ms},
                            {"max_ms", s.max_ms},
                            {"call_timeout_ms", s.call_timeout_ms},
                            {"call_output_limit", s.call_output_limit}};
  if (!kernel.empty()) session["kernel"] = kernel;
  // The end record says how many calls there were and why the session ended (session_end).
  std::string dir = session_dir(s.dirs, s.id);
  req.typed.after_run = [session, dir](const Outcome&, int) {
    AfterRun out;
    nlohmann::json rec = session;
    nlohmann::json end = session_end(dir);  // kept: items() does not extend a temporary's life
    for (auto& [k, v] : end.items()) rec[k] = v;
    out.record["session"] = rec;
    return out;
  };
  return {};
}

}  // namespace sbx
