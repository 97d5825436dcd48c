#include "runtime/launch/warm_start.hpp"

#include <linux/seccomp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/linux/seccomp_policy.hpp"

namespace sbx {

DriverLine parse_driver_line(const std::string& bytes, bool eof) {
  auto nl = bytes.find('\n');
  if (nl == std::string::npos) {
    if (bytes.size() >= kMaxDriverLine) return {DriverLine::kFailed, "the warm interpreter's line was too long"};
    if (eof) return {DriverLine::kFailed, "the warm interpreter ended before it was ready"};
    return {};
  }
  std::string line = bytes.substr(0, nl);
  if (line == "ok") return {DriverLine::kReady, ""};
  if (line.rfind("fail ", 0) == 0) return {DriverLine::kFailed, line.substr(5)};
  return {DriverLine::kFailed, "the warm interpreter said something else than ready"};
}

std::string encode_driver_argv(const std::vector<std::string>& argv) {
  std::string out;
  for (auto& a : argv) {
    out += a;
    out += '\0';
  }
  return out;
}

std::string WarmWait::note() const {
  if (refused_ == 0) return "";
  return "refused " + std::to_string(refused_) + " system call" + (refused_ == 1 ? "" : "s") +
         " while preparing (first: " + first_refused_ + ")";
}

void WarmWait::answer_notification() {
  struct seccomp_notif req;
  std::memset(&req, 0, sizeof req);                                     // the kernel insists on a zeroed buffer
  if (::ioctl(listener_, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) return;  // ENOENT: the caller died
  SeccompAnswer answer = seccomp_answer(seccomp_evaluate(*reference_, req.data));
  struct seccomp_notif_resp resp;
  std::memset(&resp, 0, sizeof resp);
  resp.id = req.id;
  if (answer.kind == SeccompAnswer::kAllow) {
    resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;  // as the reference would (seccomp_notify.cpp)
  } else {
    std::string name = seccomp_syscall_name(req.data.arch, req.data.nr);
    if (refused_++ == 0) first_refused_ = name;
    if (answer.kind == SeccompAnswer::kKill) {
      // Unanswered: the call stays blocked, and init's exit ends the sandbox with it.
      failure_ = "the seccomp policy kills " + name + ", which the warm interpreter called while preparing";
      return;
    }
    resp.error = -answer.err;
  }
  ::ioctl(listener_, SECCOMP_IOCTL_NOTIF_SEND, &resp);
}

void WarmWait::read_line() {
  char buf[kMaxDriverLine];
  ssize_t n = ::read(sock_, buf, sizeof buf - line_.size());
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n > 0) line_.append(buf, static_cast<std::size_t>(n));
  DriverLine l = parse_driver_line(line_, n <= 0);
  if (l.kind == DriverLine::kReady) ready_ = true;
  if (l.kind == DriverLine::kFailed) failure_ = l.why;
}

WarmWait::Event WarmWait::next(int sync_fd) {
  for (;;) {
    if (!failure_.empty()) return kFailed;
    // The driver's socket stays watched once it is ready: anything more from it (it writes
    // nothing else before its call) or its hang-up means the prepared interpreter is gone.
    pollfd fds[3] = {{sock_, static_cast<short>(POLLIN | POLLRDHUP), 0}, {listener_, POLLIN, 0}, {sync_fd, POLLIN, 0}};
    int n = ::poll(fds, 3, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      failure_ = std::string("poll: ") + std::strerror(errno);
      return kFailed;
    }
    if (fds[1].revents & POLLIN) answer_notification();
    else if (fds[1].revents) listener_ = -1;  // POLLHUP: no task uses the filter (the sock says why)
    if (fds[0].revents && ready_) {
      failure_ = "the warm interpreter ended (or wrote again) before its call";
      return kFailed;
    }
    if (fds[0].revents) {
      read_line();
      if (ready_) return kReady;
    }
    if (!failure_.empty()) return kFailed;
    if (fds[2].revents) return kCall;
  }
}

}  // namespace sbx
