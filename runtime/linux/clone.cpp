#include "runtime/linux/clone.hpp"

#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
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
    args.cgroup = static_cast<__u64>(cgroup_fd);  // __u64, not uint64_t: GCC flags the second conversion
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

Status SharedInitStack::allocate() {
  // MAP_NORESERVE: only the pages init and the program child touch cost anything. A guard page
  // below each stack catches an overflow instead of letting it write into other memory.
  void* p =
      ::mmap(nullptr, kMapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) return sys_error("clone", "map a stack for init");
  base_ = p;
  char* b = static_cast<char*>(p);
  if (::mprotect(b, kGuard, PROT_NONE) != 0 || ::mprotect(b + kGuard + kSize, kGuard, PROT_NONE) != 0)
    return sys_error("clone", "guard init's stack");
  asan_.begin(b, kMapped);
  return {};
}

SharedInitStack::~SharedInitStack() {
  asan_.end();
  if (base_) ::munmap(base_, kMapped);
}

Result<CloneResult> clone_shared(unsigned long ns_flags, int (*fn)(void*), void* arg, void* stack_top) {
  CloneResult r;
  int pidfd = -1;
  // glibc's clone(): the child starts in fn on the given stack; with CLONE_PIDFD the pidfd comes
  // back through the parent_tid argument.
  int pid = ::clone(fn, stack_top, static_cast<int>(ns_flags | CLONE_VM | CLONE_PIDFD | SIGCHLD), arg, &pidfd);
  if (pid < 0) return sys_error("clone", "clone into new namespaces");
  r.pid = pid;
  r.pidfd = pidfd;
  return r;
}

NonDumpableWhileShared::NonDumpableWhileShared() {
  old_ = ::prctl(PR_GET_DUMPABLE);
  ::prctl(PR_SET_DUMPABLE, 0);
}

NonDumpableWhileShared::~NonDumpableWhileShared() {
  if (old_ > 0) ::prctl(PR_SET_DUMPABLE, 1);  // 1 is the only other value prctl accepts
}

}  // namespace sbx
