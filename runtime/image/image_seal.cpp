#include "runtime/image/image_seal.hpp"

#include <dirent.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/image/image_manifest.hpp"

namespace sbx {
namespace {

// The kernel's record for getdents64 (glibc exposes no declaration of it).
struct linux_dirent64 {
  std::uint64_t d_ino;
  std::int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

constexpr const char* kStage = "image";

// One fixed-size record per entry, fed to the hash (no string formatting on the hot path).
struct Tuple {
  std::uint64_t ino, mode, size, mtime_s, mtime_ns, ctime_s, ctime_ns;
};

struct SealWalker {
  Sha256 h;
  std::int64_t entries = 0;

  void add(const std::string& path, const struct stat& st) {
    Tuple t{st.st_ino,
            st.st_mode,
            static_cast<std::uint64_t>(st.st_size),
            static_cast<std::uint64_t>(st.st_mtim.tv_sec),
            static_cast<std::uint64_t>(st.st_mtim.tv_nsec),
            static_cast<std::uint64_t>(st.st_ctim.tv_sec),
            static_cast<std::uint64_t>(st.st_ctim.tv_nsec)};
    std::uint32_t len = static_cast<std::uint32_t>(path.size());
    h.update(&len, sizeof len);
    h.update(path);
    h.update(&t, sizeof t);
    ++entries;
  }

  // getdents64 on the directory's own fd, not opendir(3): per directory that is openat,
  // getdents64 until empty and close, where fdopendir adds a dup, fcntl calls and an fstat. On
  // this kind of host every system call costs microseconds and the walk is nothing but calls.
  // One buffer for every directory, off the stack: each level of the walk is a frame, and 32 KiB
  // of stack per level overflowed sbx's 8 MiB at 252 levels (a review's tarball crashed the
  // import). The directory is read whole before the walk goes down, so the levels never share it.
  std::vector<char> dents = std::vector<char>(32768);

  Status walk(int dirfd, const std::string& rel, std::size_t depth) {
    if (depth > kMaxTreeDepth)
      return make_error(kStage,
                        "image tree " + rel + " is more than " + std::to_string(kMaxTreeDepth) + " directories deep");
    std::vector<std::string> names;
    char* buf = dents.data();
    for (;;) {
      long n = ::syscall(SYS_getdents64, dirfd, buf, dents.size());
      if (n < 0) return sys_error(kStage, "read directory " + rel);
      if (n == 0) break;
      for (long off = 0; off < n;) {
        auto* de = reinterpret_cast<struct linux_dirent64*>(buf + off);
        off += de->d_reclen;
        const char* name = de->d_name;
        if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
        names.emplace_back(name);
      }
    }
    // Directory order is the file system's: sort so the digest depends on the tree only.
    std::sort(names.begin(), names.end());
    for (auto& name : names) {
      std::string path = rel + "/" + name;
      struct stat st;
      if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return sys_error(kStage, "stat " + path);
      add(path, st);
      if (S_ISDIR(st.st_mode)) {
        UniqueFd sub(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub.ok()) return sys_error(kStage, "open directory " + path);
        SBX_TRY(walk(sub.get(), path, depth + 1));
      }
    }
    return {};
  }
};

}  // namespace

Result<Seal> compute_seal_fd(int fd) {
  SealWalker w;
  struct stat st;
  if (::fstat(fd, &st) != 0) return sys_error(kStage, "stat image tree");
  w.add("", st);
  SBX_TRY(w.walk(fd, "", 0));
  return Seal{w.entries, w.h.final_hex()};
}

Result<Seal> compute_seal(const std::string& root) {
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.ok()) return sys_error(kStage, "open image tree " + root);
  return compute_seal_fd(fd.get());
}

}  // namespace sbx
