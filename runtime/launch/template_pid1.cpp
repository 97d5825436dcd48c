// Pid 1 of a template's call forked ahead of it, once exec'd (template_pid1.hpp). The steps and
// their order are those of warm_template.py's Python pid 1 for a call made at once (_call_pid1,
// _reap, _finish) and of a cold pooled init (child.cpp): one definition of the job's bounds and
// of how its files are written (pool_job.cpp), one of the report (handshake.hpp).
#include "runtime/launch/template_pid1.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/base/fdpass.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/signals.hpp"
#include "runtime/launch/handshake.hpp"
#include "runtime/launch/pool_job.hpp"
#include "runtime/model/caps.hpp"

namespace sbx {

namespace {

struct Pid1Args {
  int report = -1, sync = -1, gate = -1, ready = -1;
  pid_t program = -1;
  std::vector<int> held;  // forwarded signals taken before the program existed
};

std::optional<long> number(const char* s) {
  long v = 0;
  std::string_view t(s);
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size() || v < 0) return std::nullopt;
  return v;
}

std::optional<Pid1Args> parse(int argc, char** argv) {
  if (argc < 7 || argc > 7 + 64) return std::nullopt;  // the Python pid 1 holds at most 64
  std::vector<long> n;
  for (int i = 2; i < argc; ++i) {
    auto v = number(argv[i]);
    if (!v || *v > INT32_MAX) return std::nullopt;
    n.push_back(*v);
  }
  Pid1Args a;
  a.report = static_cast<int>(n[0]), a.sync = static_cast<int>(n[1]), a.gate = static_cast<int>(n[2]);
  a.ready = static_cast<int>(n[3]), a.program = static_cast<pid_t>(n[4]);
  sigset_t forwarded;
  forwarded_signals(&forwarded);
  for (std::size_t i = 5; i < n.size(); ++i) {
    if (n[i] < 1 || n[i] >= NSIG || sigismember(&forwarded, static_cast<int>(n[i])) != 1) return std::nullopt;
    a.held.push_back(static_cast<int>(n[i]));
  }
  return a;
}

// What pid 1 waits on in sigwaitinfo: SIGCHLD, the worker's end signal and the forwarded ones,
// blocked since before the program's fork (warm_template.py, _REAPED).
sigset_t reaped_signals() {
  sigset_t set;
  forwarded_signals(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, kEndSandboxSignal);
  return set;
}

bool read_exact(int fd, void* buf, std::size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r, n -= static_cast<std::size_t>(r);
  }
  return true;
}

// Until the call's "s" (_await_call): a program that dies meanwhile is a setup error of the fork,
// said at once, so that its worker discards it rather than hand it a call.
void await_call(const InitEnd& end, pid_t program) {
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, program, 0));
  if (pidfd < 0) end.report_setup_error("pool", errno, "watch the program forked ahead of the call");
  struct pollfd p[2] = {{end.sync_fd(), POLLIN, 0}, {pidfd, POLLIN, 0}};
  for (;;) {
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      end.report_setup_error("pool", errno, "wait for the call");
    }
    if (p[1].revents)
      end.report_setup_error("pool", ESRCH, "the program forked ahead of the call ended before its call");
    if (p[0].revents) break;
  }
  ::close(pidfd);
  char s = 0;
  if (!read_exact(end.sync_fd(), &s, 1) || s != 's') ::_exit(125);  // discarded: the worker closed its end
}

// The call's argv to the program waiting on the gate (NUL-terminated words), then the gate closed.
void release(const InitEnd& end, int gate, const std::vector<std::string>& argv) {
  std::string data;
  for (auto& a : argv) data.append(a).push_back('\0');
  if (!write_all(gate, data, "the call's argv"))
    end.report_setup_error("pool", ESRCH, "the program forked ahead of the call ended before its call");
  ::close(gate);
}

// A failed step of the call's start: said to its worker, then pid 1 exits 125.
[[noreturn]] void report_failure(const InitEnd& end, const Error& e) {
  end.report_setup_error(e.stage, e.err, e.message.c_str());
}

// close_range(2) around the two fds kept (_close_all_but).
void close_all_but(int a, int b) {
  if (a > b) std::swap(a, b);
  if (a > 0) ::syscall(SYS_close_range, 0, a - 1, 0);
  if (b > a + 1) ::syscall(SYS_close_range, a + 1, b - 1, 0);
  ::syscall(SYS_close_range, b + 1, ~0U, 0);
}

