#pragma once
// Which mechanism enforces each limit of a run, decided before anything runs. With cgroup v2
// controllers available and writable, the kernel enforces memory/pids/cpu on the whole sandbox;
// without them sbx falls back to per-process rlimits where one exists and says so — every decision
// carries its mechanism and, when weaker than asked or not applied, the reason. The trace's
// `enforcement` section and --require-limits are built from this plan.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/linux/cgroup.hpp"
#include "runtime/model/spec.hpp"

namespace sbx {

// The rlimits every sandbox's program gets, whatever its limits (Run::prepare_child; a template's
// calls through their job): no core file, and a share of the three kernel quotas that a user
// namespace does not separate. The kernel counts queued signals (RLIMIT_SIGPENDING: real-time
// signals, POSIX timers), POSIX message queue bytes (RLIMIT_MSGQUEUE) and SysV shared memory
// locked with SHM_LOCK (RLIMIT_MEMLOCK) per user at every level of the user namespace chain
// (kernel/ucount.c, inc_rlimit_ucounts), so a sandbox's count is also that of the host user who
// ran sbx (the owner of its user namespace): unbounded, one program that filled its own quota
// (100,000 blocked sigqueue calls, ten message queues, 8 MiB of locked segments) left none to that
// user's other processes (root's too for the first two, when root runs sbx) until it ended
// (tests/integration/test_kernel_quotas.py). Two bounds, from the two checks the kernel makes:
//   - all of sbx's sandboxes together (however many runs, servers and calls): at each level the
//     count is checked against the limit its user namespace's creator had when it made it
//     (create_user_ns: the soft limit), so sbx holds its own soft limit at 1/kHostKeeps of its
//     hard one (of the kernel's default for a user where that is unlimited) before it makes any
//     (hold_kernel_quotas, at sbx's start): the host user's own processes, which check the same
//     count against their own limits, always keep the rest;
//   - each sandbox: 1/kKernelQuotaShare of that held soft limit, as soft and hard limit (a program
//     cannot raise a hard limit: that needs CAP_SYS_RESOURCE over the initial user namespace), so
//     that one sandbox cannot take all its siblings' part. Init gets it too
//     (ChildConfig::init_rlimits).
// RLIMIT_MEMLOCK also caps what each process may mlock(2): 512 KiB of the usual 8 MiB.
inline constexpr std::uint64_t kHostKeeps = 2;
inline constexpr std::uint64_t kKernelQuotaShare = 8;
// Lowers sbx's own soft limit of each of the three quotas to its ceiling / kHostKeeps where it is
// above that. Idempotent, so every sbx process does it (sbx_main): a worker, a fork server's
// child, a server's children.
Status hold_kernel_quotas();
// What sbx's soft limit of a quota is held at, for its hard limit `hard`: 1/kHostKeeps of it, of
// `kernel_default` where it is unlimited.
std::uint64_t held_kernel_quota(std::uint64_t hard, std::uint64_t kernel_default);
std::vector<std::pair<int, std::uint64_t>> fixed_rlimits();
// A sandbox's share of a quota whose soft limit (held) is `own`; of `kernel_default` / kHostKeeps
// where own is unlimited (hold_kernel_quotas was not called: a unit test).
std::uint64_t kernel_quota_share(std::uint64_t own, std::uint64_t kernel_default);

struct LimitDecision {
  std::string limit;      // "memory", "pids", "cpus", "cpu_time", "timeout", "output"
  std::string value;      // as asked: bytes, count, CPUs, milliseconds
  std::string mechanism;  // "cgroup v2 memory.max", "rlimit RLIMIT_NPROC", "supervisor timerfd", ...
                          // ("" when not applied)
  std::string reason;     // why this mechanism, and its caveats; why not, when not applied
  bool applied = false;
  bool degraded = false;  // applied, but by a weaker mechanism than cgroup v2 (per process, ...)
  // false: some of what the limit is about stays unbounded even in sum (the rlimit fallback's
  // memory: see plan_limits); --require-limits refuses such a limit like one not applied.
  bool bounded_in_total = true;
};

struct LimitPlan {
  bool use_cgroup = false;  // create a RunCgroup for this run
  Limits cgroup_limits;     // the limits to hand to RunCgroup::create (only those cgroup enforces)
  std::vector<LimitDecision> decisions;
  // (resource, value) applied in the child before exec with setrlimit(resource, {value, value}):
  // soft = hard, so the program cannot raise them again.
  std::vector<std::pair<int, std::uint64_t>> rlimits;
  // fixed_rlimits(), read when the plan is made: applied before `rlimits`, recorded as
  // enforcement.kernel_quotas.
  std::vector<std::pair<int, std::uint64_t>> fixed = fixed_rlimits();

  const LimitDecision* find(const std::string& limit) const;
  // Decisions not applied, or (if count_degraded) applied only in a weaker form.
  std::vector<const LimitDecision*> shortfalls(bool count_degraded) const;
  // What --require-limits refuses: not applied, or applied without bounding the total.
  std::vector<const LimitDecision*> unbounded() const;
};

// rootless: sbx runs without host root (only a delegated subtree is writable).
// cgroup_ok: false once RunCgroup::create failed on this host (plan again with false and record
//   the failure), or when the user disabled cgroups; true otherwise.
// gpu: the run has GPUs (gpu.hpp). Without cgroup v2 its memory limit is then not applied at all:
//   the rlimit fallback's per-process caps on private writable memory and file size are what a
//   CUDA process trips over (the driver maps its pinned and managed memory, and libtorch_cuda.so
//   alone is ~1 GB of mappings), so the decision says "not applied", and --require-limits refuses.
LimitPlan plan_limits(const Limits& limits, const CgroupInfo& info, bool rootless, bool cgroup_ok, bool gpu = false);

// Why cgroup v2 does not enforce this run's limits, in a few words for the one warning line of a
// run (the trace's reasons say it at length): "cgroup v1/v2 hybrid host", "cgroup not delegated
// to you", "cgroup v2 setup failed: Device or resource busy", ... `failed`: RunCgroup::create's
// error, when that is the cause.
std::string cgroup_gap_short(const CgroupInfo& info, bool rootless, const Error* failed);

// For the supervisor's cpu_time limit on the cgroup path: how long (ms) until the budget could
// first run out, given the CPU time used so far and the most CPUs the sandbox can burn at once
// (cpus limit, else the number of online CPUs). Arm a timerfd for that, read cpu.stat usage_usec
// when it fires, and re-arm — exact to the millisecond without polling. 0: the budget is spent.
std::int64_t cpu_time_recheck_ms(std::int64_t budget_ms, std::int64_t used_us, double max_cpus);

}  // namespace sbx
