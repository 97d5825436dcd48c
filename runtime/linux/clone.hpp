#pragma once
// Creating the sandbox's first process in all its new namespaces at once.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "runtime/base/error.hpp"
#include "runtime/base/sanitizer_stack.hpp"

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

// Shared init. A forked init costs, on the nested VMs this runs on, more than a millisecond
// before it runs its first instruction and again when it exits: the kernel copies the page
// tables of a C++ process, every page either process then writes takes a copy-on-write fault
// (~15 us each under shadow paging), and the new address space's first run is slow. Measured:
// clone with all namespaces + first instruction + reap = 2.4 ms forked, 0.5 ms with CLONE_VM.
// So init is cloned with CLONE_VM: its own process (pid 1 of the new pid namespace, its own fd
// table, credentials, root and cwd — no CLONE_FILES, CLONE_FS or CLONE_THREAD), in our memory,
// on its own stack. The discipline that makes this safe: the two never run ordinary code at the
// same time. Until "go" init makes raw system calls only (the supervisor is writing id maps);
// from "go" until init's kStarted message the supervisor waits in a raw ppoll; from then on init
// makes raw system calls only (launch/init_end.cpp, checked by the ctest `init_raw`). errno and malloc's thread cache
// live in memory both would use; raw calls touch neither. Runs with an image or a run cgroup
// keep a forked init (sandbox.cpp says why).
//
// clone_shared: like clone_sandbox, but the child shares the caller's address space as above and
// runs fn(arg) on `stack_top`. The caller places the child in its cgroup before letting it run (no CLONE_INTO_CGROUP here).
Result<CloneResult> clone_shared(unsigned long ns_flags, int (*fn)(void*), void* arg, void* stack_top);

// A shared init's address space is the supervisor's, and "dumpable" belongs to the address space:
// while it is set, /proc/1 inside is owned by init's uid, which rootless is the program's own one
// mapped uid, so the program could list init's fds and raise its oom_score_adj (what /proc lets a
// file's owner do without ptrace access). Once the supervisor has written the id maps (the one
// thing that needs its /proc/<init> files owned by its own uid, rootless), this makes the shared
// address space non-dumpable: /proc/1 is then owned by the host's root, unmapped inside, and the
// program's execve gives it an address space of its own with the usual flag. The destructor puts
// the old value back once the sandbox is gone, for what the supervisor does after it. A forked
// init makes its own copy non-dumpable itself (child.cpp, run_init).
class NonDumpableWhileShared {
 public:
  NonDumpableWhileShared();
  NonDumpableWhileShared(const NonDumpableWhileShared&) = delete;
  NonDumpableWhileShared& operator=(const NonDumpableWhileShared&) = delete;
  ~NonDumpableWhileShared();

 private:
  int old_ = -1;
};

// A shared init's stack, and below it, behind a guard page, the stack of the program child that
// init clones (child.cpp, spawn_program): mapped by the supervisor, unmapped only after init is
// reaped (declare it before anything whose scope init may outlive). Both stacks are in one
// mapping that the supervisor declares to AddressSanitizer before clone (sanitizer_stack.hpp):
// init, sharing the supervisor's memory, could not declare the program's stack itself.
class SharedInitStack {
 public:
  SharedInitStack() = default;
  SharedInitStack(const SharedInitStack&) = delete;
  SharedInitStack& operator=(const SharedInitStack&) = delete;
  ~SharedInitStack();
  Status allocate();
  void* top() const { return static_cast<char*>(base_) + kMapped; }
  void* program_top() const { return static_cast<char*>(base_) + kGuard + kSize; }

 private:
  static constexpr std::size_t kSize = 1 << 20, kGuard = 4096;
  static constexpr std::size_t kMapped = 2 * (kGuard + kSize);  // guard, program's, guard, init's
  void* base_ = nullptr;
  SanitizerExtraStack asan_;
};

}  // namespace sbx
