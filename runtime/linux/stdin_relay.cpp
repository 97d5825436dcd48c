#include "runtime/linux/stdin_relay.hpp"

#include <fcntl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "runtime/base/fdpass.hpp"
#include "runtime/base/trace_field.hpp"

namespace sbx {
namespace {

std::string describe_fd(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return "closed";
  if (::isatty(fd) == 1) return "terminal";
  if (S_ISFIFO(st.st_mode)) return "pipe";
  if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) return "file";
  if (S_ISSOCK(st.st_mode)) return "socket";
  if (S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 && minor(st.st_rdev) == 3) return "null";
  // No file type: an anonymous inode (epoll, eventfd, signalfd, timerfd, inotify, fanotify,
  // userfaultfd; a pidfd too, except where pidfs made it S_IFREG, ~6.9-6.14: a "file" there). None is
  // a stream of input: an epoll fd never polls readable, so a relay of it waited for the wall
  // limit, and an eventfd's or signalfd's reads are counters and records, not bytes for a program.
  if ((st.st_mode & S_IFMT) == 0) return "anonymous inode";
  return "device";
}

const char* mode_name(StdinMode m) {
  switch (m) {
    case StdinMode::pipe: return "pipe";
    case StdinMode::pty: return "pty";
    case StdinMode::null: break;
  }
  return "null";
}

}  // namespace

Result<StdinPlan> plan_stdin(bool interactive, bool tty, int fd) {
  StdinPlan plan;
  plan.source = describe_fd(fd);
  bool empty = plan.source == "null" || plan.source == "closed" || plan.source == "anonymous inode";
  if (tty) {
    if (plan.source != "terminal") {
      std::string is = plan.source == "closed"            ? "closed"
                       : plan.source == "null"            ? "/dev/null"
                       : plan.source == "anonymous inode" ? "an anonymous inode"
                                                          : "a " + plan.source;
      return make_error("usage", "-t/--tty needs a terminal on stdin (stdin is " + is + ")");
    }
    plan.mode = StdinMode::pty;
    plan.relay = interactive;
  } else if (!empty && (interactive || plan.source != "terminal")) {
    plan.mode = StdinMode::pipe;
    plan.relay = true;
  }
  return plan;
}

std::string terminal_unused_hint(const std::vector<std::string>& argv, const StdinPlan& plan) {
  if (plan.source != "terminal" || plan.relay || plan.mode == StdinMode::pty || argv.empty()) return "";
  static const char* const kInteractive[] = {"bash", "sh",  "zsh",    "fish",    "dash", "ksh", "mksh", "ash",
                                             "tcsh", "csh", "python", "python3", "node", "irb", "lua",  "sqlite3"};
  auto slash = argv[0].rfind('/');
  std::string name = slash == std::string::npos ? argv[0] : argv[0].substr(slash + 1);
  bool known = false;
  for (const char* k : kInteractive) known = known || name == k;
  // Options only (bash -l, python3 -q): still a session that reads its commands from stdin.
  for (std::size_t i = 1; i < argv.size() && known; ++i)
    known = !argv[i].empty() && argv[i][0] == '-' && argv[i] != "-c";
  if (!known) return "";
  return "stdin is a terminal, which sbx gives the program only with -i (and a terminal of its own with -t): " + name +
         " reads an empty stdin and exits; for an interactive session run 'sbx run -it -- " + name + "'";
}

// ---- CallerSource ----

Result<int> CallerSource::open(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return sys_error("stdin", "fstat stdin");
  // A socket is read with recv(MSG_DONTWAIT), which does not wait whatever its flags; reading a
  // file never waits for another party. Both are read through a duplicate (same description).
  if (S_ISSOCK(st.st_mode) || S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) {
    int d = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (d < 0) return sys_error("stdin", "dup stdin");
    return d;
  }
  // A pipe, terminal or device: O_NONBLOCK belongs to the open file description, which the
  // caller's shell shares, so it is set on a description of our own (reopen_private: a pipe's
  // as well, fifo_open; O_NOCTTY, so that a terminal never becomes sbx's controlling one).
  int own = reopen_private(fd, O_RDONLY | O_NONBLOCK);
  if (own >= 0) return own;
  // No /proc, or the pipe belongs to another user: the caller's description it is, with its
  // flags put back by restore() on every way out of the run.
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return sys_error("stdin", "make stdin non-blocking");
  fd_ = fd;
  restore_flags_ = flags;
  int d = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (d < 0) return sys_error("stdin", "dup stdin");
  return d;
}

void CallerSource::restore() {
  if (fd_ >= 0 && restore_flags_ >= 0) ::fcntl(fd_, F_SETFL, restore_flags_);
  fd_ = restore_flags_ = -1;
}

// ---- CallerStdin ----

CallerStdin::~CallerStdin() {
  end_session();
  close_child_ends();
}

Status CallerStdin::prepare() {
  int fds[2];
  if (plan_.mode == StdinMode::pipe) {
    if (::pipe2(fds, O_CLOEXEC) != 0) return sys_error("stdin", "pipe for the program's stdin");
    child_in_.reset(fds[0]);
    pipe_w_.reset(fds[1]);
  } else if (plan_.mode == StdinMode::pty) {
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
      return sys_error("tty", "socketpair for the pty handoff");
    sock_.reset(fds[0]);
    child_sock_.reset(fds[1]);
    size_ = window_size(STDIN_FILENO);
  }
  return {};
}

