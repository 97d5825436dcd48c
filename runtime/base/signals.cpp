#include "runtime/base/signals.hpp"

#include <time.h>

#include <cstring>

namespace sbx {
namespace {
sigset_t g_caller_mask;  // written once, before anything else runs (main), read-only afterwards
bool g_caller_mask_saved = false;
}  // namespace

void forwarded_signals(sigset_t* set) {
  sigemptyset(set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(set, s);
}

void block_forwarded_signals_at_start() {
  if (g_caller_mask_saved) return;  // already done (.preinit_array, main.cpp): keep the caller's mask
  sigset_t fwd;
  forwarded_signals(&fwd);
  ::sigprocmask(SIG_BLOCK, &fwd, &g_caller_mask);
  g_caller_mask_saved = true;
}

const sigset_t& caller_signal_mask() {
  if (!g_caller_mask_saved) {  // not started through main() (the unit tests): the mask as it is
    ::sigprocmask(SIG_BLOCK, nullptr, &g_caller_mask);
    g_caller_mask_saved = true;
  }
  return g_caller_mask;
}

void restore_caller_signal_mask() { ::sigprocmask(SIG_SETMASK, &caller_signal_mask(), nullptr); }

CallerSignalMaskScope::CallerSignalMaskScope() { ::sigprocmask(SIG_SETMASK, &caller_signal_mask(), &old_); }
CallerSignalMaskScope::~CallerSignalMaskScope() { ::sigprocmask(SIG_SETMASK, &old_, nullptr); }

int take_pending_forwarded_signal() {
  sigset_t fwd;
  forwarded_signals(&fwd);
  struct timespec zero = {0, 0};
  int sig = ::sigtimedwait(&fwd, nullptr, &zero);
  return sig > 0 ? sig : 0;
}

int peek_pending_forwarded_signal() {
  sigset_t fwd, pending;
  forwarded_signals(&fwd);
  if (::sigpending(&pending) != 0) return 0;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT})
    if (sigismember(&pending, s) && sigismember(&fwd, s)) return s;
  return 0;
}

SignalMaskGuard::SignalMaskGuard(int how, const sigset_t& set) { ::sigprocmask(how, &set, &old_); }
SignalMaskGuard::~SignalMaskGuard() { ::sigprocmask(SIG_SETMASK, &old_, nullptr); }

SignalDispositionGuard::SignalDispositionGuard(int sig, void (*handler)(int), int flags) : sig_(sig) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  ::sigaction(sig, &sa, &old_);
}
SignalDispositionGuard::~SignalDispositionGuard() { ::sigaction(sig_, &old_, nullptr); }

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGKILL: return "SIGKILL";
    case SIGPIPE: return "SIGPIPE";
    default: return "signal " + std::to_string(sig);
  }
}

}  // namespace sbx
