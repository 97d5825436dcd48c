#include "runtime/session/session_request.hpp"

#include <unistd.h>

#include <algorithm>

#include "runtime/base/clock.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/session/session_agent.hpp"
#include "runtime/session/session_store.hpp"
#include "runtime/session/session_tunnel.hpp"

namespace sbx {
namespace {
// The runner's wall time past --max: the server ends the session at --max itself (ended_by
// "max"); the run's own timeout is the backstop should the server be gone.
constexpr std::int64_t kRunnerSlackMs = 30000;
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
  // The end record says how many calls there were and why the session ended: the server wrote
  // end.json before it closed the agent's stdin; none means the sandbox ended by itself.
  std::string end_file = session_dir(s.dirs, s.id) + "/end.json";
  req.typed.after_run = [session, end_file](const Outcome&, int) {
    AfterRun out;
    nlohmann::json rec = session;
    auto end = read_json_file(end_file, JsonBounds{kMaxSessionMetaBytes}, "sessions", "session end");
    rec["ended_by"] = end && end->is_object() ? end->value("ended_by", "?") : "sandbox_ended";
    if (end && end->is_object() && end->contains("calls")) rec["calls"] = (*end)["calls"];
    out.record["session"] = rec;
    return out;
  };
  return {};
}

}  // namespace sbx
