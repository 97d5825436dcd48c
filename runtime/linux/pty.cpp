#include "runtime/linux/pty.hpp"

#include "runtime/base/fsutil.hpp"

#include <fcntl.h>
#include <unistd.h>

namespace sbx {

Result<int> open_sandbox_pty(const struct winsize& ws) {
  // /dev/ptmx is a symlink to pts/ptmx in the sandbox (mounts.cpp); the devpts node itself is
  // opened so that a host /dev/ptmx can never be the one used.
  UniqueFd master(::open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!master.ok()) return sys_error("tty", "open /dev/pts/ptmx in the sandbox");
  int unlock = 0;
  if (::ioctl(master.get(), TIOCSPTLCK, &unlock) != 0 || ::ioctl(master.get(), TIOCSWINSZ, &ws) != 0)
    return sys_error("tty", "unlock the sandbox's pty and set its window size");
  return master.release();
}

Status attach_pty_slave(int master, std::uint32_t uid, std::uint32_t gid) {
  UniqueFd slave(::ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!slave.ok()) return sys_error("tty", "open the pty slave (TIOCGPTPEER)");
  // Best effort: a uid or gid outside the mapping keeps the slave root's (mode 0620), which only
  // stops the program from reopening it by name; the fds it already has work.
  (void)::fchown(slave.get(), uid, gid);
  // The caller of setsid() has no controlling terminal: TIOCSCTTY makes the slave its own, so
  // ^C on the pty signals the program's foreground process group, not sbx.
  if (::ioctl(slave.get(), TIOCSCTTY, 0) != 0) return sys_error("tty", "make the pty the controlling terminal");
  for (int fd = 0; fd < 3; ++fd)
    if (::dup2(slave.get(), fd) < 0) return sys_error("tty", "dup2 the pty slave");
  return {};
}

Status RawTerminal::enter(int fd) {
  struct termios t;
  if (::tcgetattr(fd, &t) != 0) return sys_error("tty", "read the terminal's settings");
  saved_ = t;
  fd_ = fd;
  ::cfmakeraw(&t);
  if (::tcsetattr(fd, TCSANOW, &t) != 0) {
    fd_ = -1;
    return sys_error("tty", "put the terminal in raw mode");
  }
  return {};
}

void RawTerminal::restore() {
  if (fd_ < 0) return;
  while (::tcsetattr(fd_, TCSANOW, &saved_) != 0 && errno == EINTR) {}
  fd_ = -1;
}

struct winsize window_size(int fd) {
  struct winsize ws {};
  if (::ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0 || ws.ws_col == 0) {
    ws.ws_row = 24;
    ws.ws_col = 80;
  }
  return ws;
}

}  // namespace sbx
