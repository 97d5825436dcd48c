#pragma once
// cgroup v2: finding where sbx may create cgroups, one cgroup per run with limits written before
// the program starts, and usage read back. This host is a v1/v2 hybrid whose v2 offers no
// memory/cpu/pids controllers: sbx detects that and degrades honestly (see limits_plan.hpp).
//
// Where run cgroups live (the "sbx subtree"):
//
//   <own>/                    the cgroup sbx was started in (from /proc/self/cgroup); as root in
//                             the hierarchy's real root, the root itself (see below)
//   <own>/sbx-supervisor/     sbx moves itself here if <own> holds processes (see below)
//   <own>/sbx/                the subtree; +memory +pids +cpu enabled in its subtree_control
//   <own>/sbx/run-<id>@<pid>.<start>/   one leaf per run; <pid>/<start> identify the owning sbx
//
// The no-internal-processes rule: a non-root cgroup that has processes cannot enable domain
// controllers (memory, ...) for its children — writing its cgroup.subtree_control fails with
// EBUSY. So when sbx's own cgroup is not the root and holds processes, sbx first moves itself into
// the leaf <own>/sbx-supervisor. An sbx whose children make run cgroups (`sbx mcp`'s workers, `sbx
// probe`'s run) goes there before it starts them (enter_supervisor_leaf), so that it does not keep
// <own> busy itself. If other processes (a login shell, say) are still there, sbx does not move
// them — they are not its to move — and reports the error; run sbx in a cgroup of its own,
// e.g. `systemd-run --user --scope -p Delegate=yes sbx ...`. A later RunCgroup in the same process
// sees /proc/self/cgroup end in /sbx-supervisor and uses the parent as <own> again.
//
// As root with the real root of the hierarchy in view (not a cgroup namespace's), <own> is the
// root cgroup whatever cgroup sbx was started in: run cgroups go to /sys/fs/cgroup/sbx/, as
// Docker's cgroupfs driver puts containers under /sys/fs/cgroup/docker/. The root cgroup is exempt
// from the no-internal-processes rule, so nothing needs to move — a login shell's, a CI job's or a
// service's cgroup holding other processes no longer matters — and sbx itself stays where it was
// started (the program enters its run cgroup by CLONE_INTO_CGROUP; root may write the root's
// cgroup.procs, the common ancestor). Concurrent runs share only /sys/fs/cgroup/sbx, whose
// subtree_control they write with "+memory" and the like: idempotent, and each write is atomic in
// the kernel (cgroup_mutex), so no run can undo another's. The real root is the one cgroup without
// a cgroup.type file (cgroup-v2.rst); a cgroup namespace's root has one.
//
// Inside a container (a cgroup namespace, /sys/fs/cgroup showing the namespace's root as "/"), the
// root in view is an ordinary cgroup to the kernel: NOT exempt from the no-internal-processes
// rule, and it holds the container's own processes (its entrypoint, a shell). sbx never moves
// those on its own. `sbx cgroup-init` (runtime/linux/cgroup_ns.hpp), run once by the entrypoint, moves
// them into a leaf, as docker-in-docker entrypoints do, and enables the controllers there; from
// then on the namespace root holds no process and, as root in the container, sbx treats it like
// the real root: run cgroups go under <mount>/sbx whatever cgroup sbx was started in (the
// entrypoint's leaf holds processes, so <own> could not be used).
//
// Delegation (rootless): creating and writing cgroups needs write access to <own> and its
// control files, and moving a process (cgroup.procs or CLONE_INTO_CGROUP) needs write access to
// cgroup.procs of the common ancestor of the source and destination cgroups — which a delegated
// subtree (systemd Delegate=yes) grants. sbx never writes outside <own>.
//
// sbx only uses a cgroup v2 that offers at least one of memory/pids/cpu. On a hybrid host those
// controllers are bound to v1 and the v2 hierarchy carries none; sbx then creates nothing there.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/model/spec.hpp"

