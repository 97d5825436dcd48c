#pragma once
// How a run ended, and the exit status sbx returns for it (docs/ARCHITECTURE.md, "Exit status"; man/sbx.1, EXIT STATUS):
//   child's own code | 128+N killed by signal N | 124 wall-time limit | 125 sbx failed |
//   126/127 entrypoint not executable / not found | 65 typed IO contract broken.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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
// A status as a record names it (`sbx trace ls --status`): one of to_string's words; anything else
// is an error that lists them, with a did-you-mean for a typo ("timout").
Result<RunStatus> parse_run_status(std::string_view text);

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

// The error that makes a supervised run a setup_error (sbx's own failure while supervising, or
// init's report of a failed setup step); none when the program's setup went through.
std::optional<Error> supervision_error(const SuperviseResult& s);

// The exit status of `sbx run` for this outcome.
int exit_status_for(const Outcome& o);

// A typed-IO caller's verdict on what the run produced (sbx pack run, sbx exec, a pooled call):
// output_invalid and the error saying where. It stands only for a run that otherwise succeeded
// (status ok): a run that failed on its own terms keeps its status, its output is not judged.
struct ContractVerdict {
  RunStatus status = RunStatus::output_invalid;
  Error error;
};

// The outcome of a run its caller refused before anything was created (RunRequest::typed.refuse;
// step 1 of decide_outcome): an input that broke the contract is input_invalid, exit 65.
Outcome refusal(const ContractVerdict& verdict);

// Everything that decides how a run ended, gathered by the run's phases (launch/sandbox.cpp)
// as they go; no judgement in it. decide_outcome() turns it into the outcome, the one place
// that does.
struct RunFacts {
  // The caller refused the run before anything was created (input_invalid, or a contract that
  // no longer compiles): that outcome stands as given.
  std::optional<Outcome> refused;
  // sbx failed preparing or starting the sandbox (before or at the hand-out).
  std::optional<Error> setup_error;
  // A forwarded signal sbx took before the program started: the program was not started.
  int signal_before_start = 0;
  // The supervision's report (supervisor.hpp), once the sandbox ran; and the grace period sbx
  // gave after forwarding a signal, for the reason.
  const SuperviseResult* supervised = nullptr;
  int kill_grace_ms = 0;
  // A hint for the supervision's setup error (preflight.hpp add_setup_hint); "" when none.
  std::string setup_hint;
  // Read after the end. The artifact export went over its caps (--output-max-bytes/-files).
  bool export_limit_hit = false;
  // The CPU budget when it was RLIMIT_CPU (no run cgroup), and the CPU time rusage counted.
  std::optional<std::int64_t> rlimit_cpu_ms;
  std::int64_t cpu_used_ms = 0;
  // memory.events oom_kill of the run cgroup (0 without one).
  std::int64_t oom_kills = 0;
  // The typed-IO caller's verdict on the output (after_run, run_request.hpp).
  std::optional<ContractVerdict> contract;
};

// How the run ended, decided once from the facts. Precedence, first match wins (man/sbx.1, EXIT
// STATUS, "Which status when several apply", says the same):
//   1. refused by the caller             the caller's outcome (input_invalid 65, or setup_error 125)
//   2. sbx's setup error                 setup_error (125; 126/127 at stage execve)
//   3. a signal before the start         signaled 128+N, the program not started
//   4. the supervision, in its order     (outcome_from_supervision: sbx's own failure or init's
//                                        setup error > seccomp kill > wall or CPU timeout >
//                                        the program's own status > init killed without a report)
//   then refinements of that status, each needing the status it names:
//   5. signaled SIGKILL/SIGXCPU, RLIMIT_CPU budget, >= 80% of it used   -> timeout "cpu" (124)
//   6. signaled SIGKILL with a run cgroup that counted an OOM kill      -> oom (137)
//   7. signaled SIGXFSZ (an RLIMIT_FSIZE sbx's caller set)              -> reason names RLIMIT_FSIZE
//   8. ok, artifact export over its caps                                -> output_limit (its own code)
//   9. ok, a typed-IO contract verdict (with_verdict)                   -> output_invalid (65)
// So a timeout beats an OOM kill (the timer's SIGKILL may look like one), a seccomp kill beats
// the SIGSYS/SIGKILL it ends in, and any failure beats the output limit and the contract verdict.
// 5 and 6 cannot both apply (RLIMIT_CPU only without a cgroup), nor 8 and 9 (8 leaves ok).
Outcome decide_outcome(const RunFacts& f);

// Step 9 alone: the typed-IO caller judges the output of the outcome decide_outcome gave it
// (it needs that outcome to know whether to judge at all), and its verdict is applied here,
// under the same rule: only an ok run becomes output_invalid. decide_outcome(f) ==
// with_verdict(decide_outcome(f without contract), f.contract).
Outcome with_verdict(Outcome o, const std::optional<ContractVerdict>& verdict);

// A limit the run hit, as the record (result.limits_hit) and the end-of-run line name it.
struct LimitHit {
  std::string name;   // "timeout", "cpu_time", "memory", "pids", "file_size", "output", "artifacts"
  std::string value;  // the limit, as a user writes it ("64", "1G", "30s"); "" when unknown
  std::string fix;    // how to raise it
};

// What shows that a limit was hit, read after the end. Only what the kernel or sbx reports: in
// the rlimit fallback an allocation refused by RLIMIT_DATA (ENOMEM) and a fork refused by
// RLIMIT_NPROC (EAGAIN) are the program's own errors, which sbx never sees, so they are not here
// (man sbx-run, LIMITS HIT).
struct LimitFacts {
  const Outcome* outcome = nullptr;    // decide_outcome's: timeout, oom, output_limit, SIGXFSZ
  bool output_truncated = false;       // stdout or stderr cut at --output-limit
  std::int64_t pids_max_events = 0;    // the run cgroup's pids.events max (forks refused)
  std::int64_t memory_oom_events = 0;  // the run cgroup's memory.events oom + oom_kill
  std::optional<std::int64_t> timeout_ms, cpu_time_ms, memory_bytes, pids, output_limit_bytes;
};

// Every limit the facts show was hit, in a fixed order (time, memory, pids, file size, output).
std::vector<LimitHit> limits_hit(const LimitFacts& f);

// The end-of-run line for the hits no other line tells (the wall-time, CPU-time and output-limit
// lines are sbx's already): "limit hit: pids (64): raise it with --pids N"; "" when none is left.
std::string limits_hit_line(const std::vector<LimitHit>& hits);

}  // namespace sbx
