#pragma once
// The signals sbx forwards to the sandbox, and the process-wide signal state the supervisor
// changes while it supervises a run, each held by a guard that puts it back.
//
// Why sbx blocks the forwarded signals first thing in main(): until a signal is blocked, its
// default action ends sbx. A SIGINT/SIGTERM in the first milliseconds of `sbx run` (a caller's
// timeout, a Ctrl-C right after Enter) would kill sbx before any record exists, and so would one
// that arrives after the supervisor's loop, while the record is written. Blocked from the start,
// a signal waits: run_sandbox() reads it from its signalfd and forwards it, or, when it came
// before the sandbox existed, does not start the program and records why. Commands that run no
// sandbox put the caller's mask back at once (main.cpp), so Ctrl-C ends them the ordinary way.
#include <signal.h>

#include <string>

namespace sbx {

// SIGINT, SIGTERM, SIGHUP, SIGQUIT: received by sbx, forwarded to the program's process group.
void forwarded_signals(sigset_t* set);

// Called first in main(): blocks the forwarded signals and remembers the mask sbx was started
// with (the caller's), for restore_caller_signal_mask() and for a child that execs something
// other than the program (the program itself always starts with an empty mask: child.cpp).
void block_forwarded_signals_at_start();
const sigset_t& caller_signal_mask();
// Back to the caller's mask: a forwarded signal that is pending takes its default action now.
void restore_caller_signal_mask();

// The caller's mask for its lifetime (a forwarded signal ends sbx the ordinary way meanwhile),
// then the forwarded signals blocked again: for what sbx does before any sandbox exists and
// that may wait on the caller (sbx exec reading its request), and around an execve of
// something else than sbx's program (systemd-run).
class CallerSignalMaskScope {
 public:
  CallerSignalMaskScope();
  ~CallerSignalMaskScope();
  CallerSignalMaskScope(const CallerSignalMaskScope&) = delete;
  CallerSignalMaskScope& operator=(const CallerSignalMaskScope&) = delete;

 private:
  sigset_t old_;
};

// Takes a forwarded signal that is pending (blocked, not yet delivered) off the pending set and
// returns it; 0 when none is.
int take_pending_forwarded_signal();

// Changes the mask (SIG_BLOCK or SIG_UNBLOCK `set`) for its lifetime; puts the previous mask
// back on every return path.
class SignalMaskGuard {
 public:
  SignalMaskGuard(int how, const sigset_t& set);
  ~SignalMaskGuard();
  SignalMaskGuard(const SignalMaskGuard&) = delete;
  SignalMaskGuard& operator=(const SignalMaskGuard&) = delete;
  const sigset_t& previous() const { return old_; }

 private:
  sigset_t old_;
};

// Sets one signal's disposition (e.g. SIGPIPE to SIG_IGN) for its lifetime, then restores the
// previous one (handler, flags and handler mask alike).
class SignalDispositionGuard {
 public:
  SignalDispositionGuard(int sig, void (*handler)(int), int flags = 0);
  ~SignalDispositionGuard();
  SignalDispositionGuard(const SignalDispositionGuard&) = delete;
  SignalDispositionGuard& operator=(const SignalDispositionGuard&) = delete;

 private:
  int sig_;
  struct sigaction old_;
};

// The forwarded signal that is pending, left pending (the run that follows takes it); 0: none.
int peek_pending_forwarded_signal();

// "SIGTERM" for the signals sbx forwards or sends itself; "signal N" for any other.
std::string signal_name(int sig);

}  // namespace sbx