namespace sbx {

struct CgroupInfo {
  std::string layout;                    // "v2" (unified), "hybrid" (v1 + v2), "v1", or "none"
  std::string mount;                     // where cgroup2 is mounted ("" if nowhere)
  std::string self_path;                 // our cgroup v2 path from /proc/self/cgroup ("0::/..."), "" if none
  std::vector<std::string> controllers;  // cgroup.controllers of <own> (our cgroup, or its parent in sbx-supervisor)
  bool writable = false;                 // we may create child cgroups under <own>
  // Root, and the hierarchy's real root is writable: run cgroups go under <mount>/sbx whatever
  // sbx's own cgroup (see above); `controllers` are then the root's.
  bool root_subtree = false;
  // The root in view is a cgroup namespace's (a container's), not the hierarchy's real root.
  bool namespace_root = false;
  // Processes directly in that namespace root (cgroup.procs entries, those of pid namespaces we
  // cannot see included); -1 when not a namespace root or unreadable.
  long namespace_root_procs = -1;
};

CgroupInfo detect_cgroup();

// Usage of one run cgroup; a member is empty when the kernel does not offer the file (memory.peak
// needs 5.19, pids.peak 6.1 or so; nr_throttled/throttled_us need the cpu controller).
struct CgroupUsage {
  std::optional<std::int64_t> memory_peak_bytes;  // memory.peak
  std::optional<std::int64_t> cpu_usage_us;       // cpu.stat usage_usec
  std::optional<std::int64_t> cpu_user_us;        // cpu.stat user_usec
  std::optional<std::int64_t> cpu_system_us;      // cpu.stat system_usec
  std::optional<std::int64_t> pids_peak;          // pids.peak
  std::optional<std::int64_t> oom;                // memory.events oom (hit memory.max, reclaim failed)
  std::optional<std::int64_t> oom_kill;           // memory.events oom_kill (the OOM killer acted)
  std::optional<std::int64_t> pids_max;           // pids.events max (forks refused at pids.max)
  std::optional<std::int64_t> nr_throttled;       // cpu.stat nr_throttled (periods cpu.max bit)
  std::optional<std::int64_t> throttled_us;       // cpu.stat throttled_usec
};

// One cgroup per run, created and limited before any process enters it. Move-only; the destructor
// kills what is left inside and removes the cgroup if remove() has not been called.
class RunCgroup {
 public:
  // Creates <own>/sbx/run-<run_id>@<pid>.<start> and writes the limits of `limits` that cgroup v2
  // enforces: memory_bytes → memory.max (+ memory.swap.max=0, memory.oom.group=1), pids →
  // pids.max, cpus → cpu.max "<cpus*100000> 100000". Every limit asked for must have its
  // controller available, or this fails before writing anything: pass the limits that
  // plan_limits() assigned to cgroup v2 (LimitPlan::cgroup_limits). timeout and cpu_time are the
  // supervisor's (cpu_time against usage().cpu_usage_us) and are ignored here.
  // run_id: [A-Za-z0-9_.-], at most 128 characters.
  static Result<RunCgroup> create(const CgroupInfo& info, const Limits& limits, const std::string& run_id);

  RunCgroup(RunCgroup&& other) noexcept;
  RunCgroup& operator=(RunCgroup&& other) noexcept;
  RunCgroup(const RunCgroup&) = delete;
  RunCgroup& operator=(const RunCgroup&) = delete;
  ~RunCgroup();

  // O_RDONLY|O_DIRECTORY|O_CLOEXEC fd of the run cgroup, for clone3's CLONE_INTO_CGROUP
  // (clone_args.cgroup): the child starts life inside the cgroup, so not one instruction of it runs
  // outside the limits. (An O_PATH fd would not do: clone3 rejects it with EBADF.) -1 after remove().
  int dir_fd() const { return dir_fd_.get(); }
  const std::string& path() const { return path_; }  // absolute path of the run cgroup
  // Things that were weaker than asked but not worth failing for (e.g. no swap accounting).
  const std::vector<std::string>& warnings() const { return warnings_; }

  // Fallback when clone3 is unavailable (ENOSYS under some seccomp filters): the parent writes the
  // child's pid into cgroup.procs while the child waits for "go", before it execs anything.
  Status add_pid(pid_t pid);
  // Kills every process in the cgroup: cgroup.kill (5.14+; SIGKILLs the whole subtree at once, so
  // a fork bomb cannot outrun it), else SIGKILL each pid in cgroup.procs until it reads empty.
  // Processes are dead (or zombies awaiting their parent's wait) when it returns.
  Status kill();
  // Reads the usage files; call before remove().
  CgroupUsage usage() const;
  // cpu.stat's usage_usec alone, for the supervisor's CPU-time budget: an error (with errno)
  // when it cannot be read, so that the budget fails closed instead of reading as 0.
  Result<std::int64_t> cpu_usage_us() const;
  // rmdir, retrying for up to ~2 s while the last processes exit (a dying task keeps the cgroup
  // busy briefly). Fails with EBUSY if something is still alive: kill() first.
  Status remove();

