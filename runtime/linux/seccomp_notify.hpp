#pragma once
// The supervisor's side of seccomp: receives the program's listener fd (SCM_RIGHTS from init on
// the hand-off socket, see child.cpp install_seccomp), answers every notification from the poll
// loop — -errno for the policy's errno actions, or "kill the sandbox" for kill actions — and keeps
// the record of refused calls for the trace's `violations`. Single-threaded: both fds are polled
// by supervise().
#include <linux/filter.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/base/fsutil.hpp"

namespace sbx {

struct SeccompViolation {
  std::string name;    // "mount"; a foreign ABI's name is resolved for that ABI
  int number = 0;      // the syscall number as the filter saw it
  std::string arch;    // "x86_64", "x86", "x32"
  std::string action;  // "SCMP_ACT_ERRNO(EPERM)", "SCMP_ACT_KILL_PROCESS", ...
  std::uint64_t count = 0;
  std::int64_t first_at_ms = 0;  // since the supervisor started
  bool kill = false;
};

// What the list of violations leaves out. The list is bounded (a program can make billions of
// distinct junk calls: any syscall number is a new entry), but never silently: the totals count
// every refused call, and the calls the policy names in a refusing rule (mount, ptrace, bpf, ...)
// are always listed, however many junk entries came first.
struct SeccompViolationTotals {
  std::uint64_t calls = 0;              // every refused call
  std::uint64_t unlisted_calls = 0;     // of those, calls with no entry in the list
  std::uint64_t unlisted_distinct = 0;  // distinct (arch, number, action) not listed
  bool unlisted_distinct_exact = true;  // false: more distinct ones than sbx counts individually
  bool truncated() const { return unlisted_calls > 0; }
};

class SeccompNotifier {
 public:
  // Distinct (arch, number, action) entries listed before only the policy's named calls are added.
  static constexpr std::size_t kMaxListed = 1024;
  // `sock`: the supervisor's end of the handoff socketpair (owned from now on); `reference`: the
  // policy with its real actions (must outlive this object); `named`: the syscall names of the
  // policy's refusing rules (PreparedSeccomp::named; may be null); `start_ms`: CLOCK_MONOTONIC ms.
  SeccompNotifier(int sock, const std::vector<sock_filter>* reference, std::int64_t start_ms,
                  const std::vector<std::string>* named = nullptr);
  ~SeccompNotifier();
  SeccompNotifier(const SeccompNotifier&) = delete;
  SeccompNotifier& operator=(const SeccompNotifier&) = delete;

  int sock_fd() const { return sock_.get(); }
  int listener_fd() const { return listener_.get(); }
  // The run's start, when it is known only after the notifier was made (a pooled call's: its
  // supervisor is made before the call arrives, supervisor.hpp, PreparedSupervisor).
  void set_start_ms(std::int64_t start_ms) { start_ms_ = start_ms; }
  void on_sock_readable();
  // Handles one notification. Returns true when the policy's action is a kill: the caller kills
  // the sandbox (the refused call stays blocked in the kernel until then, so it never runs).
  bool on_listener_ready(short revents, std::int64_t now_ms);

  // Called for every refused call, listed or not (live events: events.hpp), with the call and
  // its kind's count so far (0 for a call the list leaves out).
  std::function<void(const SeccompViolation&)> on_refused;

  const std::vector<SeccompViolation>& violations() const { return violations_; }
  const SeccompViolationTotals& totals() const { return totals_; }
  // The violation that killed the sandbox, or null.
  const SeccompViolation* kill() const { return kill_ < 0 ? nullptr : &violations_[static_cast<std::size_t>(kill_)]; }

 private:
  void record(std::uint32_t arch_token, int nr, std::uint32_t ret, bool kill, std::int64_t now_ms);

  UniqueFd sock_;
  UniqueFd listener_;
  const std::vector<sock_filter>* reference_;
  std::int64_t start_ms_;
  std::set<std::string> named_;
  std::vector<SeccompViolation> violations_;
  // (AUDIT_ARCH, number, action value) -> index in violations_; and the keys seen but not listed
  // (bounded too: past kMaxUnlistedKeys the distinct count is a lower bound).
  using Key = std::tuple<std::uint32_t, int, std::uint32_t>;
  std::map<Key, std::size_t> index_;
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return std::hash<std::uint64_t>()((std::uint64_t(std::get<0>(k)) << 32) ^ std::uint32_t(std::get<1>(k))) ^
             std::get<2>(k);
    }
  };
  static constexpr std::size_t kMaxUnlistedKeys = 65536;
  std::unordered_set<Key, KeyHash> unlisted_;
  SeccompViolationTotals totals_;
  long kill_ = -1;
};

nlohmann::json violations_json(const std::vector<SeccompViolation>& v);
// The trace's violations_summary.seccomp: totals, and whether (and how much) the list was cut.
nlohmann::json violation_totals_json(const SeccompViolationTotals& t, std::size_t listed);

}  // namespace sbx
