#include "runtime/session/session_child.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

namespace sbx {

void session_child_setup(int out_w, int err_w, int keep_to) {
  ::setpgid(0, 0);
  for (int s = 1; s < 65; ++s) ::signal(s, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  int null = ::open("/dev/null", O_RDONLY);
  if (null >= 0 && null != 0) {
    ::dup2(null, 0);
    ::close(null);
  }
  ::dup2(out_w, 1);
  ::dup2(err_w, 2);
  ::close_range(static_cast<unsigned>(keep_to + 1), ~0u, 0);
}

}  // namespace sbx
