#pragma once
// Starting a session (session_server.hpp): `sbx session start` and `sbx mcp`'s session_start
// fork its server as a daemon and wait until the agent answers; `sbx kernel run` serves it in
// the foreground (jupyter_client owns that process).
#include <optional>
#include <string>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/launch/run_request.hpp"
#include "runtime/session/kernel_relay.hpp"
#include "runtime/session/session_server.hpp"

namespace sbx {

// How long a start waits for the session's sandbox to answer.
inline constexpr int kSessionStartWaitMs = 120000;

// What comes before the fork: the session's request (make_session_request), its directory
// (under the store's maximum of running sessions), its socket, and the two channels between the
// server and the runner.
struct PreparedSession {
  RunRequest req;
  SessionSettings s;
  UniqueFd listen;
  UniqueFd to_agent[2], from_agent[2];  // [0] the server's end, [1] the runner's
};

// `req` is a run request as `sbx run` makes it (any command: the session's agent replaces it);
// `s` has the store (dirs), --idle and --max. Errors: stage "usage" or "sessions", one line.
// `tenant`: the --tenant the request was made for (its ceilings bind the session as a whole).
Result<PreparedSession> prepare_session(RunRequest req, SessionSettings s, const std::string& kernel = "",
                                        const std::optional<std::string>& tenant = std::nullopt);

// The daemon: its server, and the runner under it; returns once the agent answered (the
// settings, with the session's id and run id) or with what kept it from starting.
Result<SessionSettings> start_session(PreparedSession p);

// `sbx kernel run`: the runner forked, this process the server until the kernel ends.
int run_kernel_session(PreparedSession p, KernelRelay relay);

}  // namespace sbx
