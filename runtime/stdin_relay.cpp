#include "runtime/stdin_relay.hpp"

#include <fcntl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>

#include "runtime/fdpass.hpp"

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

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

Result<StdinPlan> plan_stdin(bool interactive, bool tty, int fd) {
  StdinPlan plan;
  plan.source = describe_fd(fd);
  bool empty = plan.source == "null" || plan.source == "closed";
  if (tty) {
    if (plan.source != "terminal") {
      std::string is = plan.source == "closed" ? "closed" : plan.source == "null" ? "/dev/null" : "a " + plan.source;
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

// ---- CallerSource ----

CallerSource::~CallerSource() { close(); }

Status CallerSource::open(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return sys_error("stdin", "fstat stdin");
  if (S_ISSOCK(st.st_mode)) {  // recv(MSG_DONTWAIT) does not wait, whatever the socket's flags
    fd_ = fd;
    socket_ = true;
    return {};
  }
  if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) {  // reading a file never waits for another party
    fd_ = fd;
    return {};
  }
  // A pipe, terminal or device: O_NONBLOCK belongs to the open file description, which the
  // caller's shell shares, so it is set on a description of our own. Reopening through
  // /proc/self/fd makes one (a pipe's as well: fifo_open); O_NOCTTY so that a terminal never
  // becomes sbx's controlling one.
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  int own = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (own >= 0) {
    fd_ = own;
    owned_ = true;
    return {};
  }
  // No /proc, or the pipe belongs to another user: the caller's description it is, with its
  // flags put back by close() on every way out of the run.
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return sys_error("stdin", "make stdin non-blocking");
  fd_ = fd;
  restore_flags_ = flags;
  return {};
}

ssize_t CallerSource::read(char* buf, std::size_t len) {
  if (socket_) return ::recv(fd_, buf, len, MSG_DONTWAIT);
  return ::read(fd_, buf, len);
}

void CallerSource::close() {
  if (fd_ < 0) return;
  if (owned_) ::close(fd_);
  if (restore_flags_ >= 0) ::fcntl(fd_, F_SETFL, restore_flags_);
  fd_ = -1;
  owned_ = socket_ = false;
  restore_flags_ = -1;
}

// ---- CallerStdin ----

CallerStdin::~CallerStdin() {
  end_session();
  close_sink();
  close_child_ends();
  close_fd(sock_);
  close_fd(output_fd_);
}

Status CallerStdin::prepare() {
  int fds[2];
  if (plan_.mode == StdinMode::pipe) {
    if (::pipe2(fds, O_CLOEXEC) != 0) return sys_error("stdin", "pipe for the program's stdin");
    child_in_ = fds[0];
    sink_ = fds[1];
    ::fcntl(sink_, F_SETFL, O_NONBLOCK);
  } else if (plan_.mode == StdinMode::pty) {
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
      return sys_error("tty", "socketpair for the pty handoff");
    sock_ = fds[0];
    child_sock_ = fds[1];
    size_ = window_size(STDIN_FILENO);
  }
  return {};
}

void CallerStdin::close_child_ends() {
  close_fd(child_in_);
  close_fd(child_sock_);
}

Status CallerStdin::begin_session() {
  if (plan_.relay) {
    SBX_TRY(src_.open(STDIN_FILENO));
    src_open_ = true;
    buf_.resize(kBufferBytes);
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
  winch_fd_ = ::signalfd(-1, &winch, SFD_CLOEXEC | SFD_NONBLOCK);
  if (winch_fd_ < 0) return sys_error("tty", "signalfd for SIGWINCH");
  return {};
}

void CallerStdin::end_session() {
  raw_.restore();
  src_.close();
  src_open_ = false;
  close_fd(winch_fd_);
  if (mask_changed_ && !sigismember(&old_mask_, SIGWINCH)) {
    sigset_t winch;
    sigemptyset(&winch);
    sigaddset(&winch, SIGWINCH);
    ::sigprocmask(SIG_UNBLOCK, &winch, nullptr);  // a pending SIGWINCH is ignored by default
  }
  mask_changed_ = false;
}

void CallerStdin::add_pollfds(std::vector<struct pollfd>& p, bool program_running) {
  roles_.clear();
  auto add = [&](int fd, short events, Role role) {
    p.push_back({fd, events, 0});
    roles_.push_back(role);
  };
  if (sock_ >= 0) add(sock_, POLLIN, kHandoff);
  if (!program_running) return;
  bool pending = head_ < tail_;
  if (src_open_ && !src_eof_ && sink_ >= 0 && tail_ < buf_.size()) add(src_.poll_fd(), POLLIN, kSource);
  // A pipe's write end is watched even with nothing to write: POLLERR says the program closed
  // its stdin. A pty master is watched only to write, since it reports POLLHUP for as long as
  // the slave is closed.
  if (sink_ >= 0 && (pending || plan_.mode == StdinMode::pipe)) add(sink_, pending ? POLLOUT : 0, kSink);
  if (winch_fd_ >= 0) add(winch_fd_, POLLIN, kWinch);
}

void CallerStdin::on_events(const struct pollfd* p, std::size_t n) {
  for (std::size_t i = 0; i < n && i < roles_.size(); ++i) {
    short rev = p[i].revents;
    if (!rev) continue;
    switch (roles_[i]) {
      case kHandoff: receive_master(); break;
      case kSource: read_source(); break;
      case kSink: flush_sink(rev); break;
      case kWinch: forward_window_size(); break;
    }
  }
}

void CallerStdin::read_source() {
  if (head_ > 0 && tail_ == buf_.size()) {  // room only at the front: move the rest there
    std::memmove(buf_.data(), buf_.data() + head_, tail_ - head_);
    tail_ -= head_;
    head_ = 0;
  }
  ssize_t n = src_.read(buf_.data() + tail_, buf_.size() - tail_);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n > 0) {
    tail_ += static_cast<std::size_t>(n);
    read_bytes_ += static_cast<std::uint64_t>(n);
  } else {
    src_eof_ = true;  // EOF, or an error such as EIO from a terminal that hung up
    src_.close();
  }
  flush_sink(POLLOUT);
}

void CallerStdin::flush_sink(short revents) {
  if (sink_ < 0) return;
  bool gone = plan_.mode == StdinMode::pipe ? (revents & POLLERR) : (revents & (POLLERR | POLLHUP)) && head_ < tail_;
  while (!gone && head_ < tail_) {
    ssize_t w = ::write(sink_, buf_.data() + head_, tail_ - head_);
    if (w > 0) {
      head_ += static_cast<std::size_t>(w);
      delivered_bytes_ += static_cast<std::uint64_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else {
      gone = w < 0 && errno != EAGAIN;  // EPIPE (SIGPIPE is ignored) or EIO: nobody reads any more
      break;
    }
  }
  if (head_ == tail_) head_ = tail_ = 0;
  if (gone) {
    closed_by_program_ = true;
    src_.close();  // the program will not read: neither does sbx
    src_open_ = false;
    close_sink();
  } else if (src_eof_ && head_ == tail_ && plan_.mode == StdinMode::pipe) {
    close_sink();  // the caller's EOF, passed on
  }
}

void CallerStdin::receive_master() {
  int fd = -1;
  ssize_t k = recv_fd(sock_, &fd);
  if (k < 0 && (errno == EAGAIN || errno == EINTR)) return;
  close_fd(sock_);  // one message, or EOF: init failed before the pty existed, and says why
  if (k <= 0 || fd < 0) return;
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);  // shared with the duplicate: the pump reads it non-blocking too
  sink_ = fd;
  output_fd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  forward_window_size();  // the terminal may have been resized since prepare()
}

void CallerStdin::forward_window_size() {
  if (winch_fd_ >= 0) {
    struct signalfd_siginfo si;
    while (::read(winch_fd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    }
  }
  if (sink_ < 0 || plan_.mode != StdinMode::pty) return;
  struct winsize ws = window_size(STDIN_FILENO);
  if (ws.ws_row == size_.ws_row && ws.ws_col == size_.ws_col) return;
  // The pty sends SIGWINCH to its foreground process group itself.
  if (::ioctl(sink_, TIOCSWINSZ, &ws) == 0) {
    size_ = ws;
    ++window_changes_;
  }
}

int CallerStdin::take_output_fd() {
  int fd = output_fd_;
  output_fd_ = -1;
  return fd;
}

void CallerStdin::close_sink() {
  close_fd(sink_);
}

nlohmann::json CallerStdin::to_json() const {
  nlohmann::json j = {{"mode", mode_name(plan_.mode)}, {"source", plan_.source}, {"relayed", plan_.relay}};
  if (plan_.relay) {
    j["bytes"] = delivered_bytes_;
    j["read_bytes"] = read_bytes_;
    j["undelivered_bytes"] = read_bytes_ - delivered_bytes_;  // read from the caller, never taken by the program
    j["eof"] = src_eof_;
    j["closed_by_program"] = closed_by_program_;
  }
  if (plan_.mode == StdinMode::pty)
    j["tty"] = {{"rows", size_.ws_row}, {"cols", size_.ws_col}, {"resizes", window_changes_}, {"stderr", "merged into stdout"}};
  return j;
}

}  // namespace sbx
