#include "runtime/launch/child.hpp"

#include <fcntl.h>
#include <sched.h>
#include <linux/audit.h>
#include <linux/close_range.h>
#include <linux/seccomp.h>
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
#include "runtime/linux/memory_fallback.hpp"
#include "runtime/linux/net.hpp"
#include "runtime/launch/pool_job.hpp"
#include "runtime/launch/warm_start.hpp"
#include "runtime/linux/pty.hpp"
#include "runtime/base/raw_syscall.hpp"
#include "runtime/base/sanitizer_stack.hpp"
#include "runtime/linux/seccomp_policy.hpp"

namespace sbx {

namespace {

// Init's end of the handshake (handshake.hpp), by the numbers the supervisor put in cfg. Built
// on the caller's stack: init keeps it there, so nothing of cfg is needed once the program runs.
InitEnd init_end(const ChildConfig& cfg) { return InitEnd(cfg.fds); }

// A stage failed: report it and exit 125 (the program child, too, reports on init's pipe).
[[noreturn]] void fail(const ChildConfig& cfg, const Error& e) {
  init_end(cfg).report_setup_error(e.stage, e.err, e.message.c_str());
}

#define STAGE(cfg, expr)                   \
  do {                                     \
    auto st_ = (expr);                     \
    if (!st_.ok()) fail(cfg, st_.error()); \
  } while (0)

// Closes every fd but 0, 1, 2, init's (InitFds), the image's (and its idmapped copy) and the idmapped binds' (the child
// inherits all of sbx's descriptors).
void close_all_except(const InitFds& fds, const MountPlan& mounts) {
  std::vector<int> keep = {0, 1, 2, mounts.image_fd, mounts.image_tree_fd};
  for (auto& op : mounts.ops)  // idmapped binds' detached mounts, moved into place by build_root
    if (op.tree_fd >= 0) keep.push_back(op.tree_fd);
  fds.for_each([&](int fd) { keep.push_back(fd); });
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

// SysV IPC is memory that no rlimit counts (shmget, msgget, semget need no fd, and what they make
// outlives its creator until IPC_RMID or the ipc namespace's end): memory_fallback.hpp says how
// much each may hold (sysv_ipc_caps). The run has its own ipc namespace, whose sysctls are per
// namespace (ipc/ipc_sysctl.c) and owned by its user namespace's root since Linux 5.17, i.e.
// writable by init here. The /proc here is the sandbox's own (build_root has pivoted). On a
// kernel that refuses the write the run fails closed: a memory limit promised must not silently
// lose a part.
Status bound_sysv_ipc(std::int64_t bytes) {
  for (auto& [name, value] : sysv_ipc_caps(bytes, ::sysconf(_SC_PAGESIZE))) {
    std::string path = std::string("/proc/sys/kernel/") + name;
    InitFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    // Before Linux 5.17 these files belong to the initial user namespace: refused here.
    if (!fd.ok()) return sys_error("sysv_shm", "open " + path + " (the run's SysV IPC cap; needs Linux 5.17+)");
    std::string text = value + "\n";
    ssize_t n = ::write(fd.get(), text.data(), text.size());
    int werr = errno;
    if (n != static_cast<ssize_t>(text.size())) return make_error("sysv_shm", "write " + path, werr);
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
  int pty_master;         // init's pty master, -1: none
  int listener = -1;      // the seccomp listener's number in the fd table shared with init
  ChildMsg exec_failed;   // kind 0, or kSetupError: execve failed once the filter was in place
  long long exec_ns = 0;  // the realtime clock as clone returned (the record's program_started_at)
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
  auto exec =
      call_data(SYS_execve, reinterpret_cast<long>(path), reinterpret_cast<long>(argv), reinterpret_cast<long>(envp));
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
// still holds the listener under the same number and sends it to the supervisor (init_end.cpp,
// watch_program). So
// the filter needs no rule for the hand-off: it allows exactly what the policy allows, and no
// ptrace-like access to the program is needed (pidfd_getfd would need it, over a non-dumpable
// address space: refused to a rootless supervisor). Nothing is lost meanwhile: a refused call
// waits in the kernel until the supervisor reads it, and the listener stays open throughout.
void install_seccomp(const ChildConfig& cfg, ProgramArgs& a) {
  struct sock_fprog prog = {static_cast<unsigned short>(cfg.seccomp_filter.size()),
                            const_cast<struct sock_filter*>(cfg.seccomp_filter.data())};
  long listener = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                            cfg.seccomp_listener ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0U, &prog);
  if (listener < 0) fail(cfg, sys_error("seccomp", "install the seccomp filter"));  // no filter yet
  a.listener = cfg.seccomp_listener ? static_cast<int>(listener) : -1;
}

// The program's fds 0, 1, 2, none of them the caller's own (stdin_relay.hpp): the pty slave on
// all three, or the stdin pipe (else the sandbox's /dev/null) and the stdout/stderr pipes.
Status program_stdio(const ChildConfig& cfg, int pty_master) {
  if (pty_master >= 0) return attach_pty_slave(pty_master, cfg.identity.uid, cfg.identity.gid);
  int in = cfg.fds.in >= 0 ? cfg.fds.in : ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (in < 0) return sys_error("stdio", "open /dev/null in the sandbox");
  // dup2(fd, fd) leaves close-on-exec set: a pipe end that already sits on its target (sbx was
  // started with that fd closed) is kept across execve by clearing the flag instead.
  auto place = [](int fd, int target) { return fd == target ? ::fcntl(fd, F_SETFD, 0) : ::dup2(fd, target); };
  if (place(in, 0) < 0 || place(cfg.fds.out, 1) < 0 || place(cfg.fds.err, 2) < 0) return sys_error("stdio", "dup2");
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
  if (::chdir(cfg.mounts.workdir.c_str()) != 0) fail(cfg, sys_error("workdir", "chdir to " + cfg.mounts.workdir));
  // Only 0, 1, 2 reach the program; the message pipe stays open until execve succeeds.
  ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  auto path = resolve_program(cfg);
  if (!path) fail(cfg, path.error());
  std::vector<char*> argv, envp;
  for (auto& arg : cfg.argv) argv.push_back(const_cast<char*>(arg.c_str()));
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

int program_entry(void* arg) { run_program(*static_cast<ProgramArgs*>(arg)); }

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
// once the child is gone (watch_program, init_end.cpp).
// The stack: a shared init's comes with init's own (clone.hpp); a forked init maps one and, its
// memory being its own, declares it to AddressSanitizer itself (sanitizer_stack.hpp).
pid_t spawn_program(const ChildConfig& cfg, ProgramArgs& args) {
  constexpr std::size_t kStack = 1 << 20;
  void* mapped = nullptr;
  char* top = static_cast<char*>(cfg.program_stack_top);
  SanitizerExtraStack asan;
  if (!top) {
    mapped =
        ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (mapped == MAP_FAILED) return -1;
    top = static_cast<char*>(mapped) + kStack;
    asan.begin(mapped, kStack);
  }
  pid_t pid = ::clone(program_entry, top, CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD, &args);
  // Read first: the execve has just released this address space (or the child exited, which the
  // supervisor tells apart by the setup error reported before).
  args.exec_ns = raw::realtime_ns();
  // The child has exec'd or exited, and its stack is free. Raw calls from here: a child that
  // failed to start has reported it, which wakes a supervisor that shares init's memory
  // (clone.hpp). errno still holds clone's error when pid < 0 (no child, nobody woken).
  asan.end();
  if (mapped) raw::munmap(mapped, kStack);
  return pid;
}

}  // namespace

int init_entry(void* cfg) { run_init(*static_cast<const ChildConfig*>(cfg)); }

[[noreturn]] static void start_program(const ChildConfig& cfg, const InitEnd& end);
[[noreturn]] static void serve_warm_call(const ChildConfig& cfg, const InitEnd& end);

void run_init(const ChildConfig& cfg) {
  // Init's end of the handshake, on this frame, which init never leaves (handshake.hpp).
  InitEnd end = init_end(cfg);
  // If sbx dies, so does the sandbox: init gets SIGKILL, and with pid 1 gone the kernel kills the
  // rest of the pid namespace. The signal is armed only now, so a supervisor killed between its
  // clone and here sends none: init's copy of the supervisor's end of the sync pipe goes too,
  // and wait_go then reads EOF and ends init (getppid() cannot tell: it is 0 in a new pid
  // namespace). Raw calls until "go": a supervisor sharing our memory is still running (writing
  // the id maps).
  end.arm_parent_death(cfg.supervisor_sync_fd);
  end.wait_go();
  close_all_except(cfg.fds, cfg.mounts);
  auto image_fd = reopen_image_in_namespace(cfg.mounts);  // before the uid changes (see mounts.hpp)
  if (!image_fd) fail(cfg, image_fd.error());
  STAGE(cfg, become_namespace_root(cfg.identity));
  STAGE(cfg, set_rlimits(cfg.init_rlimits, false));  // before any process of the program's exists
  // Changing credentials clears the parent-death signal: set it again, then make sure the
  // supervisor did not die in between (its end of the sync pipe would have hung up).
  raw::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (end.supervisor_gone()) raw::exit_group(125);
  auto built = build_root(cfg.mounts, *image_fd);
  if (!built) fail(cfg, built.error());
  InitFd out_dir(*built);
  if (cfg.fds.out_sock >= 0) {
    if (long r = end.send_out_dir(out_dir.get()); r < 0)
      end.report_setup_error("mounts", static_cast<int>(-r), "hand /out to the supervisor");
  }
  out_dir.reset();
  if (::sethostname(cfg.hostname.c_str(), cfg.hostname.size()) != 0) fail(cfg, sys_error("hostname", "sethostname"));
  if (cfg.sysv_ipc_bytes > 0) STAGE(cfg, bound_sysv_ipc(cfg.sysv_ipc_bytes));
  STAGE(cfg, make_proc_sys_readonly());  // after the last write there: the cap above
  STAGE(cfg, bring_up_loopback());
  // Fail closed: a run that asked for the proxy does not start without it.
  if (cfg.fds.proxy_sock >= 0) {
    auto listener = open_proxy_listener(cfg.proxy_port);
    if (!listener) fail(cfg, listener.error());
    if (long r = end.send_proxy_listener(listener->get()); r < 0)
      end.report_setup_error("network", static_cast<int>(-r), "hand the egress proxy socket to the supervisor");
  }
  // Init keeps its capabilities, and the program has none: ptrace and /proc/1/mem, environ, maps
  // need a superset of init's capabilities (or CAP_SYS_PTRACE over its namespace), so the
  // program can neither trace init nor read its memory. Init's address space is also made
  // non-dumpable, so that /proc/1 belongs to the host's root and not to the uid the program may
  // share with init (rootless): a forked init does it here, for a shared one the supervisor did
  // it once the id maps were written (clone.hpp, NonDumpableWhileShared).
  if (!cfg.shared_memory) ::prctl(PR_SET_DUMPABLE, 0);
  if (cfg.pool_job && !cfg.warm_argv.empty()) serve_warm_call(cfg, end);
  // The supervisor's second byte: the image's seal matched (or there is no image). Anything else,
  // or EOF because the supervisor died or killed us, and the program never starts.
  end.wait_start();
  if (cfg.pool_job) {
    // A warm pool's sandbox waited here, built, until its call was handed to it: the call's
    // files are written from inside (nothing but init has run in the sandbox), the pool's
    // directories turn read-only, and the program is the call's. A forked init (sandbox.cpp):
    // cfg is init's own copy, so a changed copy of it serves the rest.
    auto job = read_pool_job(end.sync_fd());
    if (!job) fail(cfg, job.error());
    STAGE(cfg, write_pool_files(*job));
    ChildConfig call = cfg;
    call.argv = std::move(job->argv);
    start_program(call, end);
  }
  start_program(cfg, end);
}

// The rest of init once the supervisor said "s": the program, then init's watch over it.
[[noreturn]] static void start_program(const ChildConfig& cfg, const InitEnd& end) {
  int pty_master = -1;
  if (cfg.fds.pty_sock >= 0) {
    auto m = open_sandbox_pty(cfg.pty_size);
    if (!m) fail(cfg, m.error());
    pty_master = *m;
  }
  ProgramArgs args{&cfg, pty_master};
  pid_t program = spawn_program(cfg, args);
  if (program < 0) fail(cfg, sys_error("fork", "start the program"));
  // Raw calls only from here (init_end.cpp, checked): a program child that failed to start has
  // reported it, which wakes a supervisor that shares init's memory.
  watch_program(end,
                StartedProgram{program, args.listener, cfg.fds.pty_sock, pty_master, &args.exec_failed, args.exec_ns});
}

// A socket end moved to 3 or above (close-on-exec): 0, 1 and 2 are the program's stdio, which
// program_stdio places in the fd table init shares with the program child.
static int above_stdio(int fd) {
  if (fd > 2) return fd;
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  ::close(fd);
  return moved;
}

// A warm pool's sandbox with a prepared interpreter (warm_start.hpp): the driver starts now, as
// the program, and the call runs in it once it arrives. Init serves the driver's seccomp
// refusals meanwhile, and tells the supervisor when it is ready.
[[noreturn]] static void serve_warm_call(const ChildConfig& cfg, const InitEnd& end) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    fail(cfg, sys_error("pool", "socketpair for the warm interpreter"));
  int sock = above_stdio(sv[0]), driver_end = above_stdio(sv[1]);
  if (sock < 0 || driver_end < 0) fail(cfg, sys_error("pool", "move the warm interpreter's socket"));
  // The call's directories are init's alone until the call: the interpreter runs image code
  // before it, which must not leave files there (or hold them open against the read-only
  // remount). 0555: even a program with init's uid and no capabilities cannot write.
  for (auto& d : kPoolDirs)
    if (::chmod(d.c_str(), 0555) != 0) fail(cfg, sys_error("pool", "chmod " + d));
  ChildConfig driver = cfg;  // on this frame, which init never leaves: args points into it
  driver.argv = cfg.warm_argv;
  driver.fds.in = driver_end;
  ProgramArgs args{&driver, -1};
  pid_t pid = spawn_program(driver, args);
  if (pid < 0) fail(cfg, sys_error("fork", "start the warm interpreter"));
  if (args.exec_failed.kind == ChildMsg::kSetupError) {
    end.report(args.exec_failed);
    raw::exit_group(125);
  }
  // The driver's change of uid in init's memory set init's dumpable flag to fs.suid_dumpable
  // (watch_program says why): not dumpable again, for the whole wait, not only from the call.
  ::prctl(PR_SET_DUMPABLE, 0);
  // The program child put driver_end on 0 of the table it shared with init: init keeps neither,
  // so that the driver's exit reads as EOF on `sock`.
  ::close(driver_end);
  ::close(0);
  WarmWait wait(sock, args.listener, cfg.seccomp_reference);
  auto failed = [&] {
    std::string why = "the warm interpreter " + cfg.warm_argv[0] + " could not be prepared: " + wait.failure();
    end.report_setup_error("pool", 0, why.c_str());
  };
  // What the ready interpreter holds, for the record (watch_program says why it is read), read
  // as it says it is ready, before it waits: after the call's "s" the read would sit between the
  // job and the call's first line (bench/README.md, Spawn). One the call found not ready yet is
  // read by watch_program, at the call.
  std::uint64_t caps[5];
  bool caps_read = false;
  WarmWait::Event e = wait.next(end.sync_fd());
  if (e == WarmWait::kReady) {
    caps_read = read_caps_sets(pid, caps);
    end.report_warm_ready(wait.note().c_str());
    e = wait.next(end.sync_fd());
  }
  if (e == WarmWait::kFailed) failed();
  // The call has come ("s", then its job: pool_job.hpp).
  end.wait_start();
  auto job = read_pool_job(end.sync_fd());
  if (!job) fail(cfg, job.error());
  STAGE(cfg, write_pool_files(*job));
  // A call that came before the driver was ready waits for it (its wall-time limit runs).
  if (!wait.ready() && wait.next(-1) == WarmWait::kFailed) failed();
  std::string go = encode_driver_argv(job->argv);
  for (std::size_t off = 0; off < go.size();) {
    ssize_t n = ::send(sock, go.data() + off, go.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(cfg, sys_error("pool", "hand the call to the warm interpreter"));
    off += static_cast<std::size_t>(n);
  }
  ::close(sock);  // the driver reads EOF after the argv
  watch_program(end, StartedProgram{pid, args.listener, -1, -1, &args.exec_failed, raw::realtime_ns(),
                                    caps_read ? caps : nullptr});
}

}  // namespace sbx
