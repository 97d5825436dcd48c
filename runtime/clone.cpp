#include "runtime/clone.hpp"

#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace sbx {

Result<CloneResult> clone_sandbox(unsigned long ns_flags, int cgroup_fd, bool& into_cgroup_done) {
  CloneResult r;
  int pidfd = -1;
  struct clone_args args;
  std::memset(&args, 0, sizeof args);
  args.flags = ns_flags | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<std::uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  if (cgroup_fd >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<std::uint64_t>(cgroup_fd);
  }
  long pid = ::syscall(SYS_clone3, &args, sizeof args);
  if (pid >= 0) {
    into_cgroup_done = cgroup_fd >= 0;
    r.pid = static_cast<pid_t>(pid);
    r.pidfd = pid == 0 ? -1 : pidfd;
    r.used_clone3 = true;
    return r;
  }
  if (errno != ENOSYS) return sys_error("clone", "clone3 into new namespaces");
  // Legacy clone: fork-like when the stack pointer is 0; the pidfd comes back through the
  // parent_tid argument when CLONE_PIDFD is set.
  into_cgroup_done = false;
  pid = ::syscall(SYS_clone, ns_flags | CLONE_PIDFD | SIGCHLD, nullptr, &pidfd, nullptr, 0);
  if (pid < 0) return sys_error("clone", "clone into new namespaces");
  r.pid = static_cast<pid_t>(pid);
  r.pidfd = pid == 0 ? -1 : pidfd;
  return r;
}

}  // namespace sbx
