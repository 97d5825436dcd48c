#include "runtime/base/openat2.hpp"

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sbx {

// No allocation and no lock: a shared-memory init calls this while it builds the root
// (runtime/linux/mount_target.cpp).
int openat2_retrying(int dirfd, const char* path, std::uint64_t flags, std::uint64_t resolve, mode_t mode) {
  struct open_how how = {};
  how.flags = flags;
  how.mode = mode;
  how.resolve = resolve;
  long fd = -1;
  for (int attempt = 0; attempt < kOpenat2Tries; ++attempt) {
    fd = ::syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    if (fd >= 0 || errno != EAGAIN) break;
  }
  return static_cast<int>(fd);
}

}  // namespace sbx
