#include "runtime/launch/child.hpp"

#include <fcntl.h>
#include <sched.h>
#include <linux/audit.h>
#include <linux/close_range.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "runtime/model/caps.hpp"
#include "runtime/base/fdpass.hpp"
#include "runtime/linux/net.hpp"
#include "runtime/launch/pool_job.hpp"
#include "runtime/linux/pty.hpp"
#include "runtime/base/raw_syscall.hpp"
#include "runtime/base/sanitizer_stack.hpp"
#include "runtime/linux/seccomp_policy.hpp"

namespace sbx {

namespace {

void send_msg(int fd, const ChildMsg& m) {
  long n;
  do n = raw::write(fd, &m, sizeof m);
  while (n == -EINTR);
}

[[noreturn]] void fail(const ChildConfig& cfg, const Error& e) {
  ChildMsg m;
  m.kind = ChildMsg::kSetupError;
  m.err = e.err;
  std::strncpy(m.stage, e.stage.c_str(), sizeof m.stage - 1);
  std::strncpy(m.message, e.message.c_str(), sizeof m.message - 1);
  send_msg(cfg.msg_fd, m);
  ::_exit(125);
}

#define STAGE(cfg, expr)                 \
  do {                                   \
    auto st_ = (expr);                   \
    if (!st_.ok()) fail(cfg, st_.error()); \
  } while (0)

// Closes every fd not in `keep` (the child inherits all of sbx's descriptors).
void close_all_except(std::vector<int> keep) {
  std::sort(keep.begin(), keep.end());
  unsigned int next = 0;
  for (int fd : keep) {
    if (fd < 0) continue;
    if (static_cast<unsigned>(fd) > next) ::syscall(SYS_close_range, next, static_cast<unsigned>(fd) - 1, 0);
    next = static_cast<unsigned>(fd) + 1;
  }
  ::syscall(SYS_close_range, next, ~0U, 0);
}

// RLIMIT_AS and RLIMIT_DATA (address_space) apart from the others: the program child shares
// init's memory (and a
// shared init the supervisor's) until execve, so either limit counts all of that memory and any
// allocation that needs a new mapping fails once it is set. It is therefore set last, after
// the child's last allocation, to bind the program after execve rather than sbx's own code before
// it. (An ASan build reserves terabytes of shadow: its allocator died holding a lock in the shared
// memory, and the supervisor then spun on it.) Lowering a limit needs no privilege, and raising
// one needs CAP_SYS_RESOURCE in the initial user namespace, which the child never has, so the
// later point allows exactly what the earlier one did.
Status set_rlimits(const std::vector<std::pair<int, rlim_t>>& limits, bool address_space) {
  for (auto& [res, value] : limits) {
    if ((res == RLIMIT_AS || res == RLIMIT_DATA) != address_space) continue;
    struct rlimit rl = {value, value};
    if (::setrlimit(res, &rl) != 0) return sys_error("rlimits", "setrlimit(" + std::to_string(res) + ")");
  }
  return {};
}

// SysV shared memory is RAM that no rlimit counts (shmget needs no fd, and a segment outlives its
// creator until IPC_RMID or the ipc namespace's end). The run has its own ipc namespace, whose
// shm sysctls are per namespace (ipc/ipc_sysctl.c) and owned by its user namespace's root since
// Linux 5.17, i.e. writable by init here. shmall caps all segments together (in pages), shmmax
// one segment. The /proc here is the sandbox's own (build_root has pivoted). On a kernel that
// refuses the write the run fails closed: a memory limit promised must not silently lose a part.
Status bound_sysv_shm(std::int64_t bytes) {
  long page = ::sysconf(_SC_PAGESIZE);
  std::int64_t pages = std::max<std::int64_t>(1, bytes / (page > 0 ? page : 4096));
  const std::pair<const char*, std::int64_t> knobs[] = {{"/proc/sys/kernel/shmmax", bytes}, {"/proc/sys/kernel/shmall", pages}};
  for (auto& [path, value] : knobs) {
    int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    // Before Linux 5.17 these files belong to the initial user namespace: refused here.
    if (fd < 0) return sys_error("sysv_shm", std::string("open ") + path + " (the run's SysV shm cap; needs Linux 5.17+)");
    std::string text = std::to_string(value) + "\n";
    ssize_t n = ::write(fd, text.data(), text.size());
    int werr = errno;
    ::close(fd);
    if (n != static_cast<ssize_t>(text.size())) return make_error("sysv_shm", std::string("write ") + path, werr);
  }
  return {};
}

// execvpe() would search the *supervisor's* PATH; the program's PATH is the one in its envp. The
// search happens before the seccomp filter is installed, so that exactly one execve follows it.
Result<std::string> resolve_program(const ChildConfig& cfg) {
  const std::string& cmd = cfg.argv[0];
  if (cmd.find('/') != std::string::npos) return cmd;
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (auto& e : cfg.envp)
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  bool eacces = false;
  std::size_t start = 0;
  for (;;) {
    auto pos = path.find(':', start);
    std::string dir = path.substr(start, pos == std::string::npos ? std::string::npos : pos - start);
    std::string full = (dir.empty() ? "." : dir) + "/" + cmd;
    struct stat st;
    if (::stat(full.c_str(), &st) == 0) {
      if (S_ISREG(st.st_mode) && ::access(full.c_str(), X_OK) == 0) return full;
      eacces = true;
    } else if (errno == EACCES) {
      eacces = true;
    } else if (errno != ENOENT && errno != ENOTDIR) {
      return Error{"execve", errno, "execute '" + cmd + "'"};
    }
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return Error{"execve", eacces ? EACCES : ENOENT, "execute '" + cmd + "'"};
}

// What clone hands the program child, and what the child leaves for init in the memory they
// share (CLONE_VM): init reads `listener` and `exec_failed` once clone has returned, when the
// child has exec'd or exited.
struct ProgramArgs {
  const ChildConfig* cfg;
  int pty_master;                // init's pty master, -1: none
  int listener = -1;             // the seccomp listener's number in the fd table shared with init
  ChildMsg exec_failed;          // kind 0, or kSetupError: execve failed once the filter was in place
};

// seccomp_data as the kernel builds it for a call from this x86_64 process through
// raw::syscall6, which passes all six argument registers (the unused ones as 0).
struct seccomp_data call_data(int nr, long a0 = 0, long a1 = 0, long a2 = 0) {
  struct seccomp_data d;
  std::memset(&d, 0, sizeof d);
  d.nr = nr;
  d.arch = AUDIT_ARCH_X86_64;
  d.args[0] = static_cast<std::uint64_t>(a0);
  d.args[1] = static_cast<std::uint64_t>(a1);
  d.args[2] = static_cast<std::uint64_t>(a2);
  return d;
}

// The program child's last system calls, checked against the policy before the filter exists.
// Once it is installed the child makes at most two: execve, and if that fails, an exit. Neither
// may be refused: a refusal is a notification, which waits for the supervisor, which gets the
// listener only from init, which clone(CLONE_VFORK) holds until this child has exec'd or exited —
// a deadlock. So the child asks first, with the seccomp_data the kernel will build (call_data).
// The instruction pointer is the one field not known here, and it does not matter: the reference
// program is always libseccomp's (compile_seccomp_policy, or the cache of its output), and
// libseccomp has no comparison on the instruction pointer, so its programs never load it.
// Returns the exit call to use: exit_group, else exit, else -1 (neither is allowed: the child
// then leaves by a fault, which needs no system call; see run_program).
long check_last_calls(const ChildConfig& cfg, const char* path, char* const* argv, char* const* envp) {
  if (cfg.seccomp_filter.empty()) return SYS_exit_group;
  auto exec = call_data(SYS_execve, reinterpret_cast<long>(path), reinterpret_cast<long>(argv),
                        reinterpret_cast<long>(envp));
  if (!seccomp_allows(cfg.seccomp_filter, exec)) {
    std::uint32_t ret = seccomp_evaluate(*cfg.seccomp_reference, exec);
    SeccompAnswer answer = seccomp_answer(ret);
    fail(cfg, Error{"seccomp", answer.kind == SeccompAnswer::kErrno ? answer.err : EPERM,
                    "the seccomp policy refuses execve (" + seccomp_action_text(ret) +
                        "), which starts the program: nothing can run under it"});
  }
  for (long nr : {static_cast<long>(SYS_exit_group), static_cast<long>(SYS_exit)})
    if (seccomp_allows(cfg.seccomp_filter, call_data(static_cast<int>(nr), 125))) return nr;
  return -1;
}

// Installs the filter with a listener, and leaves the listener's number where init finds it.
//
// Why the listener travels this way: it exists only once the filter is installed, in this
// process's fd table, and it is close-on-exec (the kernel opens it with O_CLOEXEC). The program
// child shares that table with init (CLONE_FILES, spawn_program) until execve, which gives the
// program a copy of its own (unshare_files, before the old address space is released and init
// resumes) and closes the close-on-exec fds in that copy only. Init, which no filter binds, then
// still holds the listener under the same number and sends it to the supervisor (run_init). So
// the filter needs no rule for the hand-off: it allows exactly what the policy allows, and no
// ptrace-like access to the program is needed (pidfd_getfd would need it, over a non-dumpable
// address space: refused to a rootless supervisor). Nothing is lost meanwhile: a refused call
// waits in the kernel until the supervisor reads it, and the listener stays open throughout.
void install_seccomp(const ChildConfig& cfg, ProgramArgs& a) {
  struct sock_fprog prog = {static_cast<unsigned short>(cfg.seccomp_filter.size()),
                            const_cast<struct sock_filter*>(cfg.seccomp_filter.data())};
  long listener = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
  if (listener < 0) fail(cfg, sys_error("seccomp", "install the seccomp filter"));  // no filter yet
  a.listener = static_cast<int>(listener);
}

// The program's fds 0, 1, 2, none of them the caller's own (stdin_relay.hpp): the pty slave on
// all three, or the stdin pipe (else the sandbox's /dev/null) and the stdout/stderr pipes.
Status program_stdio(const ChildConfig& cfg, int pty_master) {
  if (pty_master >= 0) return attach_pty_slave(pty_master, cfg.identity.uid, cfg.identity.gid);
  int in = cfg.in_fd >= 0 ? cfg.in_fd : ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (in < 0) return sys_error("stdio", "open /dev/null in the sandbox");
  // dup2(fd, fd) leaves close-on-exec set: a pipe end that already sits on its target (sbx was
  // started with that fd closed) is kept across execve by clearing the flag instead.
  auto place = [](int fd, int target) { return fd == target ? ::fcntl(fd, F_SETFD, 0) : ::dup2(fd, target); };
  if (place(in, 0) < 0 || place(cfg.out_fd, 1) < 0 || place(cfg.err_fd, 2) < 0) return sys_error("stdio", "dup2");
  return {};
}

[[noreturn]] void run_program(ProgramArgs& a) {
  const ChildConfig& cfg = *a.cfg;
  // Default dispositions and an empty mask: sbx ignores SIGPIPE and blocks the signals it
  // forwards, and both would otherwise be inherited across execve — as would any signal the
  // caller ignored, real-time ones included. glibc's signal() refuses its internal signals (32 and
  // 33, EINVAL), so the kernel's rt_sigaction is called directly, for every signal there is.
  struct KernelSigaction {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)();
    unsigned long mask;
  } dfl{SIG_DFL, 0, nullptr, 0};
  for (int sig = 1; sig <= 64; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) ::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof dfl.mask);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Own session, no controlling terminal: TIOCSTI on an inherited terminal fd then fails with
  // EPERM, so the program cannot push input into the user's shell (CVE-2017-5226).
  if (::setsid() < 0) fail(cfg, sys_error("session", "setsid"));
  STAGE(cfg, program_stdio(cfg, a.pty_master));
  STAGE(cfg, set_rlimits(cfg.rlimits, false));
  STAGE(cfg, lock_securebits());
  STAGE(cfg, switch_to_program_identity(cfg.identity));
  if (cfg.umask >= 0) ::umask(static_cast<mode_t>(cfg.umask));
  STAGE(cfg, restrict_capabilities(cfg.keep_caps));
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(cfg, sys_error("no_new_privs", "prctl"));
  if (::chdir(cfg.mounts.workdir.c_str()) != 0)
    fail(cfg, sys_error("workdir", "chdir to " + cfg.mounts.workdir));
  // Only 0, 1, 2 reach the program; the message pipe stays open until execve succeeds.
  ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  auto path = resolve_program(cfg);
  if (!path) fail(cfg, path.error());
  std::vector<char*> argv, envp;
  for (auto& a : cfg.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : cfg.envp) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // Built now, in init's memory: nothing may allocate once the filter is in place, and a failed
  // execve is reported by init (no write that the policy might refuse, see check_last_calls).
  ChildMsg& failed = a.exec_failed;
  std::strncpy(failed.stage, "execve", sizeof failed.stage - 1);
  std::snprintf(failed.message, sizeof failed.message, "execute '%s'", cfg.argv[0].c_str());
  long exit_nr = check_last_calls(cfg, path->c_str(), argv.data(), envp.data());
  STAGE(cfg, set_rlimits(cfg.rlimits, true));  // nothing allocates from here on
  // Seccomp last: no_new_privs and the capability drop above, then the filter, then execve.
  if (!cfg.seccomp_filter.empty()) install_seccomp(cfg, a);
  long rc = raw::syscall6(SYS_execve, reinterpret_cast<long>(path->c_str()), reinterpret_cast<long>(argv.data()),
                          reinterpret_cast<long>(envp.data()));
  failed.err = static_cast<std::int32_t>(-rc);
  failed.kind = ChildMsg::kSetupError;
  // A policy that refuses both exit calls (a program under it could never exit by itself either)
  // leaves a fault, the one way out that makes no system call: SIGILL, whose default action ends
  // the child (its dispositions were reset above). RLIMIT_CORE is 0, so no core file is written
  // (a core_pattern pipe ignores the limit, but a forked init's address space is not dumpable).
  // Init reports the failure either way.
  // Otherwise a loop around the raw call rather than a call of a noreturn function such as _exit:
  // before such a call ASan clears the shadow of the stack being left, for a large range with
  // mmap, which RLIMIT_DATA (or RLIMIT_AS) refuses (the child then died inside ASan instead of
  // exiting 125).
  if (exit_nr < 0) __builtin_trap();
  for (;;) raw::syscall6(exit_nr, 125);
}

int program_entry(void* arg) {
  run_program(*static_cast<ProgramArgs*>(arg));
}

// The program child shares init's memory until its execve (CLONE_VM | CLONE_VFORK, what
// posix_spawn does): fork() would copy init's page tables, and then every page either process
// touches costs a copy-on-write fault — on this kind of nested VM that was ~3 ms per run between
// fork and execve. Init is suspended meanwhile, so the child may use init's heap (it only
// allocates for error messages) but never returns into init's frames: it runs on its own stack
// and leaves only by execve or _exit. Signal dispositions and credentials stay per process (no
// CLONE_SIGHAND, CLONE_THREAD), so run_program's changes to them are its own. The fd table is
// shared (CLONE_FILES) until execve gives the program a copy of its own: that is how the seccomp
// listener reaches init (install_seccomp). The child's changes to the table (its stdio on 0, 1
// and 2, everything else close-on-exec) are init's too, so init closes all but its report pipe
// once the child is gone (run_init).
// The stack: a shared init's comes with init's own (clone.hpp); a forked init maps one and, its
// memory being its own, declares it to AddressSanitizer itself (sanitizer_stack.hpp).
pid_t spawn_program(const ChildConfig& cfg, ProgramArgs& args) {
  constexpr std::size_t kStack = 1 << 20;
  void* mapped = nullptr;
  char* top = static_cast<char*>(cfg.program_stack_top);
  SanitizerExtraStack asan;
  if (!top) {
    mapped = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (mapped == MAP_FAILED) return -1;
    top = static_cast<char*>(mapped) + kStack;
    asan.begin(mapped, kStack);
  }
  pid_t pid = ::clone(program_entry, top, CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD, &args);
  // The child has exec'd or exited, and its stack is free. Raw calls from here: a child that
  // failed to start has reported it, which wakes a supervisor that shares init's memory
  // (clone.hpp). errno still holds clone's error when pid < 0 (no child, nobody woken).
  asan.end();
  if (mapped) raw::munmap(mapped, kStack);
  return pid;
}

// Kills and reaps every other process of the sandbox. Init does it itself instead of leaving it
// to the kernel (which does the same when pid 1 exits) so that its report can mean "the sandbox
// is empty": the supervisor then records the run while init's own exit — its address space, the
// mount namespace's tmpfs mounts — is torn down in parallel (about 1 ms on a VM). kill(-1) from
// pid 1 reaches every process of this pid namespace but init; orphans are reparented to init, so
// waitpid's ECHILD means none is left. Repeating the kill after each reap catches a process that
// a dying one forked in between.
void reap_everything_else() {
  for (;;) {
    raw::kill(-1, SIGKILL);
    int ws;
    long p = raw::wait4(-1, &ws, __WALL, nullptr);
    if (p > 0 || p == -EINTR) continue;
    return;  // ECHILD
  }
}

// Init's loop: reap everything, forward the supervisor's signals to the program's process group,
// report the program's status when it ends. Raw system calls only: the supervisor may be
// running in the same memory by now (raw_syscall.hpp).
//
// Why the process group, as a terminal does with Ctrl-C: the program is the leader of its own
// session and group (setsid in run_program; a session leader cannot leave its group, so the
// group's id stays the program's pid while it lives), and what it runs in the foreground is in
// that group: `sh -c 'sleep 30'` ends at once on SIGINT only if the sleep gets it too (a shell
// waits for its foreground child, then exits 130 because the child died of SIGINT). Processes
// the program put in a session or group of their own are left alone, as a terminal leaves them:
// they are killed with the rest of the sandbox when the program has ended (reap_everything_else).
// kill(-1) would reach those too, and take from the program the choice of how its workers stop.
//
// With a pty (-t) the keyboard's signals, SIGINT and SIGQUIT, go where the pty's own ^C and ^\ keys
// would send them: to its foreground process group, which a shell with job control moves to the
// job it runs while it ignores SIGINT itself. Init learns it from the program's
// /proc/PID/stat (tpgid, in the sandbox's pid namespace) rather than by keeping the master: the
// supervisor's closing its copies of the master must hang the pty up (stdin_relay.hpp).
// Without a foreground group, to the program's.
pid_t foreground_group(pid_t program) {
  char path[32] = "/proc/";
  char digits[12];
  int n = 0;
  for (long v = program; v > 0 && n < 11; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  int k = 6;
  while (n > 0) path[k++] = digits[--n];
  for (const char* t = "/stat"; *t;) path[k++] = *t++;
  path[k] = '\0';
  long fd = raw::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[512];
  long len = raw::read(static_cast<int>(fd), buf, sizeof buf - 1);
  raw::close(static_cast<int>(fd));
  if (len <= 0) return -1;
  buf[len] = '\0';
  // "pid (comm) state ppid pgrp session tty_nr tpgid ...": comm may hold anything, so the
  // fields are counted from its last ')'.
  const char* q = nullptr;
  for (const char* c = buf; *c; ++c)
    if (*c == ')') q = c;
  if (!q) return -1;
  for (int field = 0; field < 6 && *q; ++q)
    if (*q == ' ') ++field;
  long pg = 0;
  for (; *q >= '0' && *q <= '9'; ++q) pg = pg * 10 + (*q - '0');
  return pg > 0 ? static_cast<pid_t>(pg) : -1;
}

pid_t signal_target(int sig, pid_t program, bool tty) {
  if (tty && (sig == SIGINT || sig == SIGQUIT)) {
    pid_t fg = foreground_group(program);
    if (fg > 0) return fg;
  }
  return program;
}

[[noreturn]] void supervise_program(int msg_fd, pid_t program, bool tty) {
  sigset_t set;
  supervised_signals(&set);
  for (;;) {
    siginfo_t si;
    long sig = raw::sigtimedwait(&set, &si);
    if (sig < 0) continue;
    if (sig != SIGCHLD) {
      // The group is gone once the program is a zombie and its group empty: then to the
      // program itself, which is harmless (its status is already decided).
      pid_t group = signal_target(static_cast<int>(sig), program, tty);
      if (raw::kill(-group, static_cast<int>(sig)) < 0) raw::kill(program, static_cast<int>(sig));
      continue;
    }
    int ws;
    long p;
    while ((p = raw::wait4(-1, &ws, WNOHANG | __WALL, nullptr)) > 0) {
      if (p != program) continue;
      reap_everything_else();
      ChildMsg m;
      m.kind = ChildMsg::kProgramStatus;
      m.wait_status = ws;
      raw::getrusage(RUSAGE_CHILDREN, &m.usage);
      send_msg(msg_fd, m);
      raw::exit_group(0);
    }
  }
}

// Init sends the program child's seccomp listener to the supervisor (install_seccomp says why
// this way). Raw calls and a message built in place: the same discipline as init's loop.
// Sends `fd` to the supervisor over `sock` and closes init's copy, with raw calls only: these run
// after the program child was spawned, and a child that failed to start has already woken a
// supervisor that shares init's memory (spawn_program), so nothing here may allocate or touch
// errno, not even on failure (an Error's strings would be malloc'd beside the supervisor's own).
// Failure ends init: a run whose listener or terminal the supervisor never got must not go on.
void hand_over_fd(const ChildConfig& cfg, int sock, int fd, char tag, const char* stage, const char* what) {
  FdMessage mh(fd, tag);
  long n;
  do n = raw::syscall6(SYS_sendmsg, sock, reinterpret_cast<long>(&mh.mh), MSG_NOSIGNAL);
  while (n == -EINTR);
  raw::close(fd);
  if (n == 1) return;
  ChildMsg m;
  m.kind = ChildMsg::kSetupError;
  m.err = n < 0 ? static_cast<std::int32_t>(-n) : EIO;
  std::strncpy(m.stage, stage, sizeof m.stage - 1);
  std::strncpy(m.message, what, sizeof m.message - 1);
  send_msg(cfg.msg_fd, m);
  raw::exit_group(125);  // pid 1 gone: the kernel kills the rest of the sandbox
}

// The program has exec'd under a filter whose refusals nobody would answer unless the supervisor
// holds the listener: it must not run otherwise.
void hand_over_listener(const ChildConfig& cfg, int listener) {
  hand_over_fd(cfg, cfg.seccomp_sock, listener, 'L', "seccomp", "hand the seccomp listener to the supervisor");
}

// Closes every fd but `fd`, with raw calls (nothing allocated).
void keep_only(int fd) {
  if (fd > 0) raw::syscall6(SYS_close_range, 0, fd - 1, 0);
  raw::syscall6(SYS_close_range, fd + 1, static_cast<long>(~0U), 0);
}

}  // namespace

void supervised_signals(sigset_t* set) {
  sigemptyset(set);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(set, s);
}

int init_entry(void* cfg) { run_init(*static_cast<const ChildConfig*>(cfg)); }

[[noreturn]] static void start_program(const ChildConfig& cfg);

void run_init(const ChildConfig& cfg) {
  // If sbx dies, so does the sandbox: init gets SIGKILL, and with pid 1 gone the kernel kills the
  // rest of the pid namespace. Raw calls until "go": a supervisor sharing our memory is still
  // running (writing the id maps).
  raw::prctl(PR_SET_PDEATHSIG, SIGKILL);
  char go;
  if (raw::read(cfg.sync_fd, &go, 1) != 1) raw::exit_group(125);  // supervisor gone before the maps were written
  close_all_except({0, 1, 2, cfg.sync_fd, cfg.msg_fd, cfg.out_fd, cfg.err_fd, cfg.seccomp_sock, cfg.proxy_sock,
                    cfg.out_sock, cfg.mounts.image_fd, cfg.in_fd, cfg.pty_sock});
  auto image_fd = reopen_image_in_namespace(cfg.mounts);  // before the uid changes (see mounts.hpp)
  if (!image_fd) fail(cfg, image_fd.error());
  STAGE(cfg, become_namespace_root(cfg.identity));
  // Changing credentials clears the parent-death signal: set it again, then make sure the
  // supervisor did not die in between (its end of the sync pipe would have hung up).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  struct pollfd pfd = {cfg.sync_fd, POLLIN, 0};
  if (::poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLHUP)) ::_exit(125);
  auto out_dir = build_root(cfg.mounts, *image_fd);
  if (!out_dir) fail(cfg, out_dir.error());
  if (cfg.out_sock >= 0) {
    STAGE(cfg, send_fd(cfg.out_sock, *out_dir, 'O', "mounts", "hand /out to the supervisor"));
    ::close(cfg.out_sock);
  }
  ::close(*out_dir);
  if (::sethostname(cfg.hostname.c_str(), cfg.hostname.size()) != 0)
    fail(cfg, sys_error("hostname", "sethostname"));
  if (cfg.sysv_shm_bytes > 0) STAGE(cfg, bound_sysv_shm(cfg.sysv_shm_bytes));
  STAGE(cfg, make_proc_sys_readonly());  // after the last write there: the cap above
  STAGE(cfg, bring_up_loopback());
  // Fail closed: a run that asked for the proxy does not start without it.
  if (cfg.proxy_sock >= 0) STAGE(cfg, hand_over_proxy_listener(cfg.proxy_sock, cfg.proxy_port));
  // Init keeps its capabilities, and the program has none: ptrace and /proc/1/mem, environ, maps
  // need a superset of init's capabilities (or CAP_SYS_PTRACE over its namespace), so the
  // program can neither trace init nor read its memory. Init's address space is also made
  // non-dumpable, so that /proc/1 belongs to the host's root and not to the uid the program may
  // share with init (rootless): a forked init does it here, for a shared one the supervisor did
  // it once the id maps were written (clone.hpp, NonDumpableWhileShared).
  if (!cfg.shared_memory) ::prctl(PR_SET_DUMPABLE, 0);
  // The supervisor's second byte: the image's seal matched (or there is no image). Anything else,
  // or EOF because the supervisor died or killed us, and the program never starts.
  if (::read(cfg.sync_fd, &go, 1) != 1 || go != 's') ::_exit(125);
  if (cfg.pool_job) {
    // A warm pool's sandbox waited here, built, until its call was handed to it: the call's
    // files are written from inside (nothing but init has run in the sandbox), the pool's
    // directories turn read-only, and the program is the call's. A forked init (sandbox.cpp):
    // cfg is init's own copy, so a changed copy of it serves the rest.
    auto job = read_pool_job(cfg.sync_fd);
    if (!job) fail(cfg, job.error());
    STAGE(cfg, write_pool_files(*job));
    ChildConfig call = cfg;
    call.argv = std::move(job->argv);
    start_program(call);
  }
  start_program(cfg);
}

