#pragma once
// System calls without libc's wrappers: the result is the kernel's (-errno on failure), and
// nothing touches errno, locks or other thread-local state.
//
// Why: sbx's init can share the supervisor's memory (sandbox.cpp, "shared init"). While init
// builds the sandbox the supervisor is blocked in one of these calls; once the program runs,
// both run at once, and init's loop may then use only these (errno and malloc's thread cache
// live in memory they would share). x86_64 only, like sbx's seccomp support (child.cpp checks
// the program child's last calls against the policy with the registers these pass).
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>

#include <cstddef>

namespace sbx::raw {

inline long syscall6(long n, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
  long ret;
  register long r10 asm("r10") = d;
  register long r8 asm("r8") = e;
  register long r9 asm("r9") = f;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
  return ret;
}

inline long read(int fd, void* buf, std::size_t n) {
  return syscall6(SYS_read, fd, reinterpret_cast<long>(buf), static_cast<long>(n));
}
inline long write(int fd, const void* buf, std::size_t n) {
  return syscall6(SYS_write, fd, reinterpret_cast<long>(buf), static_cast<long>(n));
}
inline long close(int fd) { return syscall6(SYS_close, fd); }
inline long kill(pid_t pid, int sig) { return syscall6(SYS_kill, pid, sig); }
inline long open(const char* path, int flags) {
  return syscall6(SYS_openat, -100 /* AT_FDCWD */, reinterpret_cast<long>(path), flags);
}
inline long wait4(pid_t pid, int* status, int options, struct rusage* ru) {
  return syscall6(SYS_wait4, pid, reinterpret_cast<long>(status), options, reinterpret_cast<long>(ru));
}
inline long getrusage(int who, struct rusage* ru) { return syscall6(SYS_getrusage, who, reinterpret_cast<long>(ru)); }
inline long prctl(int option, unsigned long arg2) { return syscall6(SYS_prctl, option, static_cast<long>(arg2)); }
// The kernel's sigset is 8 bytes on x86_64 (glibc's sigset_t is larger; its first word is it).
inline long sigtimedwait(const sigset_t* set, siginfo_t* info, const struct timespec* timeout = nullptr) {
  return syscall6(SYS_rt_sigtimedwait, reinterpret_cast<long>(set), reinterpret_cast<long>(info),
                  reinterpret_cast<long>(timeout), 8);
}
inline long ppoll(struct pollfd* fds, unsigned long n, const struct timespec* timeout) {
  return syscall6(SYS_ppoll, reinterpret_cast<long>(fds), static_cast<long>(n), reinterpret_cast<long>(timeout), 0, 8);
}
inline long munmap(void* addr, std::size_t n) {
  return syscall6(SYS_munmap, reinterpret_cast<long>(addr), static_cast<long>(n));
}
inline long pidfd_send_signal(int pidfd, int sig) { return syscall6(SYS_pidfd_send_signal, pidfd, sig, 0, 0); }
// The realtime clock in nanoseconds (0 if it could not be read): the system call, not the vDSO
// (which glibc's clock_gettime would look up).
inline long long realtime_ns() {
  struct timespec ts {};
  if (syscall6(SYS_clock_gettime, CLOCK_REALTIME, reinterpret_cast<long>(&ts)) != 0) return 0;
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}
[[noreturn]] inline void exit_group(int code) {
  for (;;) syscall6(SYS_exit_group, code);
}

}  // namespace sbx::raw
