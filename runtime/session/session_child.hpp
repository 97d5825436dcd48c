#pragma once
// What every process the session's agent starts gets before its execve (session_agent.cpp,
// session_tunnel.cpp): its own process group (a timeout or the session's end kills the whole of
// it), the default signal dispositions and an empty mask (the agent blocks SIGCHLD), stdin from
// /dev/null, stdout and stderr on `out_w` and `err_w`, and no fd above `keep_to`.
namespace sbx {

void session_child_setup(int out_w, int err_w, int keep_to);

}  // namespace sbx
