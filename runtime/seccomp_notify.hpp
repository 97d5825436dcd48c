#pragma once
// The supervisor's side of seccomp: receives the program's listener fd (SCM_RIGHTS on the
// handoff socket, see child.cpp install_seccomp), answers every notification from the poll loop
// — -errno for the policy's errno actions, or "kill the sandbox" for kill actions — and keeps
// the record of refused calls for the trace's `violations`. Single-threaded: both fds are polled
// by supervise().
#include <linux/filter.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace sbx {

struct SeccompViolation {
  std::string name;      // "mount"; a foreign ABI's name is resolved for that ABI
  int number = 0;        // the syscall number as the filter saw it
  std::string arch;      // "x86_64", "x86", "x32"
  std::string action;    // "SCMP_ACT_ERRNO(EPERM)", "SCMP_ACT_KILL_PROCESS", ...
  std::uint64_t count = 0;
  std::int64_t first_at_ms = 0;  // since the supervisor started
  bool kill = false;
};

class SeccompNotifier {
 public:
  // `sock`: the supervisor's end of the handoff socketpair (owned from now on); `reference`: the
  // policy with its real actions (must outlive this object); `start_ms`: CLOCK_MONOTONIC ms.
  SeccompNotifier(int sock, const std::vector<sock_filter>* reference, std::int64_t start_ms);
  ~SeccompNotifier();
  SeccompNotifier(const SeccompNotifier&) = delete;
  SeccompNotifier& operator=(const SeccompNotifier&) = delete;

  int sock_fd() const { return sock_; }
  int listener_fd() const { return listener_; }
  void on_sock_readable();
  // Handles one notification. Returns true when the policy's action is a kill: the caller kills
  // the sandbox (the refused call stays blocked in the kernel until then, so it never runs).
  bool on_listener_ready(short revents, std::int64_t now_ms);

  const std::vector<SeccompViolation>& violations() const { return violations_; }
  // The violation that killed the sandbox, or null.
  const SeccompViolation* kill() const { return kill_ < 0 ? nullptr : &violations_[static_cast<std::size_t>(kill_)]; }

 private:
  int sock_ = -1;
  int listener_ = -1;
  const std::vector<sock_filter>* reference_;
  std::int64_t start_ms_;
  std::vector<SeccompViolation> violations_;
  long kill_ = -1;
};

nlohmann::json violations_json(const std::vector<SeccompViolation>& v);

}  // namespace sbx
