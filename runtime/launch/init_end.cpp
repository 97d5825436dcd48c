// Init's half of the handshake (handshake.hpp, InitEnd) and init's loop once the program child is
// back: the code a shared init runs while the supervisor may run in the same memory
// (docs/ARCHITECTURE.md, "The shared init and its rules"). Raw system calls on fixed buffers only:
// nothing here may touch errno, malloc or any other thread-local or locked state of the
// supervisor's. This file is its own object so that this is checked, not only said: the ctest
// `init_raw` (tests/tools/check_init_raw.py) lists the object's undefined symbols with `nm -u`
// and refuses anything outside its allowlist, so a call of a libc wrapper, an allocation or a
// log line added here fails the build's tests. Keep it that way: helpers go into this file (in
// the anonymous namespace below) or into raw_syscall.hpp, never into a call of another unit.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <cstring>

#include "runtime/base/raw_syscall.hpp"
#include "runtime/launch/handshake.hpp"
#include "runtime/model/caps.hpp"

namespace sbx {

namespace {

// strncpy without the library call: cuts `from` to fit `n` bytes with the terminating 0.
void copy_cut(char* to, std::size_t n, const char* from) {
  std::size_t i = 0;
  for (; from && from[i] && i + 1 < n; ++i) to[i] = from[i];
  to[i] = '\0';
}

// One ChildMsg, whole: a pipe write of at most PIPE_BUF bytes is atomic, so the supervisor reads
// whole messages or none.
void send_msg(int fd, const ChildMsg& m) {
  long n;
  do n = raw::write(fd, &m, sizeof m);
  while (n == -EINTR);
}

// fdpass.hpp's FdMessage, built here in place so that this object calls nothing outside itself.
long send_one_fd(int sock, int fd, char tag) {
  char byte = tag;
  struct iovec iov = {&byte, 1};
  alignas(struct cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
  for (auto& c : cbuf) c = 0;
  struct msghdr mh;
  std::memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  long n;
  do n = raw::syscall6(SYS_sendmsg, sock, reinterpret_cast<long>(&mh), MSG_NOSIGNAL);
  while (n == -EINTR);
  return n == 1 ? 0 : (n < 0 ? n : -EIO);
}

long read_byte(int fd, char* c) {
  long n;
  do n = raw::read(fd, c, 1);
  while (n == -EINTR);
  return n;
}

// Kills and reaps every other process of the sandbox. Init does it itself instead of leaving it
// to the kernel (which does the same when pid 1 exits) so that its report can mean "the sandbox
// is empty": the supervisor then records the run while init's own exit — its address space, the
// mount namespace's tmpfs mounts — is torn down in parallel. kill(-1) from pid 1 reaches every
// process of this pid namespace but init; orphans are reparented to init, so wait4's ECHILD
// means none is left. Repeating the kill after each reap catches a process that a dying one
// forked in between. Returns the program's wait status if it was among them, else program_ws.
int reap_everything_else(pid_t program, int program_ws) {
  for (;;) {
    raw::kill(-1, SIGKILL);
    int ws;
    long p = raw::wait4(-1, &ws, __WALL, nullptr);
    if (p == program) program_ws = ws;
    if (p > 0 || p == -EINTR) continue;
    return program_ws;  // ECHILD
  }
}

// The sandbox is empty: the program's status and the CPU time of everything init reaped.
[[noreturn]] void report_and_exit(const InitEnd& end, int program_ws) {
  struct rusage usage;
  std::memset(&usage, 0, sizeof usage);
  raw::getrusage(RUSAGE_CHILDREN, &usage);
  end.report_program_status(program_ws, usage);
  raw::exit_group(0);
}

// Why signals go to the program's process group, as a terminal does with Ctrl-C: the program is
// the leader of its own session and group (setsid in child.cpp, run_program; a session leader
// cannot leave its group, so the group's id stays the program's pid while it lives), and what it
// runs in the foreground is in that group: `sh -c 'sleep 30'` ends at once on SIGINT only if the
// sleep gets it too (a shell waits for its foreground child, then exits 130 because the child
// died of SIGINT). Processes the program put in a session or group of their own are left alone,
// as a terminal leaves them: they are killed with the rest of the sandbox when the program has
// ended (reap_everything_else). kill(-1) would reach those too, and take from the program the
// choice of how its workers stop.
//
// With a pty (-t) the keyboard's signals, SIGINT and SIGQUIT, go where the pty's own ^C and ^\ keys
// would send them: to its foreground process group, which a shell with job control moves to the
// job it runs while it ignores SIGINT itself. Init learns it from the program's /proc/PID/stat
// (tpgid, in the sandbox's pid namespace) rather than by keeping the master: the supervisor's
// closing its copies of the master must hang the pty up (stdin_relay.hpp). Without a foreground
// group, to the program's. Parsed by hand: no library call may run here.
pid_t foreground_group(pid_t program) {
  char path[32] = "/proc/";
  char digits[12];
  int n = 0;
  for (long v = program; v > 0 && n < 11; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  int k = 6;
  while (n > 0) path[k++] = digits[--n];
  for (const char* t = "/stat"; *t;) path[k++] = *t++;
  path[k] = '\0';
  InitFd fd(static_cast<int>(raw::open(path, O_RDONLY | O_CLOEXEC)));
  if (!fd.ok()) return -1;
  char buf[512];
  long len = raw::read(fd.get(), buf, sizeof buf - 1);
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

// The supervisor's request to end the run (kEndSandboxSignal) is looked for first on every pass
// of init's loop: sigtimedwait hands out the lowest pending signal, and a program that keeps init
// busy (SIGUSR1 sent to pid 1 in a loop, orphans exiting) would otherwise starve it until the
// supervisor's fallback SIGKILL, losing the tree's usage. True, with `si` filled, when it is
// pending; it does not wait.
bool end_requested(siginfo_t* si) {
  sigset_t only;
  std::memset(&only, 0, sizeof only);
  only.__val[0] = 1UL << (kEndSandboxSignal - 1);
  const struct timespec now = {0, 0};
  return raw::sigtimedwait(&only, si, &now) == kEndSandboxSignal;
}

// From the supervisor only: outside this pid namespace, so si_pid reads 0, and a kill(2)-like
// sender, SI_USER. A process inside may forge si_pid with rt_sigqueueinfo, but the kernel refuses
// it an si_code of SI_USER (or any non-negative one) towards another process.
bool from_supervisor(const siginfo_t& si) { return si.si_pid == 0 && si.si_code == SI_USER; }

}  // namespace

bool read_caps_sets(pid_t pid, std::uint64_t* sets) {
  ProcessCaps pc;
  if (!read_process_caps_raw(pid, pc)) return false;
  sets[0] = pc.inheritable, sets[1] = pc.permitted, sets[2] = pc.effective, sets[3] = pc.bounding;
  sets[4] = pc.ambient;
  return true;
}

void supervised_signals(sigset_t* set) {
  // sigemptyset/sigaddset by hand (glibc's x86_64 layout: signal N is bit N-1 of the first
  // word, the kernel's 8-byte set): this runs in init's loop too.
  std::memset(set, 0, sizeof *set);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, kEndSandboxSignal})
    set->__val[0] |= 1UL << (s - 1);
}

void InitFd::reset(int fd) {
  if (fd_ >= 0) raw::close(fd_);
  fd_ = fd;
}

void InitEnd::arm_parent_death(int inherited_supervisor_end) const {
  raw::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (inherited_supervisor_end >= 0 && inherited_supervisor_end != fds_.sync) raw::close(inherited_supervisor_end);
}

void InitEnd::wait_go() const {
  char go;
  if (read_byte(fds_.sync, &go) != 1) raw::exit_group(125);  // the supervisor is gone: no maps, no run
}

bool InitEnd::supervisor_gone() const {
  struct pollfd p = {fds_.sync, POLLIN, 0};
  struct timespec now = {0, 0};
  return raw::ppoll(&p, 1, &now) > 0 && (p.revents & POLLHUP);
}

long InitEnd::send_out_dir(int dir_fd) {
  long r = send_one_fd(fds_.out_sock, dir_fd, 'O');
  InitFd done(fds_.out_sock);
  fds_.out_sock = -1;
  return r;
}

long InitEnd::send_proxy_listener(int listener) {
  long r = send_one_fd(fds_.proxy_sock, listener, 'P');
  InitFd done(fds_.proxy_sock);
  fds_.proxy_sock = -1;
  return r;
}

void InitEnd::wait_start() const {
  char s;
  if (read_byte(fds_.sync, &s) != 1 || s != 's') raw::exit_group(125);
}

void InitEnd::report_setup_error(Stage stage, int err, const char* message) const {
  ChildMsg m;
  m.kind = ChildMsg::kSetupError;
  m.err = err;
  copy_cut(m.stage, sizeof m.stage, stage.name());
  copy_cut(m.message, sizeof m.message, message);
  send_msg(fds_.msg, m);
  raw::exit_group(125);  // pid 1 gone: the kernel kills the rest of the sandbox
}

void InitEnd::hand_over(int sock, int fd, char tag, Stage stage, const char* what) const {
  long r = send_one_fd(sock, fd, tag);
  raw::close(fd);
  if (r < 0) report_setup_error(stage, static_cast<int>(-r), what);
}

// The program has exec'd under a filter whose refusals nobody would answer unless the supervisor
// holds the listener: it must not run otherwise.
void InitEnd::send_listener(int listener) const {
  hand_over(fds_.listener_sock, listener, 'L', "seccomp", "hand the seccomp listener to the supervisor");
}

void InitEnd::send_pty_master(int sock, int master) const {
  hand_over(sock, master, 'T', "tty", "hand the pty master to the supervisor");
}

void InitEnd::keep_only_reports() const {
  if (fds_.msg > 0) raw::syscall6(SYS_close_range, 0, fds_.msg - 1, 0);
  raw::syscall6(SYS_close_range, fds_.msg + 1, static_cast<long>(~0U), 0);
}

void InitEnd::report(const ChildMsg& m) const { send_msg(fds_.msg, m); }

void InitEnd::report_started(const std::uint64_t* sets, long long exec_ns) const {
  ChildMsg m;
  m.kind = ChildMsg::kStarted;
  m.caps.exec_ns = exec_ns;
  if (sets) {
    for (int i = 0; i < 5; ++i) m.caps.sets[i] = sets[i];
    m.caps.read = 1;
  }
  send_msg(fds_.msg, m);
}

void InitEnd::report_warm_ready(const char* note) const {
  ChildMsg m;
  m.kind = ChildMsg::kWarmReady;
  copy_cut(m.message, sizeof m.message, note);
  send_msg(fds_.msg, m);
}

void InitEnd::report_program_status(int wait_status, const struct rusage& usage) const {
  ChildMsg m;
  m.kind = ChildMsg::kProgramStatus;
  m.wait_status = wait_status;
  m.usage = usage;
  send_msg(fds_.msg, m);
}

void watch_program(const InitEnd& end, const StartedProgram& sp) {
  if (sp.listener >= 0) end.send_listener(sp.listener);
  // The program child ran in this address space until its execve, and its change of uid set the
  // address space's dumpable flag to fs.suid_dumpable (commit_creds): 0 or 2 keep /proc/1 root's,
  // 1 would give it back to init's uid. Said again, for that setting.
  raw::prctl(PR_SET_DUMPABLE, 0);
  if (sp.pty_master >= 0) {
    // Sent once the program holds the slave, so that a master which reports POLLHUP or EIO in
    // the supervisor means the program has let go of its terminal, never "not yet opened". Init
    // keeps no copy of the master: the supervisor's copy is the only one from here on.
    end.send_pty_master(sp.pty_sock, sp.pty_master);
  }
  // The fd table was the program child's too: the program's stdio (the pipes, the pty slave) is
  // on 0, 1 and 2 here as well, and init must not hold it, nor anything else: the supervisor
  // sees the end of the output, the pty's hang-up and the listener socket's EOF only when no
  // process of the sandbox but the program's own has them open.
  end.keep_only_reports();
  bool failed = sp.exec_failed->kind == ChildMsg::kSetupError;
  if (failed) end.report(*sp.exec_failed);
  // What the program actually holds, for the record: read once, before it can be reaped (a
  // zombie's status still shows its sets). The vfork-style spawn returns once execve has released
  // the old memory (exec_mmap), which is before execve commits the new credentials
  // (begin_new_exec), so the read may land on either side of that commit. Both show the same
  // sets: restrict_capabilities made every set `keep` before execve, and with no_new_privs
  // execve can only lower them (a file-capability or setuid binary), never raise them; the
  // record is what the program holds at most. read_process_caps_raw (caps.hpp) is raw calls on
  // a stack buffer: the one call of another unit the check allows here.
  // A prepared interpreter's were read before its call (StartedProgram::caps_sets): nothing has
  // run in it since but its wait.
  std::uint64_t sets[5];
  const std::uint64_t* held = sp.caps_sets ? sp.caps_sets : sets;
  bool read = !failed && (sp.caps_sets || read_caps_sets(sp.pid, sets));
  // From here on the supervisor may run again and free what it gave init (ChildConfig): all
  // init uses is on its own stack (a prepared interpreter's sets are on serve_warm_call's
  // frame, which init never leaves).
  end.report_started(read ? held : nullptr, failed ? 0 : sp.exec_ns);
  bool tty = sp.pty_master >= 0;
  pid_t program = sp.pid;
  sigset_t set;
  supervised_signals(&set);
  for (;;) {
    siginfo_t si;
    long sig = end_requested(&si) ? kEndSandboxSignal : raw::sigtimedwait(&set, &si);
    if (sig < 0) continue;
    if (sig == kEndSandboxSignal) {
      if (from_supervisor(si)) report_and_exit(end, reap_everything_else(program, SIGKILL));
      continue;  // the program's own sending it is ignored
    }
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
      if (p == program) report_and_exit(end, reap_everything_else(program, ws));
      // Orphans exiting without end: the supervisor's request is not held back by them.
      if (end_requested(&si) && from_supervisor(si)) report_and_exit(end, reap_everything_else(program, SIGKILL));
    }
  }
}

void end_sandbox_and_report(const InitEnd& end, pid_t program, int program_ws) {
  report_and_exit(end, reap_everything_else(program, program_ws));
}

bool wait_for_shared_init(int msg_fd, int pidfd, std::optional<std::int64_t> timeout_ms) {
  struct pollfd p[2] = {{msg_fd, POLLIN, 0}, {pidfd, POLLIN, 0}};
  struct timespec ts;
  struct timespec* tp = nullptr;
  if (timeout_ms) {
    ts.tv_sec = *timeout_ms / 1000;
    ts.tv_nsec = (*timeout_ms % 1000) * 1'000'000;
    tp = &ts;
  }
  long n;
  do n = raw::ppoll(p, 2, tp);  // ppoll writes the time left back into ts
  while (n == -EINTR);
  if (n != 0) return false;
  raw::pidfd_send_signal(pidfd, SIGKILL);
  struct pollfd gone = {pidfd, POLLIN, 0};
  while (raw::ppoll(&gone, 1, nullptr) == -EINTR) {}
  return true;
}

}  // namespace sbx
