#pragma once
// The run request of a session (session_server.hpp): what `sbx session start` makes of the run
// options it was given.
#include <string>

#include "runtime/base/error.hpp"
#include "runtime/launch/run_request.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/session/session_server.hpp"

namespace sbx {

// Turns the run request `sbx session start` built from its run options into the session's: the
// agent as the program (sbx's own binary, `self_exe`, bound read-only at kAgentPath), /workspace
// as a tmpfs and the working directory, the profile's timeout and output limit kept as each
// call's, the run's wall time the session's --max, stdin a pipe from the server. Fills `s` from
// the request (limits per call, the meta) and the request's run id and session record parts.
// With a `kernel` name (`sbx kernel run`): also the tmpfs the kernel's ipc sockets live on
// (session_tunnel.hpp, kKernelDir), and the meta and record say it is a Jupyter kernel's.
// A `tenant`'s ceilings bind the session as a whole: its timeout ceiling bounds --max (a session
// is one run), its output ceiling the session's stream.
Status make_session_request(RunRequest& req, SessionSettings& s, const std::string& self_exe,
                            const std::string& kernel = "", const Tenant* tenant = nullptr);

}  // namespace sbx
