#include "runtime/linux/seccomp_notify.hpp"

#include "runtime/base/fdpass.hpp"
#include "runtime/base/trace_field.hpp"

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

#include "runtime/linux/seccomp_policy.hpp"

namespace sbx {

SeccompNotifier::SeccompNotifier(int sock, const std::vector<sock_filter>* reference, std::int64_t start_ms,
                                 const std::vector<std::string>* named)
    : sock_(sock), reference_(reference), start_ms_(start_ms) {
  if (named) named_.insert(named->begin(), named->end());
}

SeccompNotifier::~SeccompNotifier() = default;

void SeccompNotifier::on_sock_readable() {
  int fd;
  ssize_t n = recv_fd(sock_.get(), &fd);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n > 0) {
    UniqueFd got(fd);
    if (got.ok() && !listener_.ok()) listener_ = std::move(got);
    return;  // only one program child sends; anything else is dropped (closed with `got`)
  }
  // EOF: init closed its copy and the program exec'd (or died); nothing more will come.
  sock_.reset();
}

bool SeccompNotifier::on_listener_ready(short revents, std::int64_t now_ms) {
  if (!(revents & POLLIN)) {
    // POLLHUP: no task uses the filter any more.
    listener_.reset();
    return false;
  }
  struct seccomp_notif req;
  std::memset(&req, 0, sizeof req);  // the kernel insists on a zeroed buffer
  if (::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) return false;  // ENOENT: the caller died
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
    ::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_SEND, &cont);
    return false;
  }
  record(req.data.arch, req.data.nr, ret, kill, now_ms);
  if (kill) return true;  // no answer: the sandbox is killed with the call still blocked
  struct seccomp_notif_resp resp;
  std::memset(&resp, 0, sizeof resp);
  resp.id = req.id;
  resp.error = -err;  // error 0 with flags 0: the call "returns 0" without running, like ERRNO(0)
  resp.val = 0;
  if (::ioctl(listener_.get(), SECCOMP_IOCTL_NOTIF_SEND, &resp) != 0 && errno != ENOENT)
    spdlog::debug("seccomp: answer failed: {}", std::strerror(errno));
  return false;
}

// Aggregates one refused call per (arch, number, action). Past kMaxListed entries only the call
// that kills and the calls the policy names are listed; every other call is counted.
void SeccompNotifier::record(std::uint32_t arch_token, int nr, std::uint32_t ret, bool kill, std::int64_t now_ms) {
  ++totals_.calls;
  Key key{arch_token, nr, ret};
  auto it = index_.find(key);
  if (it == index_.end()) {
    std::string name = seccomp_syscall_name(arch_token, nr);
    if (violations_.size() >= kMaxListed && !kill && !named_.count(name)) {
      ++totals_.unlisted_calls;
      if (unlisted_.size() < kMaxUnlistedKeys) {
        if (unlisted_.insert(key).second) ++totals_.unlisted_distinct;
      } else if (!unlisted_.count(key)) {
        totals_.unlisted_distinct_exact = false;
      }
      if (on_refused) {
        std::string arch = seccomp_arch_name(arch_token);
        if (is_x32_syscall(arch_token, nr)) arch = "x32";
        on_refused({std::move(name), nr, std::move(arch), seccomp_action_text(ret), 0, now_ms - start_ms_, kill});
      }
      return;
    }
    std::string arch = seccomp_arch_name(arch_token);
    if (is_x32_syscall(arch_token, nr)) arch = "x32";
    violations_.push_back({std::move(name), nr, arch, seccomp_action_text(ret), 0, now_ms - start_ms_, kill});
    it = index_.emplace(key, violations_.size() - 1).first;
    auto& v = violations_.back();
    spdlog::info("seccomp: refused {} ({}, {}) with {}", v.name, v.number, v.arch, v.action);
  }
  SeccompViolation& v = violations_[it->second];
  ++v.count;
  if (kill && kill_ < 0) kill_ = static_cast<long>(it->second);
  if (on_refused) on_refused(v);
}

nlohmann::json violation_totals_json(const SeccompViolationTotals& t, std::size_t listed) {
  return trace_object({{"violations_summary/seccomp/calls", t.calls},
                       {"violations_summary/seccomp/listed", listed},
                       {"violations_summary/seccomp/listed_cap", SeccompNotifier::kMaxListed},
                       {"violations_summary/seccomp/truncated", t.truncated()},
                       {"violations_summary/seccomp/unlisted_calls", t.unlisted_calls},
                       {"violations_summary/seccomp/unlisted_distinct", t.unlisted_distinct},
                       {"violations_summary/seccomp/unlisted_distinct_exact", t.unlisted_distinct_exact},
                       {"violations_summary/seccomp/always_listed",
                        "calls named by a refusing rule of the policy, and the call that killed the sandbox"}});
}

nlohmann::json violations_json(const std::vector<SeccompViolation>& vs) {
  nlohmann::json a = nlohmann::json::array();
  for (auto& v : vs)
    a.push_back(trace_object({{"violations/[]/kind", "seccomp"},
                              {"violations/[]/name", v.name},
                              {"violations/[]/number", v.number},
                              {"violations/[]/arch", v.arch},
                              {"violations/[]/action", v.action},
                              {"violations/[]/count", v.count},
                              {"violations/[]/first_at_ms", v.first_at_ms}}));
  return a;
}

}  // namespace sbx
