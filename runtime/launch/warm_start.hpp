#pragma once
// Init's side of a warm pool's prepared interpreter (runtime/model/warm.hpp; child.cpp starts it).
//
// In a pooled sandbox whose profile has `warm` with a driver, init spawns the interpreter as the
// program right after the root is built (the program's identity, rlimits, capabilities and
// seccomp filter: the same steps as any program's start, spawn_program), with its stdin a socket
// to init. Then, until the call's program may run:
//   - the driver imports its preloads and writes one line: "ok" or "fail WHAT" (at most
//     kMaxDriverLine bytes; anything else, or EOF, is a failure);
//   - a system call the seccomp policy refuses waits, as always, on the filter's listener, which
//     init still holds (it reaches the supervisor with the call's start, watch_program): init
//     answers it as the supervisor would (the policy's errno), counts it, and names the first in
//     the ready note; a policy kill ends the preparation, and the sandbox;
//   - init tells the supervisor kWarmReady (handshake.hpp), or reports the failure as a setup
//     error (stage "pool") and exits: the pooled worker reads either while it waits for the call.
// At the call: init writes the call's files (pool_job.hpp), sends the driver the call's argv
// (encode_driver_argv) and shuts its end; the driver runs it in a fresh main module.
#include <linux/filter.h>

#include <string>
#include <vector>

namespace sbx {

inline constexpr std::size_t kMaxDriverLine = 512;

// What the driver's line says: ready, not yet (no newline so far), or failed (with why).
struct DriverLine {
  enum Kind { kPending, kReady, kFailed } kind = kPending;
  std::string why;
};
// Reads the bytes the driver wrote so far (`eof`: its end is closed).
DriverLine parse_driver_line(const std::string& bytes, bool eof);

// The call's argv as the driver reads it: each entry NUL-terminated.
std::string encode_driver_argv(const std::vector<std::string>& argv);

// Init's wait while the driver prepares (and, with `sync_fd` >= 0, until the call's "s" arrives).
class WarmWait {
 public:
  // sock: init's end of the driver's stdin; listener: the seccomp listener (-1: no filter);
  // reference: the policy's real actions (child.hpp ChildConfig::seccomp_reference).
  WarmWait(int sock, int listener, const std::vector<sock_filter>* reference)
      : sock_(sock), listener_(listener), reference_(reference) {}
  enum Event { kReady, kCall, kFailed };
  // Polls until the driver is ready (kReady, once), the call arrives on sync_fd (kCall; -1: not
  // waited for), or the preparation failed (kFailed: failure() says why).
  Event next(int sync_fd);
  bool ready() const { return ready_; }
  const std::string& failure() const { return failure_; }
  // "refused N system calls while preparing (first: NAME)", or "" when none was.
  std::string note() const;

 private:
  void answer_notification();
  void read_line();
  int sock_, listener_;
  const std::vector<sock_filter>* reference_;
  std::string line_;
  bool ready_ = false;
  std::string failure_;
  unsigned long refused_ = 0;
  std::string first_refused_;
};

}  // namespace sbx
