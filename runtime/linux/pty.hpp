#pragma once
// Pseudo-terminals for `sbx run -t`, and the guard that puts the caller's terminal in raw mode.
//
// The pty is the sandbox's own: init opens it from the sandbox's private devpts instance
// (mounts.cpp, build_dev) once the root is built, so the slave is /dev/pts/0 of the sandbox and
// nothing of the host's devpts is visible. The master goes to the supervisor over a socketpair
// (fdpass.hpp); the program child opens the slave through the master (TIOCGPTPEER, no path
// lookup), makes it its controlling terminal in its own session and its fds 0, 1 and 2.
#include <sys/ioctl.h>
#include <termios.h>

#include <cstdint>

#include "runtime/base/error.hpp"

namespace sbx {

// Init, inside the new root: opens /dev/pts/ptmx, unlocks the slave and sets its window size.
// Returns the master (close-on-exec, blocking).
Result<int> open_sandbox_pty(const struct winsize& ws);

// The program child, before it drops its identity: opens the slave of `master`, hands it to
// uid/gid (so the program may reopen /dev/pts/0 or /dev/tty), makes it the controlling terminal
// of the session the child just created, and puts it on fds 0, 1 and 2.
Status attach_pty_slave(int master, std::uint32_t uid, std::uint32_t gid);

// The caller's terminal in raw mode for as long as this guard lives: keystrokes (^C, ^Z, ^D
// included) go to the sandbox's pty unchanged, whose own line discipline acts on them. The
// settings are restored on every way out of the scope; TCSANOW, not TCSADRAIN, because a terminal
// stalled by flow control would otherwise block sbx in tcsetattr.
class RawTerminal {
 public:
  RawTerminal() = default;
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
  ~RawTerminal() { restore(); }
  Status enter(int fd);
  void restore();

 private:
  int fd_ = -1;
  struct termios saved_ {};
};

// The window size of terminal `fd`; 24x80 when it has none (a pty whose size was never set).
struct winsize window_size(int fd);

}  // namespace sbx
