// The supervisor's half of the handshake with init (handshake.hpp). Init's half is init_end.cpp.
#include "runtime/launch/handshake.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/base/fdpass.hpp"
#include "runtime/base/log.hpp"
#include "runtime/base/raw_syscall.hpp"

namespace sbx {

namespace {

Status open_pipe(UniqueFd& r, UniqueFd& w) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return sys_error("prepare", "pipe");
  r.reset(fds[0]);
  w.reset(fds[1]);
  return {};
}

// SOCK_SEQPACKET: one fd per message, and a message is never merged with the next (fdpass.hpp).
Status open_socketpair(UniqueFd& r, UniqueFd& w, Stage stage, const char* what) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
    return sys_error(stage, std::string("socketpair for ") + what);
  r.reset(fds[0]);
  w.reset(fds[1]);
  return {};
}

bool write_byte(int fd, const char* bytes, std::size_t n) {
  ssize_t k;
  do k = ::write(fd, bytes, n);
  while (k < 0 && errno == EINTR);
  if (k == static_cast<ssize_t>(n)) return true;
  // Init is gone (EPIPE, SIGPIPE ignored): its pidfd shows it, and supervise() says why.
  spdlog::debug("sync write failed: {}", k < 0 ? std::strerror(errno) : "short write");
  return false;
}

}  // namespace

ReportRead read_init_report(int fd, ChildMsg& m) {
  ssize_t k = ::read(fd, &m, sizeof m);
  if (k == static_cast<ssize_t>(sizeof m)) return ReportRead::kReport;
  if (k == 0) return ReportRead::kEnd;
  if (k < 0 && (errno == EAGAIN || errno == EINTR)) return ReportRead::kAgain;
  return ReportRead::kBroken;
}

Status InitChannel::open_pipes() {
  if (auto st = open_pipe(sync_r_, sync_w_); !st) return st;
  return open_pipe(msg_r_, msg_w_);
}

Status InitChannel::open_out_socket() { return open_socketpair(out_r_, out_w_, "prepare", "/out"); }

Status InitChannel::open_listener_socket() {
  return open_socketpair(listener_r_, listener_w_, "seccomp", "the listener hand-off");
}

Status InitChannel::open_proxy_socket() { return open_socketpair(proxy_r_, proxy_w_, "network", "the egress proxy"); }

void InitChannel::close_init_ends() {
  for (UniqueFd* f : {&sync_r_, &msg_w_, &out_w_, &listener_w_, &proxy_w_}) f->reset();
}

void InitChannel::send_go() { write_byte(sync_w_.get(), "g", 1); }

bool InitChannel::go_and_wait_shared_init(int pidfd, std::optional<std::int64_t> timeout_ms) {
  // From "go" until init reports kStarted, init runs ordinary code in our memory: nothing but
  // raw system calls here (raw_syscall.hpp), not even logging. A failed write means init is
  // gone: the wait sees its pidfd, and supervise() says why.
  long n;
  do n = raw::write(sync_w_.get(), "gs", 2);
  while (n == -EINTR);
  return wait_for_shared_init(msg_r_.get(), pidfd, timeout_ms);
}

void InitChannel::send_start() { write_byte(sync_w_.get(), "s", 1); }

Status InitChannel::send_start_with_job(std::string_view job) {
  std::string bytes = "s";
  bytes.append(job);
  return write_all(sync_w_.get(), bytes, "the pooled sandbox's job");
}

Result<UniqueFd> InitChannel::recv_template_pidfd(int timeout_ms) {
  struct pollfd p = {out_r_.get(), POLLIN, 0};
  int n;
  do n = ::poll(&p, 1, timeout_ms);
  while (n < 0 && errno == EINTR);
  if (n == 0) return Error{"template", ETIMEDOUT, "the template did not fork the call"};
  int received = -1;
  if (n < 0 || recv_fd(out_r_.get(), &received) <= 0 || received < 0)
    return Error{"template", EPROTO, "the template did not send the call's pidfd"};
  return UniqueFd(received);
}

UniqueFd InitChannel::recv_out_dir() {
  int received = -1;
  if (recv_fd(out_r_.get(), &received) > 0) return UniqueFd(received);
  return UniqueFd();
}

}  // namespace sbx
