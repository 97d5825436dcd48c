#pragma once
// Creating the sandbox's first process in all its new namespaces at once.
#include <sys/types.h>

#include "runtime/error.hpp"

namespace sbx {

struct CloneResult {
  pid_t pid = -1;  // 0 in the child
  int pidfd = -1;  // parent only
  bool used_clone3 = false;
};

// Fork-like clone (no new stack: the child continues on a copy of ours) with `ns_flags`,
// CLONE_PIDFD, and — when cgroup_fd >= 0 — CLONE_INTO_CGROUP, so the child never runs a single
// instruction outside its cgroup. clone3 can be missing (ENOSYS, e.g. under Docker's default
// seccomp policy): then plain clone is used and the caller must move the child into the cgroup
// before letting it run (`into_cgroup_done` is false).
Result<CloneResult> clone_sandbox(unsigned long ns_flags, int cgroup_fd, bool& into_cgroup_done);

}  // namespace sbx
