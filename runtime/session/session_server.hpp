#pragma once
// An sbx session (`sbx session start|exec|ls|show|stop`, man sbx-session): the deliberate
// exception to one sandbox per call. One sandbox lives for many calls; its state is the files
// under /workspace (a size-capped tmpfs) and its processes, and nothing of it reaches the host
// unless exported. Three processes make one:
//   the server   (serve_session, a daemon of `sbx session start`): the control socket, one call
//                at a time, the idle and max timers, a record per call
//   the runner   its child: run_sandbox() of the session's spec, the sandbox's supervisor; its
//                record is the session's end record (what ran, limits, usage, why it ended)
//   the agent    the sandbox's program (session_agent.hpp), inside every restriction
// The server trusts nothing the agent writes: frames are bounded, output is counted again, and a
// call the agent does not end in time ends the session.
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/session/kernel_relay.hpp"

namespace sbx {

// The bounds of `--idle` and `--max`, and their defaults.
inline constexpr std::int64_t kSessionMaxCeilingMs = 24LL * 3600 * 1000;
inline constexpr std::int64_t kSessionMaxDefaultMs = 3600LL * 1000;
inline constexpr std::int64_t kSessionIdleDefaultMs = 600LL * 1000;
inline constexpr std::int64_t kWorkspaceDefaultBytes = 256LL << 20;
// The session run's own stdout cap: every call's output passes through it (a call's own cap is
// the profile's output_limit); past it the session ends (its frames would be torn).
inline constexpr std::int64_t kSessionStreamBytes = 1LL << 40;
// Connections one server holds at once (a client past it is closed at once).
inline constexpr std::size_t kMaxSessionClients = 16;

struct SessionSettings {
  std::string id;      // the session's (session_store.hpp)
  std::string run_id;  // the session run's record id
  Dirs dirs;
  std::int64_t idle_ms = kSessionIdleDefaultMs, max_ms = kSessionMaxDefaultMs;
  std::int64_t call_timeout_ms = 30000, call_output_limit = 16LL << 20;
  nlohmann::json meta;  // session.json: what `ls` and `show` print
};

// The server's loop; returns its exit status once the session ended and its runner was reaped.
// `ready_fd` (when open) gets "ok\n" when the agent answered (or "error: ...\n") and is closed.
// With `kernel` (sbx kernel run), the session is a Jupyter kernel's: the agent starts ipykernel,
// the relay carries the client's connections, no call is taken, traffic is what keeps it from
// idling, and the kernel's exit ends it (ended_by "kernel_exited").
int serve_session(SessionSettings s, UniqueFd listen, UniqueFd agent_in, UniqueFd agent_out, pid_t runner,
                  UniqueFd ready_fd, std::optional<KernelRelay> kernel = std::nullopt);

}  // namespace sbx
