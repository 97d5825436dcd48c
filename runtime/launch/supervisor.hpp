#pragma once
// The supervisor: one single-threaded poll loop over the sandbox's init (pidfd), the program's
// stdout and stderr (output_relay.hpp: relayed with byte caps, hashed, never blocking on sbx's
// reader), the caller's stdin toward the program (stdin_relay.hpp: the same relay, the other way), the child message pipe, a timerfd for the wall-time limit (millisecond precision, no
// polling), a timerfd for the CPU-time budget and a signalfd for SIGINT/SIGTERM/SIGHUP/SIGQUIT
// (forwarded to the program's process group through init; if it has not exited after a grace
// period, or on a second signal, the sandbox is killed).
//
// Nothing in the loop waits on anything but poll(): every fd it reads is non-blocking, writes go
// through the relays' non-blocking sinks, and a limit whose timer cannot be armed or whose
// budget cannot be read ends the run as sbx's own failure (fail closed: no run goes on without
// a limit it was given).
#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "runtime/model/caps.hpp"
#include "runtime/launch/child.hpp"
#include "runtime/base/error.hpp"
#include "runtime/linux/events.hpp"
#include "runtime/base/output_relay.hpp"
#include "runtime/egress/proxy.hpp"
#include "runtime/linux/seccomp_notify.hpp"
#include "runtime/linux/stdin_relay.hpp"

namespace sbx {

// A one-shot CLOCK_MONOTONIC timerfd (non-blocking, close-on-exec) that fires after `ms`
// (at least 1 ns: 0 fires at once). The fd, or the errno of timerfd_create/timerfd_settime.
Result<int> arm_timerfd(std::int64_t ms);

struct SuperviseInput {
  pid_t pid = -1;  // sbx's init in the sandbox
  int pidfd = -1;  // the caller's: it stays open
  // false: init is a template's fork (sandbox.cpp, spawn_from_template), not our child: its exit
  // is its pidfd turning readable, and its wait status is the template's to reap.
  bool init_is_child = true;
  // A template's fork only: the supervisor's end of the sync pipe, which end_sandbox writes the
  // end byte on before its signal. That pid 1 shares the call's uid, and the call can bury the
  // signal among its own (warm_template.py, _end_requested); no process of the call holds the pipe.
  int end_fd = -1;
  // Read ends that supervise() takes over and closes (as do seccomp_sock's notifier and the
  // relays of out_fd and err_fd); the caller gives them up.
  int msg_fd = -1;
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
  // A usage that cannot be read ends the run (error), as a timer that cannot be armed does.
  std::optional<std::int64_t> cpu_budget_ms;
  std::function<Result<std::int64_t>()> cpu_used_us;
  double max_cpus = 1;
  // The egress proxy (null: network mode "none"). Its sockets join the poll loop while the
  // sandbox runs; every connection is closed when init has exited.
  EgressProxy* proxy = nullptr;
  // The program's stdin (stdin_relay.hpp; null: /dev/null). Its relay is polled like the output
  // relays while init lives; with a pty, the master init hands over becomes stdout's source.
  CallerStdin* input = nullptr;
  // Live events (events.hpp; null: none). The stream is drained by this loop with non-blocking
  // writes when poll() says its destination has room; the run cgroup's limit events are read
  // when the kernel signals them. Neither keeps the loop going once the run is over.
  EventStream* events = nullptr;
  CgroupEvents* cgroup_events = nullptr;
  // How timers are armed (null: arm_timerfd). A seam for the tests of the fail-closed paths.
  std::function<Result<int>(std::int64_t ms)> arm_timer;
};

struct SuperviseResult {
  bool timed_out = false;
  bool cpu_exceeded = false;
  int forwarded_signal = 0;         // first signal sbx received and forwarded
  bool killed_after_grace = false;  // the program outlived the grace period (or a 2nd signal came)
  int second_signal = 0;            // the signal that ended the grace period early, if one did
  // The program had ended, but the wall-time limit came while its output still waited for a
  // reader that did not take it (timed_out is set too).
  bool delivery_timed_out = false;
  // A forwarded signal that came after the program had ended, while its output still waited for
  // the reader: what waited was dropped (undelivered_bytes), and sbx ended.
  int signal_after_end = 0;
  // sbx itself failed while supervising (a limit's timer, the CPU budget, poll): the sandbox was
  // killed at once, and the run is a setup_error.
  std::optional<Error> error;
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
  // The program's capability sets right after its execve, as init read them (child.hpp kStarted).
  std::optional<ProcessCaps> program_caps;
  // The realtime clock (ns) when init saw the program's execve return; 0 when it did not start.
  long long program_exec_ns = 0;
};

// Runs until init has exited, or has reported that the sandbox is empty, and both streams are
// closed and delivered (or cut by the wall-time limit, or their readers have gone).
SuperviseResult supervise(const SuperviseInput& in);

namespace supervisor_detail {
class Supervisor;  // supervisor.cpp's
}

// supervise() in two steps, for a pooled sandbox (runtime/launch/sandbox.cpp, hand_out): made
// while the sandbox waits for its call (the relays, the seccomp notifier, the loop's
// participants, the report pipe made non-blocking), run once the call is handed to init. The
// process that hands a call over runs before the processes it woke (bench/README.md, Spawn), so
// what it does between the hand-over and its first poll delays the call's first line: that is
// now only arming the call's timers. `in` must outlive it; its start_ms, timeout_ms,
// timed_out_before_start, output_limit_bytes, cpu budget and events are read by run(), and
// may be set until then.
class PreparedSupervisor {
 public:
  explicit PreparedSupervisor(const SuperviseInput& in);
  ~PreparedSupervisor();
  PreparedSupervisor(const PreparedSupervisor&) = delete;
  PreparedSupervisor& operator=(const PreparedSupervisor&) = delete;
  SuperviseResult run();

 private:
  std::unique_ptr<supervisor_detail::Supervisor> s_;
};

// Waits for init when supervise() left it exiting (init_pending); returns its wait status.
int reap_init(pid_t pid);

}  // namespace sbx
