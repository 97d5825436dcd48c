#include "runtime/image_seal.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "runtime/sha256.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "image";

// One fixed-size record per entry, fed to the hash (no string formatting on the hot path).
struct Tuple {
  std::uint64_t ino, mode, size, mtime_s, mtime_ns, ctime_s, ctime_ns;
};

struct SealWalker {
  Sha256 h;
  std::int64_t entries = 0;

  void add(const std::string& path, const struct stat& st) {
    Tuple t{st.st_ino, st.st_mode, static_cast<std::uint64_t>(st.st_size),
            static_cast<std::uint64_t>(st.st_mtim.tv_sec), static_cast<std::uint64_t>(st.st_mtim.tv_nsec),
            static_cast<std::uint64_t>(st.st_ctim.tv_sec), static_cast<std::uint64_t>(st.st_ctim.tv_nsec)};
    std::uint32_t len = static_cast<std::uint32_t>(path.size());
    h.update(&len, sizeof len);
    h.update(path);
    h.update(&t, sizeof t);
    ++entries;
  }

  Status walk(int dirfd, const std::string& rel) {
    int dup = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return sys_error(kStage, "dup");
    DIR* d = ::fdopendir(dup);
    if (!d) {
      ::close(dup);
      return sys_error(kStage, "open directory " + rel);
    }
    std::unique_ptr<DIR, int (*)(DIR*)> guard(d, ::closedir);
    std::vector<std::pair<std::string, unsigned char>> names;
    errno = 0;
    while (auto* de = ::readdir(d)) {
      if (de->d_name[0] == '.' && (de->d_name[1] == 0 || (de->d_name[1] == '.' && de->d_name[2] == 0))) continue;
      names.emplace_back(de->d_name, de->d_type);
    }
    if (errno != 0) return sys_error(kStage, "read directory " + rel);
    // Directory order is the file system's: sort so the digest depends on the tree only.
    std::sort(names.begin(), names.end());
    for (auto& [name, type] : names) {
      std::string path = rel + "/" + name;
      struct stat st;
      if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return sys_error(kStage, "stat " + path);
      add(path, st);
      if (S_ISDIR(st.st_mode)) {
        int sub = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) return sys_error(kStage, "open directory " + path);
        auto st2 = walk(sub, path);
        ::close(sub);
        SBX_TRY(st2);
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
  SBX_TRY(w.walk(fd, ""));
  return Seal{w.entries, w.h.final_hex()};
}

Result<Seal> compute_seal(const std::string& root) {
  int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return sys_error(kStage, "open image tree " + root);
  auto r = compute_seal_fd(fd);
  ::close(fd);
  return r;
}

}  // namespace sbx