 private:
  RunCgroup() = default;
  void reset() noexcept;
  std::string path_;
  UniqueFd dir_fd_;
  std::vector<std::string> warnings_;
};

// Removes run cgroups left behind by an sbx that died (SIGKILL, crash, power cut of the host's
// session): every run-*@<pid>.<start> under the sbx subtree whose owner — the process with that pid
// and that start time (field 22 of /proc/<pid>/stat) — no longer exists is killed and removed.
// Cgroups of live owners are never touched, even empty ones: a live sbx creates its cgroup empty
// and clones into it a moment later. Comparing the start time makes a reused pid harmless; it
// assumes all sbx sharing a subtree share a pid namespace (the usual case). No-op when there is no
// usable cgroup v2 or no subtree. Errors are collected; all stale cgroups are attempted.
Status gc_stale_cgroups(const CgroupInfo& info);

// For an sbx that starts sbx children which make run cgroups (`sbx mcp`, `sbx probe`): moves this
// process into <own>/sbx-supervisor before it starts them, where <own> offers memory, pids or cpu
// and its subtree_control is writable (delegated); a child then finds <own> free of its parent and
// enables controllers there, as a lone `sbx run` does after moving itself. It moves no other
// process. No-op (false) as root in the real root (run cgroups go under <mount>/sbx), outside
// cgroup v2, in the leaf already, where <own> offers no controller (a hybrid host: nothing is
// written) or is not delegated (the child degrades or takes its systemd scope, as without it).
bool enter_supervisor_leaf(const CgroupInfo& info);

// ---- pure helpers (exposed for tests and for the integrator) ----

// The whole lines of a kernel file's first 4 MiB ("" when unreadable; `ok` says whether it was
// read): /proc/self/mounts of a host with many thousands of mounts can be larger, and the cgroup
// hierarchies it is read for are mounted at boot, near its start. A line cut by the bound is
// dropped, not parsed as a short one. detect_cgroup and `sbx doctor` read the mounts with it, so
// that both see the same table.
std::string read_proc_prefix(const std::string& path, bool* ok = nullptr);
// The cgroup2 mount point in /proc/self/mounts content ("" when none; the first of several);
// `v1` set when a cgroup v1 hierarchy is mounted too. `sbx doctor` and detect_cgroup read it.
std::string cgroup2_mount_point(std::string_view mounts, bool& v1);
// The cgroup v2 path from /proc/self/cgroup content (the "0::<path>" line), or "" if none.
std::string parse_proc_cgroup(std::string_view text);
// "key value" lines (cpu.stat, memory.events, pids.events, memory.stat) into a map; malformed
// lines are skipped.
std::map<std::string, std::int64_t> parse_keyed_counters(std::string_view text);
// A single integer file (memory.peak, pids.peak); "max" and garbage give nullopt.
std::optional<std::int64_t> parse_single_counter(std::string_view text);
// cpu.max content for `cpus` CPUs with period 100000 µs: "50000 100000" for 0.5. The quota is
// clamped to the kernel's 1000 µs minimum.
std::string format_cpu_max(double cpus);
// Field 22 (starttime, clock ticks since boot) of /proc/<pid>/stat content; comm may hold spaces
// and parentheses, so fields are counted from the last ')'.
std::optional<std::uint64_t> parse_stat_starttime(std::string_view stat);
// Run cgroup names: "run-<run_id>@<pid>.<start>".
std::string run_cgroup_name(const std::string& run_id, pid_t owner_pid, std::uint64_t owner_start);
struct RunCgroupOwner {
  std::string run_id;
  pid_t pid = 0;
  std::uint64_t start = 0;
};
std::optional<RunCgroupOwner> parse_run_cgroup_name(std::string_view name);
// The real root of a cgroup v2 hierarchy is the one cgroup without cgroup.type; a namespace root
// or any other cgroup has one. `dir` is where the hierarchy is mounted.
bool is_real_cgroup_root(const std::string& dir);
// Number of entries in a cgroup.procs text (one pid a line; "0" for processes in pid namespaces we
// cannot see counts too).
long count_procs(std::string_view text);
// <own> from a cgroup v2 path: the path itself, or its parent when it is .../sbx-supervisor.
std::string own_cgroup_path(const std::string& self_path);

}  // namespace sbx
