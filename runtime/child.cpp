#include "runtime/child.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "runtime/caps.hpp"
#include "runtime/net.hpp"

namespace sbx {
namespace {

void send_msg(int fd, const ChildMsg& m) {
  ssize_t n;
  do n = ::write(fd, &m, sizeof m);
  while (n < 0 && errno == EINTR);
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

Status set_rlimits(const std::vector<std::pair<int, rlim_t>>& limits) {
  for (auto& [res, value] : limits) {
    struct rlimit rl = {value, value};
    if (::setrlimit(res, &rl) != 0) return sys_error("rlimits", "setrlimit(" + std::to_string(res) + ")");
  }
  return {};
}

// execvpe() would search the *supervisor's* PATH; the program's PATH is the one in its envp.
[[noreturn]] void exec_program(const ChildConfig& cfg, char* const* argv, char* const* envp) {
  const std::string& cmd = cfg.argv[0];
  int err = ENOENT;
  if (cmd.find('/') != std::string::npos) {
    ::execve(cmd.c_str(), argv, envp);
    err = errno;
  } else {
    std::string path = "/usr/local/bin:/usr/bin:/bin";
    for (auto& e : cfg.envp)
      if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
    bool eacces = false;
    std::size_t start = 0;
    for (;;) {
      auto pos = path.find(':', start);
      std::string dir = path.substr(start, pos == std::string::npos ? std::string::npos : pos - start);
      std::string full = (dir.empty() ? "." : dir) + "/" + cmd;
      ::execve(full.c_str(), argv, envp);
      if (errno == EACCES) eacces = true;
      else if (errno != ENOENT && errno != ENOTDIR) { err = errno; break; }
      if (pos == std::string::npos) { err = eacces ? EACCES : ENOENT; break; }
      start = pos + 1;
    }
  }
  fail(cfg, Error{"execve", err, "execute '" + cmd + "'"});
}

[[noreturn]] void run_program(const ChildConfig& cfg) {
  // Default dispositions and an empty mask: sbx ignores SIGPIPE and blocks the signals it
  // forwards, and both would otherwise be inherited across execve.
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Own session, no controlling terminal: TIOCSTI on an inherited terminal fd then fails with
  // EPERM, so the program cannot push input into the user's shell (CVE-2017-5226).
  if (::setsid() < 0) fail(cfg, sys_error("session", "setsid"));
  if (::dup2(cfg.out_fd, 1) < 0 || ::dup2(cfg.err_fd, 2) < 0) fail(cfg, sys_error("stdio", "dup2"));
  STAGE(cfg, set_rlimits(cfg.rlimits));
  STAGE(cfg, lock_securebits());
  STAGE(cfg, switch_to_program_identity(cfg.identity));
  STAGE(cfg, drop_all_capabilities());
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(cfg, sys_error("no_new_privs", "prctl"));
  if (::chdir(cfg.mounts.workdir.c_str()) != 0)
    fail(cfg, sys_error("workdir", "chdir to " + cfg.mounts.workdir));
  // Only 0, 1, 2 reach the program; the message pipe stays open until execve succeeds.
  ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  std::vector<char*> argv, envp;
  for (auto& a : cfg.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : cfg.envp) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  exec_program(cfg, argv.data(), envp.data());
}

// Init's loop: reap everything, forward the supervisor's signals to the program, report the
// program's status when it ends.
[[noreturn]] void supervise_program(const ChildConfig& cfg, pid_t program) {
  sigset_t set;
  supervised_signals(&set);
  for (;;) {
    siginfo_t si;
    int sig = ::sigwaitinfo(&set, &si);
    if (sig < 0) continue;
    if (sig != SIGCHLD) {
      ::kill(program, sig);
      continue;
    }
    int ws;
    pid_t p;
    while ((p = ::waitpid(-1, &ws, WNOHANG)) > 0) {
      if (p != program) continue;
      ChildMsg m;
      m.kind = ChildMsg::kProgramStatus;
      m.wait_status = ws;
      send_msg(cfg.msg_fd, m);
      ::_exit(0);  // the kernel now kills whatever else is left in the pid namespace
    }
  }
}

}  // namespace

void supervised_signals(sigset_t* set) {
  sigemptyset(set);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(set, s);
}

void run_init(const ChildConfig& cfg) {
  // If sbx dies, so does the sandbox: init gets SIGKILL, and with pid 1 gone the kernel kills the
  // rest of the pid namespace.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  close_all_except({0, 1, 2, cfg.sync_fd, cfg.msg_fd, cfg.out_fd, cfg.err_fd});
  char go;
  if (::read(cfg.sync_fd, &go, 1) != 1) ::_exit(125);  // supervisor gone before the maps were written
  STAGE(cfg, become_namespace_root(cfg.identity));
  // Changing credentials clears the parent-death signal: set it again, then make sure the
  // supervisor did not die in between (its end of the sync pipe would have hung up).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  struct pollfd pfd = {cfg.sync_fd, POLLIN, 0};
  if (::poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLHUP)) ::_exit(125);
  STAGE(cfg, build_root(cfg.mounts));
  if (::sethostname(cfg.hostname.c_str(), cfg.hostname.size()) != 0)
    fail(cfg, sys_error("hostname", "sethostname"));
  STAGE(cfg, bring_up_loopback());
  // Init keeps its capabilities (the program has none, so it cannot ptrace init) and is not
  // dumpable, so the program cannot read init's memory through /proc either.
  ::prctl(PR_SET_DUMPABLE, 0);
  pid_t program = ::fork();
  if (program < 0) fail(cfg, sys_error("fork", "fork the program"));
  if (program == 0) run_program(cfg);
  ::close(cfg.out_fd);
  ::close(cfg.err_fd);
  supervise_program(cfg, program);
}

}  // namespace sbx