// The two capabilities pid 1 held for the call's files (the rest of its bounding set went before
// the exec, and the ambient set at its start): out of the bounding set, CAP_SETPCAP last since
// the drop needs it, then every set empty. Not caps.hpp's restrict_capabilities, whose drop and
// check of every capability (~160 system calls, each through the template's filter) were a tenth
// of the call's start here.
Status drop_held_capabilities() {
  for (int cap : {CAP_SYS_ADMIN, CAP_SETPCAP})
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0)
      return sys_error("capabilities", "drop " + capability_name(cap) + " from the bounding set");
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct none[2] = {};
  if (::syscall(SYS_capset, &hdr, none) != 0) return sys_error("capabilities", "capset");
  return {};
}

void forward(pid_t program, int sig) {
  if (::kill(-program, sig) != 0) ::kill(program, sig);
}

// The worker's end (_end_requested): its byte on the sync pipe, written before its signal, or
// the pipe hung up. Not the signal itself: pid 1 shares the call's uid, so the call can queue the
// end signal too, and fill pid 1's queue so that the worker's could not be queued at all.
bool end_requested(int sync) {
  struct pollfd p = {sync, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

// Reaps every orphan until the program ends (_reap), looking for the worker's end after each
// signal and each orphan reaped; forwarded signals from outside (si_pid 0) go to the program's
// group, as a cold init's do.
[[noreturn]] void reap(const InitEnd& end, const Pid1Args& a) {
  for (int sig : a.held) forward(a.program, sig);
  const sigset_t set = reaped_signals();
  for (;;) {
    for (;;) {
      if (end_requested(a.sync)) end_sandbox_and_report(end, a.program, SIGKILL);
      int ws = 0;
      pid_t p = ::waitpid(-1, &ws, WNOHANG | __WALL);
      if (p < 0 && errno == EINTR) continue;
      if (p < 0) ::_exit(1);  // no program to reap: never (it is our child)
      if (p == 0) break;
      if (p == a.program) end_sandbox_and_report(end, a.program, ws);
    }
    siginfo_t si{};
    int sig = ::sigwaitinfo(&set, &si);
    if (sig > 0 && sig != SIGCHLD && sig != kEndSandboxSignal && si.si_pid == 0) forward(a.program, sig);
  }
}

// The binary a fork's pid 1 runs: sbx itself, or SBX_TEMPLATE_PID1, another build of the same sbx.
// That is for a sanitizer build (tests/sanitize.sh), which cannot start inside a sandbox whose
// memory limit is an RLIMIT_DATA (its shadow mapping is refused), as SBX_SESSION_AGENT is for a
// session's agent: the worker and the template are tested with the sanitizers, pid 1 as it ships.
// `path` is where to find it; `want` its identity (the file sbx checks the copy is of).
struct Pid1Binary {
  std::string path;
  struct stat want {};
  bool chosen = false;  // SBX_TEMPLATE_PID1's: opened by its path in our namespace too
};

Result<Pid1Binary> pid1_binary() {
  Pid1Binary b;
  const char* env = std::getenv("SBX_TEMPLATE_PID1");
  if (env && *env) {
    if (env[0] != '/' || ::stat(env, &b.want) != 0 || !S_ISREG(b.want.st_mode) || ::access(env, X_OK) != 0)
      return make_error("usage",
                        std::string("SBX_TEMPLATE_PID1=") + env + ": not an absolute path of an executable file");
    b.path = env;
    b.chosen = true;
    return b;
  }
  // /proc/self/exe's own link names the file on the mount of the namespace sbx started in, which
  // open_tree can clone only from there; in a mount namespace of our own (rootless, below) the
  // file is found by its name, and checked to be the same.
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0 || ::stat("/proc/self/exe", &b.want) != 0) return sys_error("template", "find sbx's own binary");
  b.path.assign(exe, static_cast<std::size_t>(n));
  return b;
}

// A bind of that file alone, detached and read-only (template_pid1_binary).
Result<UniqueFd> read_only_bind_of(const Pid1Binary& b, const char* path) {
  UniqueFd tree(static_cast<int>(::open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)));
  if (!tree.ok()) return sys_error("template", "open_tree of " + b.path + " (a read-only copy of sbx for a template)");
  struct stat copy {};
  if (::fstat(tree.get(), &copy) != 0 || copy.st_dev != b.want.st_dev || copy.st_ino != b.want.st_ino)
    return make_error("template", "the file at " + b.path + " is not the sbx chosen (replaced?)", ESTALE);
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (::mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
    return sys_error("template", "make the copy of sbx for a template read-only");
  return tree;
}

// Without CAP_SYS_ADMIN over our own mount namespace: a child makes the bind in a user and mount
// namespace of its own, where it has it, and hands it back.
Result<UniqueFd> read_only_bind_in_child(const Pid1Binary& b) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return sys_error("template", "socketpair");
  UniqueFd mine(sv[0]), theirs(sv[1]);
  pid_t pid = ::fork();
  if (pid < 0) return sys_error("template", "fork for a read-only copy of sbx");
  if (pid == 0) {
    mine.reset();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) ::_exit(1);
    auto tree = read_only_bind_of(b, b.path.c_str());
    if (!tree || !send_fd(theirs.get(), tree->get(), 'X', "template", "hand back the copy of sbx")) ::_exit(1);
    ::_exit(0);
  }
  theirs.reset();
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  int fd = -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || recv_fd(mine.get(), &fd) <= 0 || fd < 0)
    return make_error("template",
                      "could not make a read-only copy of sbx in a user namespace of its own for a template's forks",
                      EPERM);
  return UniqueFd(fd);
}

}  // namespace

