#pragma once
// openat2(2), the one way sbx resolves a path it must keep inside a tree or free of symlinks.
//
// With RESOLVE_BENEATH or RESOLVE_IN_ROOT, the kernel answers EAGAIN when a rename or a mount
// anywhere on the host happened while a ".." was resolved (it cannot then prove the walk stayed
// inside), and asks the caller to retry. On a busy host, one with other sandboxes being built,
// that is routine, not an attack: the call is retried up to kOpenat2Tries times, and only a host
// that renames or mounts without pause still gets EAGAIN, never a loop.
#include <linux/openat2.h>  // RESOLVE_*: the callers' resolve flags
#include <sys/types.h>

#include <cstdint>

namespace sbx {

inline constexpr int kOpenat2Tries = 64;

// The new fd, or -1 with errno set (EAGAIN only after kOpenat2Tries answers of it).
int openat2_retrying(int dirfd, const char* path, std::uint64_t flags, std::uint64_t resolve, mode_t mode = 0);

}  // namespace sbx
