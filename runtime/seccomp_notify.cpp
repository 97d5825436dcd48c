#include "runtime/seccomp_notify.hpp"

#include "runtime/fdpass.hpp"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "runtime/seccomp_policy.hpp"

namespace sbx {

namespace {
constexpr std::size_t kMaxDistinct = 1024;  // distinct (arch, nr, action) entries kept in the record
}

SeccompNotifier::SeccompNotifier(int sock, const std::vector<sock_filter>* reference, std::int64_t start_ms)
    : sock_(sock), reference_(reference), start_ms_(start_ms) {}

SeccompNotifier::~SeccompNotifier() {
  if (sock_ >= 0) ::close(sock_);
  if (listener_ >= 0) ::close(listener_);
}

void SeccompNotifier::on_sock_readable() {
  int fd;
  ssize_t n = recv_fd(sock_, &fd);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n > 0) {
    if (fd >= 0 && listener_ < 0) listener_ = fd;
    else if (fd >= 0) ::close(fd);  // only one program child sends; anything else is dropped
    return;
  }
  // EOF: init closed its copy and the program exec'd (or died); nothing more will come.
  ::close(sock_);
  sock_ = -1;
}

bool SeccompNotifier::on_listener_ready(short revents, std::int64_t now_ms) {
  if (!(revents & POLLIN)) {
    // POLLHUP: no task uses the filter any more.
    ::close(listener_);
    listener_ = -1;
    return false;
  }
  struct seccomp_notif req;
  std::memset(&req, 0, sizeof req);  // the kernel insists on a zeroed buffer
  if (::ioctl(listener_, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) return false;  // ENOENT: the caller died
  std::uint32_t ret = seccomp_evaluate(*reference_, req.data);
  SeccompAnswer answer = seccomp_answer(ret);
  bool kill = answer.kind == SeccompAnswer::kKill;
  int err = answer.err;
  if (answer.kind == SeccompAnswer::kAllow) {
    // Cannot happen with a program from notify_program(); answer as the reference would.
    struct seccomp_notif_resp cont;
    std::memset(&cont, 0, sizeof cont);
    cont.id = req.id;
    cont.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    ::ioctl(listener_, SECCOMP_IOCTL_NOTIF_SEND, &cont);
    return false;
  }
  std::string arch = seccomp_arch_name(req.data.arch);
  if (req.data.arch == AUDIT_ARCH_X86_64 && (req.data.nr & 0x40000000)) arch = "x32";
  std::string action = seccomp_action_text(ret);
  // Aggregate per (arch, nr, action).
  SeccompViolation* v = nullptr;
  for (auto& e : violations_)
    if (e.number == req.data.nr && e.arch == arch && e.action == action) v = &e;
  if (!v && (violations_.size() < kMaxDistinct || kill)) {  // the call that kills is always named
    violations_.push_back({seccomp_syscall_name(req.data.arch, req.data.nr), req.data.nr, arch, action, 0,
                           now_ms - start_ms_, kill});
    v = &violations_.back();
    spdlog::info("seccomp: refused {} ({}, {}) with {}", v->name, v->number, arch, action);
  }
  if (v) ++v->count;
  if (kill) {
    if (kill_ < 0 && v) kill_ = v - violations_.data();
    return true;  // no answer: the sandbox is killed with the call still blocked
  }
  struct seccomp_notif_resp resp;
  std::memset(&resp, 0, sizeof resp);
  resp.id = req.id;
  resp.error = -err;  // error 0 with flags 0: the call "returns 0" without running, like ERRNO(0)
  resp.val = 0;
  if (::ioctl(listener_, SECCOMP_IOCTL_NOTIF_SEND, &resp) != 0 && errno != ENOENT)
    spdlog::debug("seccomp: answer failed: {}", std::strerror(errno));
  return false;
}

nlohmann::json violations_json(const std::vector<SeccompViolation>& vs) {
  nlohmann::json a = nlohmann::json::array();
  for (auto& v : vs)
    a.push_back({{"kind", "seccomp"},
                 {"name", v.name},
                 {"number", v.number},
                 {"arch", v.arch},
                 {"action", v.action},
                 {"count", v.count},
                 {"first_at_ms", v.first_at_ms}});
  return a;
}

}  // namespace sbx