Result<int> template_pid1_binary() {
  // Kept for the process's life: every call of a worker hands it on. Its number is believed only
  // while it still names the copy made (an O_PATH fd of the same file on a read-only mount): a
  // worker that closed it and opened something else under that number must never hand the
  // template that instead.
  static int made = -1;
  static struct stat was {};
  struct stat now {};
  struct statvfs mount {};
  if (made >= 0 && ::fstat(made, &now) == 0 && now.st_dev == was.st_dev && now.st_ino == was.st_ino &&
      (::fcntl(made, F_GETFL) & O_PATH) && ::fstatvfs(made, &mount) == 0 && (mount.f_flag & ST_RDONLY))
    return made;
  made = -1;
  auto binary = pid1_binary();
  if (!binary) return binary.error();
  auto fd = read_only_bind_of(*binary, binary->chosen ? binary->path.c_str() : "/proc/self/exe");
  if (!fd && fd.error().err == EPERM) fd = read_only_bind_in_child(*binary);
  if (!fd) return fd.error();
  if (::fstat(fd->get(), &was) != 0) return sys_error("template", "fstat the read-only copy of sbx");
  made = fd->release();
  return made;
}

void template_pid1_main(int argc, char** argv) {
  auto args = parse(argc, argv);
  if (!args) {  // only warm_template.py runs this, with what it was given
    std::fputs("sbx: template-pid1 is a template call's pid 1 (run by sbx mcp's templates), not a command\n", stderr);
    ::_exit(125);
  }
  // Only as pid 1 of a call's pid namespace: its end kills every process it can see (finish).
  if (::getpid() != 1) {
    std::fputs("sbx: template-pid1 runs only as pid 1 of a template call's pid namespace\n", stderr);
    ::_exit(125);
  }
  const Pid1Args& a = *args;
  // Nothing of the call runs yet (its program waits on the gate), but /proc/1 turns root's again
  // first, as the exec made it dumpable: no process of the call may trace pid 1 or read its
  // memory (_call_pid1). The parent-death signal is said again after the exec.
  ::prctl(PR_SET_DUMPABLE, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::prctl(PR_SET_NAME, "sbx");
  const sigset_t set = reaped_signals();
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a program gone before its argv is a report, not pid 1's death
  InitFds fds;
  fds.msg = a.report;
  fds.sync = a.sync;
  InitEnd end(fds);
  // The capabilities came across the exec as the ambient set; the call's program gets none.
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  // "r" and the program's five capability sets, which kStarted reports; anything else: the
  // program reported why it could not get ready (or died), and its worker reads that.
  unsigned char ready[41];
  if (!read_exact(a.ready, ready, sizeof ready) || ready[0] != 'r') ::_exit(125);
  ::close(a.ready);
  std::uint64_t sets[5];
  std::memcpy(sets, ready + 1, sizeof sets);  // little-endian u64s (struct "<5Q"), as this host's
  end.report_warm_ready("");
  await_call(end, a.program);
  auto job = read_pool_job(a.sync);
  if (!job) report_failure(end, job.error());
  if (auto st = write_pool_files(*job); !st) report_failure(end, st.error());
  if (auto st = drop_held_capabilities(); !st) report_failure(end, st.error());
  end.report_started(sets, 0);
  release(end, a.gate, job->argv);
  // Nothing but the two pipes: the call's output ends when the call's processes close theirs.
  close_all_but(a.report, a.sync);
  reap(end, a);
}

}  // namespace sbx
