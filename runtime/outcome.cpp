#include "runtime/outcome.hpp"

#include <signal.h>
#include <sys/wait.h>

namespace sbx {

const char* to_string(RunStatus s) {
  switch (s) {
    case RunStatus::ok: return "ok";
    case RunStatus::exit_nonzero: return "exit_nonzero";
    case RunStatus::signaled: return "signaled";
    case RunStatus::timeout: return "timeout";
    case RunStatus::oom: return "oom";
    case RunStatus::seccomp_violation: return "seccomp_violation";
    case RunStatus::output_limit: return "output_limit";
    case RunStatus::input_invalid: return "input_invalid";
    case RunStatus::output_invalid: return "output_invalid";
    case RunStatus::setup_error: return "setup_error";
  }
  return "setup_error";
}

Outcome outcome_from_wait_status(int ws) {
  Outcome o;
  if (WIFEXITED(ws)) {
    o.exit_code = WEXITSTATUS(ws);
    o.status = *o.exit_code == 0 ? RunStatus::ok : RunStatus::exit_nonzero;
  } else if (WIFSIGNALED(ws)) {
    o.signal = WTERMSIG(ws);
    o.status = *o.signal == SIGSYS ? RunStatus::seccomp_violation : RunStatus::signaled;
  }
  return o;
}

int exit_status_for(const Outcome& o) {
  switch (o.status) {
    case RunStatus::ok:
    case RunStatus::exit_nonzero:
      return o.exit_code.value_or(0);
    case RunStatus::signaled:
    case RunStatus::oom:
    case RunStatus::seccomp_violation:
      return 128 + o.signal.value_or(SIGKILL);
    case RunStatus::timeout:
      return 124;
    case RunStatus::input_invalid:
    case RunStatus::output_invalid:
      return 65;
    case RunStatus::output_limit:
      // Artifact export went over its caps: the program itself may still have succeeded.
      return o.exit_code.value_or(o.signal ? 128 + *o.signal : 125);
    case RunStatus::setup_error:
      // The entrypoint could not be started: shell conventions 127 (not found) / 126 (not executable).
      if (o.error && o.error->stage == "execve")
        return (o.error->err == ENOENT || o.error->err == ENOTDIR) ? 127 : 126;
      return 125;
  }
  return 125;
}

}  // namespace sbx
