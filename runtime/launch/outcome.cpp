#include "runtime/launch/outcome.hpp"

#include <signal.h>
#include <sys/wait.h>

#include "runtime/base/signals.hpp"
#include "runtime/launch/supervisor.hpp"

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

namespace {

// Who ended a run that a forwarded signal ended, for the record's reason.
std::string forwarded_reason(const SuperviseResult& s, bool killed_by_sbx, int kill_grace_ms) {
  std::string fwd = signal_name(s.forwarded_signal);
  if (!killed_by_sbx) return fwd + " received by sbx and forwarded to the program's process group";
  if (s.second_signal)
    return "killed by sbx (SIGKILL) at a second signal (" + signal_name(s.second_signal) + ") after forwarding " + fwd;
  return "killed by sbx (SIGKILL): still running " + std::to_string(kill_grace_ms) + " ms after sbx forwarded " + fwd;
}

}  // namespace

Outcome outcome_from_supervision(const SuperviseResult& s, int kill_grace_ms) {
  Outcome o;
  if (s.error) {  // sbx could not enforce what it was asked to: the sandbox was killed
    o.status = RunStatus::setup_error;
    o.error = *s.error;
    return o;
  }
  if (s.setup_error) {
    const ChildMsg& m = *s.setup_error;
    o.status = RunStatus::setup_error;
    o.error = Error{m.stage, m.err, m.message};
    return o;
  }
  if (s.seccomp_kill) {
    // A kill action arrives as a notification: the supervisor named the call, then killed the
    // sandbox with the call still blocked. Reported like the kernel's SIGSYS kill (exit 159).
    o.status = RunStatus::seccomp_violation;
    o.signal = SIGSYS;
    o.reason = "killed by the seccomp policy: " + s.seccomp_kill->name + " (" + s.seccomp_kill->arch + ", " +
               s.seccomp_kill->action + ")";
    return o;
  }
  if (s.timed_out || s.cpu_exceeded) {
    o.status = RunStatus::timeout;
    o.reason = !s.timed_out ? "cpu"
               : s.delivery_timed_out ? "wall: the program had ended, but its output was not all taken by the reader"
                                      : "wall";
    o.signal = SIGKILL;
    return o;
  }
  if (s.program_wait_status) {
    o = outcome_from_wait_status(*s.program_wait_status);
    // The program's own status: it ended before any SIGKILL of sbx's could reach it.
    if (s.forwarded_signal) o.reason = forwarded_reason(s, false, kill_grace_ms);
    else if (s.signal_after_end)
      o.reason = signal_name(s.signal_after_end) +
                 " received by sbx after the program had ended: its output still waiting for the reader was dropped";
    else if (o.signal == SIGPIPE && (s.out.reader_closed || s.err.reader_closed))
      o.reason = std::string("the reader of sbx's ") + (s.out.reader_closed ? "stdout" : "stderr") +
                 " closed it, and sbx closed the program's pipe";
    return o;
  }
  // Init died without reporting: killed by sbx after a forwarded signal, or by something else.
  o.status = RunStatus::signaled;
  o.signal = WIFSIGNALED(s.init_wait_status) ? WTERMSIG(s.init_wait_status) : SIGKILL;
  if (s.forwarded_signal) o.reason = forwarded_reason(s, s.killed_after_grace, kill_grace_ms);
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
