#pragma once
// How a run ended, and the exit status sbx returns for it (docs/ARCHITECTURE.md, "Exit status"; man/sbx.1, EXIT STATUS):
//   child's own code | 128+N killed by signal N | 124 wall-time limit | 125 sbx failed |
//   126/127 entrypoint not executable / not found | 65 typed IO contract broken.
#include <optional>
#include <string>

#include "runtime/base/error.hpp"

namespace sbx {

enum class RunStatus {
  ok,
  exit_nonzero,
  signaled,
  timeout,
  oom,
  seccomp_violation,
  output_limit,
  input_invalid,
  output_invalid,
  setup_error,
};

const char* to_string(RunStatus s);

struct Outcome {
  RunStatus status = RunStatus::setup_error;
  std::optional<int> exit_code;  // the program's own exit code, if it exited
  std::optional<int> signal;     // the signal that killed it, if any
  std::optional<Error> error;    // why sbx failed / what it enforced
  std::string reason;            // extra detail, e.g. "wall" or "cpu" for timeout
};

// Builds the outcome from a wait status (WIFEXITED/WIFSIGNALED) of the program.
Outcome outcome_from_wait_status(int wait_status);

// The outcome of a supervised run (supervisor.hpp), in this order: sbx's own failure or the
// sandbox's setup error, a seccomp kill, a time limit, the program's own status, and a sandbox
// killed without a report (by sbx after a forwarded signal, or by something else). The reason
// says who ended the run when it was not the program itself: a forwarded signal, sbx's SIGKILL
// after the grace period of `kill_grace_ms` or at a second signal, a reader that went away.
struct SuperviseResult;
Outcome outcome_from_supervision(const SuperviseResult& s, int kill_grace_ms);

// The exit status of `sbx run` for this outcome.
int exit_status_for(const Outcome& o);

}  // namespace sbx
