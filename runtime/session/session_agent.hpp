#pragma once
// The agent of an sbx session: the program of the session's sandbox (`sbx session-agent`, the
// sbx binary itself bound read-only at kAgentPath), so it runs with every restriction a one-shot
// program has (no capabilities, the seccomp filter, the limits) and is no boundary: the calls'
// code may kill or trace it, which only ends its own session. It reads requests on fd 0 and
// writes frames on fd 1 (session_wire.hpp); the session's server (session_server.hpp) trusts
// none of what it writes.
//
// Requests ('J'):
//   {"op": "exec", "argv": [...], "timeout_ms": N, "output_limit": N}    one command
//   {"op": "code", "language": L, "code": C, "timeout_ms": N, "output_limit": N}
//        python: run in the session's one interpreter (session_python.py), whose globals stay from
//        call to call; sh, bash, node: `L -c C` (node -e), a new process each call
//   {"op": "interrupt"}   SIGINT to the running call (then SIGKILL after kInterruptGraceMs)
//   EOF                   every process of the session is killed; the agent exits 0
// Frames back: {"event": "ready"} once, then per call 'O' and 'E' chunks (at most output_limit
// bytes of each stream; the rest is read and counted as dropped) and one
//   {"event": "done", "exit_code": N|null, "signal": S|null, "timed_out": b, "interrupted": b,
//    "stdout_bytes": N, "stderr_bytes": N, "stdout_dropped": N, "stderr_dropped": N,
//    "wall_ms": N, "interpreter": "kept"|"new"|"lost"}      (python only: "interpreter")
// or {"event": "error", "message": M} for a request it refuses.
// A call ends when its process (or the interpreter's status line) says so; processes it left
// behind keep running (a session keeps processes) but no longer write into that call's output.
#include <string_view>

namespace sbx {

inline constexpr std::string_view kAgentPath = "/run/sbx-agent";  // inside the sandbox
inline constexpr std::string_view kWorkspace = "/workspace";      // the session's writable tree
inline constexpr int kInterruptGraceMs = 2000;

// The embedded interpreter loop (runtime/session/session_python.py) and its SHA-256.
std::string_view session_python_text();
std::string_view session_python_sha256();

// `sbx session-agent`: the loop above; the exit status of the agent.
int session_agent_main();

}  // namespace sbx