void CallerStdin::close_child_ends() {
  child_in_.reset();
  child_sock_.reset();
}

Status CallerStdin::begin_session() {
  if (plan_.relay) {
    auto fd = caller_.open(STDIN_FILENO);
    if (!fd) return fd.error();
    src_.reset(*fd);
    // No output limit toward the program: the caller chose what to send. What is left in the
    // caller's stdin when the program closes its own is the caller's, never counted as lost.
    if (plan_.mode == StdinMode::pipe) {
      relay_.emplace(src_.release(), OutputSink::owned_nonblocking(pipe_w_.release()), std::nullopt,
                     OutputRelay::Unread::not_taken);
    }
  }
  if (plan_.mode != StdinMode::pty) return {};
  if (plan_.relay) SBX_TRY(raw_.enter(STDIN_FILENO));
  // SIGWINCH through a signalfd of our own (the forwarded signals have theirs, sandbox.cpp): it
  // is blocked only if it was not already, and unblocked again by end_session().
  sigset_t winch;
  sigemptyset(&winch);
  sigaddset(&winch, SIGWINCH);
  ::sigprocmask(SIG_BLOCK, &winch, &old_mask_);
  mask_changed_ = true;
  winch_fd_.reset(::signalfd(-1, &winch, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!winch_fd_.ok()) return sys_error("tty", "signalfd for SIGWINCH");
  return {};
}

void CallerStdin::end_session() {
  raw_.restore();
  if (relay_ && !stats_) stats_ = relay_->finish();  // closes the caller's stdin and the program's end
  relay_.reset();
  src_.reset();
  caller_.restore();
  winch_fd_.reset();
  if (mask_changed_ && !sigismember(&old_mask_, SIGWINCH)) {
    sigset_t winch;
    sigemptyset(&winch);
    sigaddset(&winch, SIGWINCH);
    ::sigprocmask(SIG_UNBLOCK, &winch, nullptr);  // a pending SIGWINCH is ignored by default
  }
  mask_changed_ = false;
}

// A pipe's write end is watched even with nothing to write: POLLERR says the program closed its
// stdin. A pty master only while bytes wait, since it reports POLLHUP for as long as the slave
// is closed (the program has ended; init's report follows).
int CallerStdin::relay_sink_poll_fd() const {
  if (!relay_) return -1;
  if (plan_.mode == StdinMode::pty && !relay_->pending()) return -1;
  return relay_->sink_poll_fd();
}

int CallerStdin::on_handoff_ready() {
  int fd = -1;
  ssize_t k = recv_fd(sock_.get(), &fd);
  if (k < 0 && (errno == EAGAIN || errno == EINTR)) return -1;
  sock_.reset();  // one message, or EOF: init failed before the pty existed, and says why
  if (k <= 0 || fd < 0) return -1;
  master_.reset(fd);
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);  // shared by the duplicates: both relays use it non-blocking
  if (src_.ok()) {
    int sink = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (sink >= 0)
      relay_.emplace(src_.release(), OutputSink::owned_nonblocking(sink), std::nullopt, OutputRelay::Unread::not_taken);
  }
  forward_window_size();  // the terminal may have been resized since prepare()
  return ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
}

void CallerStdin::abandon_handoff() { sock_.reset(); }

void CallerStdin::hang_up() {
  if (!master_.ok()) return;
  if (relay_ && !stats_) stats_ = relay_->finish();
  relay_.reset();
  master_.reset();
}

void CallerStdin::on_winch() {
  struct signalfd_siginfo si;
  while (::read(winch_fd_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {}
  forward_window_size();
}

void CallerStdin::forward_window_size() {
  if (!master_.ok()) return;
  struct winsize ws = window_size(STDIN_FILENO);
  if (ws.ws_row == size_.ws_row && ws.ws_col == size_.ws_col) return;
  // The pty sends SIGWINCH to its foreground process group itself.
  if (::ioctl(master_.get(), TIOCSWINSZ, &ws) == 0) {
    size_ = ws;
    ++window_changes_;
  }
}

nlohmann::json CallerStdin::to_json() const {
  nlohmann::json j = trace_object(
      {{"stdin/mode", mode_name(plan_.mode)}, {"stdin/source", plan_.source}, {"stdin/relayed", plan_.relay}});
  if (plan_.relay) {
    StreamStats s = stats_.value_or(StreamStats{});
    put(j, "stdin/bytes", s.bytes);
    put(j, "stdin/read_bytes", s.bytes + s.undelivered_bytes);
    put(j, "stdin/undelivered_bytes", s.undelivered_bytes);  // read from the caller, never taken by the program
    put(j, "stdin/eof", s.source_eof);
    put(j, "stdin/closed_by_program", s.reader_closed);
  }
  if (plan_.mode == StdinMode::pty)
    put(j, "stdin/tty",
        trace_object({{"stdin/tty/rows", size_.ws_row},
                      {"stdin/tty/cols", size_.ws_col},
                      {"stdin/tty/resizes", window_changes_},
                      {"stdin/tty/stderr", "merged into stdout"}}));
  return j;
}

}  // namespace sbx
