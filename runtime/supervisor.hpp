#pragma once
// The supervisor: one single-threaded poll loop over the sandbox's init (pidfd), its stdout and
// stderr pipes (passed through with byte caps and hashed), the child message pipe, a timerfd for
// the wall-time limit (millisecond precision, no polling) and a signalfd for SIGINT/SIGTERM/
// SIGHUP/SIGQUIT (forwarded to the program; if it has not exited after a grace period, or on a
// second signal, the sandbox is killed).
#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "runtime/child.hpp"
#include "runtime/proxy.hpp"
#include "runtime/seccomp_notify.hpp"

namespace sbx {

struct StreamStats {
  std::uint64_t bytes = 0;          // bytes passed through (what the reader of sbx saw)
  std::uint64_t dropped_bytes = 0;  // bytes the program wrote past the limit
  std::string sha256;               // of the bytes passed through
  bool truncated = false;
};

struct SuperviseInput {
  pid_t pid = -1;   // sbx's init in the sandbox
  int pidfd = -1;
  int msg_fd = -1;  // read ends
  int out_fd = -1;
  int err_fd = -1;
  // Where the program's output is passed through (sbx exec captures it in memfds instead).
  int out_dst = 1;
  int err_dst = 2;
  std::optional<std::int64_t> timeout_ms;
  // CLOCK_MONOTONIC ms when the sandbox was created (0: now): wall time and the seccomp log
  // count from there, also when init set up before supervise() was called.
  std::int64_t start_ms = 0;
  bool timed_out_before_start = false;  // the limit ran out while a shared init set up (init is dead)
  std::optional<std::int64_t> output_limit_bytes;
  int kill_grace_ms = 2000;
  int signal_fd = -1;  // signalfd for the forwarded signals
  // Seccomp: the supervisor's end of the listener handoff socket (-1: unconfined) and the
  // policy with its real actions, evaluated for each notification (seccomp_notify.hpp).
  int seccomp_sock = -1;
  const std::vector<sock_filter>* seccomp_reference = nullptr;
  const std::vector<std::string>* seccomp_named = nullptr;  // always listed in violations
  // CPU-time budget over the whole run cgroup: a timerfd fires when the budget could at the
  // earliest be spent (remaining / max CPUs); the supervisor then reads the usage and re-arms.
  std::optional<std::int64_t> cpu_budget_ms;
  std::function<std::optional<std::int64_t>()> cpu_used_us;
  double max_cpus = 1;
  // The egress proxy (null: network mode "none"). Its sockets join the poll loop while the
  // sandbox runs; every connection is closed when init has exited.
  EgressProxy* proxy = nullptr;
};

struct SuperviseResult {
  bool timed_out = false;
  bool cpu_exceeded = false;
  int forwarded_signal = 0;          // first signal sbx received and forwarded
  bool killed_after_grace = false;   // the program outlived the grace period (or a 2nd signal came)
  std::optional<ChildMsg> setup_error;
  std::optional<int> program_wait_status;
  int init_wait_status = 0;
  // Init reported the program's status after emptying the sandbox, and is still exiting (its
  // teardown overlaps the recording): the caller reaps it with reap_init() before it returns.
  bool init_pending = false;
  struct rusage usage {};
  std::int64_t wall_ms = 0;
  StreamStats out, err;
  std::vector<SeccompViolation> violations;      // refused system calls, aggregated
  SeccompViolationTotals seccomp_totals;         // what the list of violations left out
  std::optional<SeccompViolation> seccomp_kill;  // the call whose kill action ended the run
};

// Runs until init has exited, or has reported that the sandbox is empty, and both streams are
// closed.
SuperviseResult supervise(const SuperviseInput& in);

// Waits for init when supervise() left it exiting (init_pending); returns its wait status.
int reap_init(pid_t pid);

}  // namespace sbx
