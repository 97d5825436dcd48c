#pragma once
// Inside a container: a cgroup namespace whose root (/sys/fs/cgroup as the container sees it)
// holds the container's own processes. To the kernel that root is an ordinary cgroup, so the
// no-internal-processes rule applies: no domain controller (memory, pids, cpu) can be enabled for
// its children while a process lives in it, and sbx's run cgroups get no limits (runtime/linux/cgroup.hpp
// explains the rule and where run cgroups live).
//
// The fix is the one docker-in-docker entrypoints apply: move every process of the root into a
// leaf once, then enable the controllers at the root. sbx never does that in a run — the processes
// are the container's, not sbx's — only when the container's entrypoint asks with `sbx cgroup-init`
// (cgroup_init below). `sbx doctor` detects the situation (assess_cgroup_namespace) and prints the
// exact command.
#include <sys/types.h>

#include <string>
#include <vector>

#include "runtime/linux/cgroup.hpp"
#include "runtime/base/error.hpp"
#include "runtime/linux/hostcheck.hpp"

namespace sbx {

// The root in view, as `sbx doctor` and `sbx cgroup-init` judge it.
struct CgroupNsRoot {
  std::string mount;                         // where cgroup2 is mounted ("" if nowhere)
  bool namespace_root = false;               // the root in view is a cgroup namespace's
  long procs = -1;                           // processes directly in it (-1: unreadable)
  std::vector<std::string> controllers;      // its cgroup.controllers
  std::vector<std::string> subtree_control;  // its cgroup.subtree_control
  bool writable = false;                     // we may create cgroups and write control files there
  bool euid_root = false;                    // uid 0 (in the container's user namespace)
};
CgroupNsRoot probe_cgroup_ns_root(const CgroupInfo& info);

// The doctor row "cgroupns" (never required): ok outside a cgroup namespace and where the
// namespace root is usable; degraded, with the exact fix, where the root holds processes and
// none of memory/pids/cpu is enabled for its children, where the mount is read-only, or where the
// container runtime delegated no controller. Pure: unit-tested.
CheckResult assess_cgroup_namespace(const CgroupNsRoot& root);

// What `sbx cgroup-init` did.
struct CgroupInitReport {
  std::string root;                  // the namespace root (the cgroup2 mount)
  std::string leaf;                  // absolute path of the leaf the processes went to
  std::vector<pid_t> moved;          // pids written to the leaf's cgroup.procs
  std::vector<std::string> enabled;  // controllers this call enabled at the root
  std::vector<std::string> already;  // controllers that were enabled already
  std::string nothing_to_do;         // why nothing was done (not in a cgroup namespace); "" otherwise
};

// Moves every process of the cgroup namespace root `info.mount` into the leaf <mount>/<leaf> and
// enables memory, pids and cpu (those offered) in the root's cgroup.subtree_control. Idempotent:
// a second call moves nothing and enables nothing. Touches nothing and says why in nothing_to_do
// on the hierarchy's real root (exempt from the rule, and those processes are the host's) or
// outside the root of sbx's cgroup namespace. Refuses when no cgroup v2 is mounted (ENOENT) or it
// offers none of the three controllers (ENOTSUP), and a leaf name that is not one path component
// of [A-Za-z0-9_.-], or is sbx or sbx-supervisor (EINVAL). Processes forked while it moves are picked up by
// going round again, at most 100 rounds. A process that exits meanwhile (ESRCH) is skipped.
// Processes of a pid namespace that sbx cannot see are listed as 0 and cannot be moved: EBUSY.
Result<CgroupInitReport> cgroup_init(const CgroupInfo& info, const std::string& leaf);

}  // namespace sbx