// The rest of init once the supervisor said "s": the program, then init's watch over it.
[[noreturn]] static void start_program(const ChildConfig& cfg) {
  int pty_master = -1;
  if (cfg.pty_sock >= 0) {
    auto m = open_sandbox_pty(cfg.pty_size);
    if (!m) fail(cfg, m.error());
    pty_master = *m;
  }
  ProgramArgs args{&cfg, pty_master};
  pid_t program = spawn_program(cfg, args);
  if (program < 0) fail(cfg, sys_error("fork", "start the program"));
  if (args.listener >= 0) hand_over_listener(cfg, args.listener);
  // The program child ran in this address space until its execve, and its change of uid set the
  // address space's dumpable flag to fs.suid_dumpable (commit_creds): 0 or 2 keep /proc/1 root's,
  // 1 would give it back to init's uid. Said again, for that setting.
  ::prctl(PR_SET_DUMPABLE, 0);
  if (pty_master >= 0) {
    // Sent once the program holds the slave, so that a master which reports POLLHUP or EIO in
    // the supervisor means the program has let go of its terminal, never "not yet opened". Raw
    // (hand_over_fd): a program child that failed before its execve has woken the supervisor.
    // Init keeps no copy of the master: the supervisor's copy is the only one from here on.
    hand_over_fd(cfg, cfg.pty_sock, pty_master, 'T', "tty", "hand the pty master to the supervisor");
  }
  // The fd table was the program child's too: the program's stdio (the pipes, the pty slave) is
  // on 0, 1 and 2 here as well, and init must not hold it, nor anything else: the supervisor
  // sees the end of the output, the pty's hang-up and the listener socket's EOF only when no
  // process of the sandbox but the program's own has them open.
  keep_only(cfg.msg_fd);
  if (args.exec_failed.kind == ChildMsg::kSetupError) send_msg(cfg.msg_fd, args.exec_failed);
  // Everything init needs from here on is on its stack: the supervisor may return and free cfg.
  int msg_fd = cfg.msg_fd;
  ChildMsg started;
  started.kind = ChildMsg::kStarted;
  // What the program actually holds, for the record: read once, before it can be reaped (a
  // zombie's status still shows its sets). The vfork-style spawn returns once execve has released
  // the old memory (exec_mmap), which is before execve commits the new credentials
  // (begin_new_exec), so the read may land on either side of that commit. Both show the same
  // sets: restrict_capabilities made every set `keep` before execve, and with no_new_privs
  // execve can only lower them (a file-capability or setuid binary), never raise them; the
  // record is what the program holds at most.
  ProcessCaps pc;
  if (args.exec_failed.kind != ChildMsg::kSetupError && read_process_caps_raw(program, pc)) {
    CapMask sets[5] = {pc.inheritable, pc.permitted, pc.effective, pc.bounding, pc.ambient};
    for (int i = 0; i < 5; ++i) started.caps.sets[i] = sets[i];
    started.caps.read = 1;
  }
  send_msg(msg_fd, started);
  supervise_program(msg_fd, program, pty_master >= 0);
}

}  // namespace sbx
