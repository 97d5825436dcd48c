#include "runtime/linux/limits_plan.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "runtime/base/fsutil.hpp"
#include "runtime/model/limits_table.hpp"

namespace sbx {
namespace {

bool has(const CgroupInfo& info, const std::string& c) {
  return std::find(info.controllers.begin(), info.controllers.end(), c) != info.controllers.end();
}

std::string joined_controllers(const CgroupInfo& info) {
  std::string out;
  for (const auto& c : info.controllers) out += (out.empty() ? "" : " ") + c;
  return out;
}

// Why cgroup v2 cannot enforce something needing controller `ctl` ("" = any cgroup of ours will
// do); "" when it can.
std::string cgroup_gap(const CgroupInfo& info, bool rootless, bool cgroup_ok, const std::string& ctl) {
  if (!cgroup_ok) return "cgroup v2 setup failed on this host (see the warning)";
  if (info.mount.empty()) return "no cgroup v2 hierarchy is mounted";
  if (info.self_path.empty()) return "sbx has no cgroup v2 path in /proc/self/cgroup";
  bool any = has(info, "memory") || has(info, "pids") || has(info, "cpu");
  if ((!ctl.empty() && !has(info, ctl)) || (ctl.empty() && !any)) {
    std::string what = ctl.empty() ? "memory/pids/cpu controllers are" : "the " + ctl + " controller is";
    if (info.layout == "hybrid")
      return "this is a cgroup v1/v2 hybrid host: " + what +
             " bound to cgroup v1, which sbx does not use, and cgroup v2 offers only '" + joined_controllers(info) +
             "'";
    return "cgroup v2 " + what + " not delegated to " + (info.root_subtree ? "/" : info.self_path) +
           " (cgroup.controllers: '" + joined_controllers(info) + "')";
  }
  if (!info.writable)
    return rootless
               ? "cgroup " + info.self_path +
                     " is not delegated to this user, and sbx got no delegated systemd user scope (see "
                     "host.cgroup.systemd_scope; systemd-run --user --scope -p Delegate=yes does it), or run as root"
               : "cgroup " + info.self_path + " is not writable";
  return "";
}

std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The memory limit without cgroup v2. Measured on a hybrid host (Debian 12, Linux 6.x):
//  - RLIMIT_AS counts address space that modern runtimes only reserve. Headless Chromium dies
//    under RLIMIT_AS 64G ("Oilpan: Out of memory (CagedHeap reservation)"); Go, JVMs, V8, CUDA and
//    sanitizers reserve the same way. A limit they survive bounds nothing.
//  - RLIMIT_DATA counts private writable mappings (heap, anonymous memory, writable private file
//    mappings; mm/mmap.c may_expand_vm: VM_WRITE & ~VM_SHARED & ~VM_STACK), not PROT_NONE
//    reservations: Chromium renders a page under 512M (not under 256M), and a 512 MB Python
//    allocation fails under 64M. So RLIMIT_DATA, and RLIMIT_AS is left alone.
// What RLIMIT_DATA does not count is shared memory (shmem): memfds, tmpfs files, SysV shm, and
// MAP_SHARED|MAP_ANONYMOUS. The tmpfs mounts are sized to fit the limit together
// (memory_fallback.hpp); SysV shm is capped in total by the ipc namespace's shmall/shmmax, and its
// message queues and semaphores by msgmni and sem, set by init (child.cpp bound_sysv_ipc). No
// RLIMIT_FSIZE: it caps each file, on disk as in RAM, so at the memory limit it stopped a program
// writing a file larger than --memory to a rw bind on disk (CPython's test_resource, any big build
// artefact), while the RAM it guarded was never bounded by it: the tmpfs files are bounded by
// their mounts' size options, and a memfd (the one shmem file no mount bounds) was capped one at a
// time only, never their sum (RLIMIT_NOFILE of them, and a mapped one outlives its fd), the same
// RAM MAP_SHARED|MAP_ANONYMOUS reaches with no cap at all.
// What stays unbounded is named in the note, and makes --require-limits refuse: the total is not
// bounded, only its parts.
void fallback_memory(LimitDecision& d, LimitPlan& plan, const std::string& gap, std::int64_t memory) {
  d.mechanism = "rlimit RLIMIT_DATA, tmpfs sizes, ipc namespace shmall";
  d.degraded = true;
  d.bounded_in_total = false;
  d.reason = gap + "; bounded: each process's private writable memory (RLIMIT_DATA " + std::to_string(memory) +
             " bytes; address-space reservations are not counted, so JVMs, Go, V8 and sanitizers run; exceeding "
             "it fails the allocation with ENOMEM, no OOM kill), all tmpfs mounts together (their sizes sum to at "
             "most the limit), SysV shared memory in total (kernel.shmall and shmmax of the run's ipc namespace, "
             "where its user namespace maps uid 0: see enforcement.memory_fallback), and SysV message queues "
             "and semaphores (msgmni and sem of that namespace, each at most the limit); NOT bounded: the sum over "
             "processes (each has its own RLIMIT_DATA), stacks (RLIMIT_STACK each), MAP_SHARED|MAP_ANONYMOUS "
             "mappings, and memfds (no file-size limit is set: it would cap files written to rw binds on disk, "
             "and each memfd alone, never their sum)";
  plan.rlimits.emplace_back(RLIMIT_DATA, static_cast<std::uint64_t>(memory));
}

}  // namespace

std::string cgroup_gap_short(const CgroupInfo& info, bool rootless, const Error* failed) {
  // In a container whose cgroup namespace root holds its processes the fix is one command; the
  // one line names it (cgroup_ns.hpp).
  if (info.namespace_root && info.namespace_root_procs > 0 && (failed ? failed->err == EBUSY : true) &&
      (has(info, "memory") || has(info, "pids") || has(info, "cpu")))
    return "the container's cgroup namespace root holds its processes: run 'sbx cgroup-init' once";
  if (failed) {
    std::string why = failed->err == EBUSY ? "its cgroup holds other processes"
                      : failed->err        ? std::strerror(failed->err)
                                           : "see the trace";
    return "cgroup v2 setup failed: " + why;
  }
  if (info.mount.empty()) return "no cgroup v2 mounted";
  if (info.self_path.empty()) return "no cgroup v2 path for sbx";
  bool any = has(info, "memory") || has(info, "pids") || has(info, "cpu");
  if (info.layout == "hybrid" && !any) return "cgroup v1/v2 hybrid host";
  if (!any) return "no cgroup v2 controllers delegated";
  if (!info.writable) return rootless ? "cgroup not delegated to you" : "cgroup not writable";
  return "controller missing in cgroup v2";
}

const LimitDecision* LimitPlan::find(const std::string& limit) const {
  for (const auto& d : decisions)
    if (d.limit == limit) return &d;
  return nullptr;
}

std::vector<const LimitDecision*> LimitPlan::shortfalls(bool count_degraded) const {
  std::vector<const LimitDecision*> out;
  for (const auto& d : decisions)
    if (!d.applied || (count_degraded && d.degraded)) out.push_back(&d);
  return out;
}

std::vector<const LimitDecision*> LimitPlan::unbounded() const {
  std::vector<const LimitDecision*> out;
  for (const auto& d : decisions)
    if (!d.applied || !d.bounded_in_total) out.push_back(&d);
  return out;
}

namespace {

// Where the run's cgroup stands, for cgroup_gap.
struct Cgroups {
  const CgroupInfo& info;
  bool rootless, cgroup_ok;
  bool gpu;  // the run has GPUs (plan_memory)
};

LimitDecision plan_memory(const Limits& limits, const Cgroups& c, LimitPlan& plan) {
  LimitDecision d{"memory", std::to_string(*limits.memory_bytes)};
  std::string gap = cgroup_gap(c.info, c.rootless, c.cgroup_ok, "memory");
  if (gap.empty()) {
    d.mechanism = "cgroup v2 memory.max";
    d.reason =
        "memory.max on the run cgroup bounds all its processes together; memory.swap.max=0, "
        "memory.oom.group=1; an OOM kill is read from memory.events";
    plan.cgroup_limits.memory_bytes = limits.memory_bytes;
    d.applied = true;
  } else if (c.gpu) {
    d.reason = gap +
               "; with --gpu the rlimit fallback (RLIMIT_DATA; never RLIMIT_AS) is not applied: "
               "CUDA's driver and libraries map far more than a program uses, and per-process caps break them. "
               "Host memory is NOT bounded for this run; GPU memory never is (no MIG)";
  } else {
    fallback_memory(d, plan, gap, *limits.memory_bytes);
    d.applied = true;
  }
  return d;
}

LimitDecision plan_pids(const Limits& limits, const Cgroups& c, LimitPlan& plan) {
  LimitDecision d{"pids", std::to_string(*limits.pids)};
  std::string gap = cgroup_gap(c.info, c.rootless, c.cgroup_ok, "pids");
  if (gap.empty()) {
    d.mechanism = "cgroup v2 pids.max";
    d.reason = "pids.max counts every task (thread) of the run cgroup; fork/clone beyond it fails with EAGAIN";
    plan.cgroup_limits.pids = limits.pids;
  } else {
    d.mechanism = "rlimit RLIMIT_NPROC";
    d.degraded = true;
    // Since 5.14 the count lives in ucounts keyed by (user namespace, uid): in sbx's fresh user
    // namespace only the sandbox's own tasks are counted. Before that it was the host user's
    // global task count. __task_cred(p)->user == INIT_USER is exempt in copy_process().
    d.reason = gap +
               "; RLIMIT_NPROC is checked only at fork/clone and counts the tasks (threads too) of the "
               "sandbox's real uid: since Linux 5.14 per user namespace, so in sbx's own user namespace "
               "only the sandbox's tasks count (older kernels count every process of that host uid, the "
               "caller's included); it never binds a task whose host uid is 0";
    plan.rlimits.emplace_back(RLIMIT_NPROC, static_cast<std::uint64_t>(*limits.pids));
  }
  d.applied = true;
  return d;
}

LimitDecision plan_cpus(const Limits& limits, const Cgroups& c, LimitPlan& plan) {
  LimitDecision d{"cpus", fmt_double(*limits.cpus)};
  std::string gap = cgroup_gap(c.info, c.rootless, c.cgroup_ok, "cpu");
  if (gap.empty()) {
    d.mechanism = "cgroup v2 cpu.max";
    d.reason = "cpu.max " + format_cpu_max(*limits.cpus) +
               ": the run cgroup's quota per 100 ms period; it is throttled beyond it";
    d.applied = true;
    plan.cgroup_limits.cpus = limits.cpus;
  } else {
    d.reason = gap + "; no rlimit caps a CPU share (nice and CPU affinity only shift or pin it)";
  }
  return d;
}

LimitDecision plan_cpu_time(const Limits& limits, const Cgroups& c, LimitPlan& plan) {
  LimitDecision d{"cpu_time", std::to_string(*limits.cpu_time_ms)};
  std::string gap = cgroup_gap(c.info, c.rootless, c.cgroup_ok, "");
  if (gap.empty()) {
    // cpu.stat's usage_usec is a core cgroup file: it needs no controller.
    d.mechanism = "supervisor timerfd against cgroup v2 cpu.stat usage_usec";
    d.reason =
        "the budget counts the CPU time of all processes of the run together; when it is spent "
        "the supervisor kills the cgroup (status timeout, reason cpu)";
  } else {
    std::uint64_t secs = static_cast<std::uint64_t>((*limits.cpu_time_ms + 999) / 1000);
    d.mechanism = "rlimit RLIMIT_CPU";
    d.degraded = true;
    d.reason = gap + "; RLIMIT_CPU is per process and in whole seconds (" + std::to_string(secs) +
               " s): each forked process has its own budget, and the kernel SIGKILLs a process when it "
               "reaches it (soft = hard, so no SIGXCPU warning first)";
    plan.rlimits.emplace_back(RLIMIT_CPU, secs);
  }
  d.applied = true;
  return d;
}

LimitDecision plan_timeout(const Limits& limits, const Cgroups&, LimitPlan&) {
  return {"timeout", std::to_string(*limits.timeout_ms), "supervisor timerfd",
          "wall time from start, to the millisecond; then the whole sandbox is killed", true};
}

LimitDecision plan_output(const Limits& limits, const Cgroups&, LimitPlan&) {
  return {"output", std::to_string(*limits.output_limit_bytes), "supervisor byte cap",
          "per stream passed through; the rest is dropped and marked truncated", true};
}

// The planner of each limit with a plan name in limits_table.hpp (its enforcement, which only
// this layer knows); test_limits_table checks that none is missing.
using Planner = LimitDecision (*)(const Limits&, const Cgroups&, LimitPlan&);
struct NamedPlanner {
  const char* plan_name;
  Planner plan;
};
constexpr NamedPlanner kPlanners[] = {
    {"memory", plan_memory},     {"pids", plan_pids},       {"cpus", plan_cpus},
    {"cpu_time", plan_cpu_time}, {"timeout", plan_timeout}, {"output", plan_output},
};

}  // namespace

namespace {
// What the kernel gives a user by default (kernel/fork.c: RLIMIT_SIGPENDING is max_threads / 2;
// ipc/mqueue.c MQ_BYTES_MAX; mm MLOCK_LIMIT since Linux 5.16): the ceiling where sbx's own hard
// limit is unlimited, since each of that user's other processes still checks the count against
// its own limits.
std::uint64_t kernel_default_quota(int res) {
  if (res == RLIMIT_MSGQUEUE) return 819200;
  if (res == RLIMIT_MEMLOCK) return 8 << 20;
  std::uint64_t threads = std::strtoull(read_file_prefix("/proc/sys/kernel/threads-max", 32).c_str(), nullptr, 10);
  return (threads > 0 ? threads : 32768) / 2;  // a kernel's minimum of threads-max is 20
}
constexpr int kKernelQuotas[] = {RLIMIT_SIGPENDING, RLIMIT_MSGQUEUE, RLIMIT_MEMLOCK};
constexpr auto kUnlimited = static_cast<std::uint64_t>(RLIM_INFINITY);
}  // namespace

std::uint64_t held_kernel_quota(std::uint64_t hard, std::uint64_t kernel_default) {
  return (hard == kUnlimited ? kernel_default : hard) / kHostKeeps;
}

std::uint64_t kernel_quota_share(std::uint64_t own, std::uint64_t kernel_default) {
  return (own == kUnlimited ? kernel_default / kHostKeeps : own) / kKernelQuotaShare;
}

Status hold_kernel_quotas() {
  for (int res : kKernelQuotas) {
    struct rlimit own {};
    if (::getrlimit(res, &own) != 0) return sys_error("limits", "getrlimit");
    std::uint64_t held = held_kernel_quota(own.rlim_max, own.rlim_max == RLIM_INFINITY ? kernel_default_quota(res) : 0);
    if (own.rlim_cur != RLIM_INFINITY && own.rlim_cur <= held) continue;
    own.rlim_cur = static_cast<rlim_t>(held);
    if (::setrlimit(res, &own) != 0) return sys_error("limits", "setrlimit (hold a kernel quota at half)");
  }
  return {};
}

std::vector<std::pair<int, std::uint64_t>> fixed_rlimits() {
  std::vector<std::pair<int, std::uint64_t>> out = {{RLIMIT_CORE, 0}};
  for (int res : kKernelQuotas) {
    struct rlimit own {};
    if (::getrlimit(res, &own) != 0) continue;  // never fails for a valid resource
    out.emplace_back(res,
                     kernel_quota_share(own.rlim_cur, own.rlim_cur == RLIM_INFINITY ? kernel_default_quota(res) : 0));
  }
  return out;
}

LimitPlan plan_limits(const Limits& limits, const CgroupInfo& info, bool rootless, bool cgroup_ok, bool gpu) {
  LimitPlan plan;
  plan.use_cgroup = cgroup_gap(info, rootless, cgroup_ok, "").empty();
  const Cgroups c{info, rootless, cgroup_ok, gpu};
  for (const LimitKind* k : limit_kinds_by(&LimitOrder::plan)) {
    if (!limit_set(limits, *k)) continue;
    for (auto& p : kPlanners)
      if (std::string_view(k->plan_name) == p.plan_name) plan.decisions.push_back(p.plan(limits, c, plan));
  }
  return plan;
}

std::int64_t cpu_time_recheck_ms(std::int64_t budget_ms, std::int64_t used_us, double max_cpus) {
  std::int64_t remaining_us = budget_ms * 1000 - used_us;
  if (remaining_us <= 0) return 0;
  if (!(max_cpus > 0)) max_cpus = 1;
  auto ms = static_cast<std::int64_t>(std::ceil(static_cast<double>(remaining_us) / max_cpus / 1000.0));
  return std::max<std::int64_t>(ms, 1);
}

}  // namespace sbx
