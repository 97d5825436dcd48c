#include "runtime/base/fsutil.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>

#include "runtime/base/clock.hpp"

namespace sbx {
namespace {

// Errors from here carry stage "fs"; callers that know more (the trace store, the image store)
// wrap or pass them on as they are — the message always names the path.
constexpr const char* kStage = "fs";

// mkdir one level; an existing directory is success, an existing non-directory is not.
Status mkdir_one(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) == 0) return {};
  int e = errno;
  if (e == EEXIST) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return {};
    return make_error(kStage, "cannot create directory " + path + ": exists and is not a directory", ENOTDIR);
  }
  return make_error(kStage, "cannot create directory " + path, e);
}

// A name that no concurrent writer (another thread, another sbx process, a leftover from a crash)
// uses: pid + a process-wide counter + the clock. O_EXCL still guards against the unlikely clash.
std::string temp_name_beside(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%u.%ld", static_cast<long>(::getpid()), counter.fetch_add(1),
                static_cast<long>(monotonic_us() % 1'000'000'000));
  // A leading dot keeps half-written files out of directory listings that skip dot files.
  return dir + "." + base + suffix;
}

std::string parent_dir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

Status write_all(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error(kStage, "cannot write " + what);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

int write_whole(const std::string& path, std::string_view data, bool* opened) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (opened) *opened = fd.ok();
  if (!fd.ok()) return errno;
  ssize_t n;
  do n = ::write(fd.get(), data.data(), data.size());
  while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  return n == static_cast<ssize_t>(data.size()) ? 0 : EIO;
}

int flock_waiting(int fd, int how, long max_wait_ms) {
  const std::int64_t start = monotonic_ms();
  long pause_us = 200;
  for (;;) {
    if (::flock(fd, how | LOCK_NB) == 0) return 0;
    if (errno != EWOULDBLOCK && errno != EINTR) return errno;
    if (monotonic_ms() - start > max_wait_ms) return EWOULDBLOCK;
    ::usleep(static_cast<useconds_t>(pause_us));
    pause_us = std::min(pause_us * 2, 20'000L);
  }
}

Status ensure_dir(const std::string& path, mode_t mode) {
  if (path.empty()) return make_error(kStage, "cannot create directory: empty path", EINVAL);
  // Walk the components left to right so every missing level gets `mode`; existing ones are left
  // as they are (mkdir -p semantics; we never chmod what we did not create).
  for (std::size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    if (path[pos - 1] == '/') continue;  // "a//b"
    SBX_TRY(mkdir_one(path.substr(0, pos), mode));
  }
  if (path.size() > 1 && path.back() == '/') return {};  // already created as the last prefix
  return mkdir_one(path, mode);
}

Status write_file_durable(const std::string& path, std::string_view data, mode_t mode) {
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    tmp = temp_name_beside(path);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0 && errno != EEXIST) return sys_error(kStage, "cannot create temporary file " + tmp);
  }
  if (fd < 0) return make_error(kStage, "cannot create a unique temporary file beside " + path, EEXIST);

  auto fail = [&](Error e) -> Status {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return e;
  };
  if (auto st = write_all(fd, data, tmp); !st) return fail(st.error());
  // fdatasync before rename: otherwise a crash can leave the new name pointing at an empty file.
  if (::fdatasync(fd) != 0) return fail(sys_error(kStage, "cannot sync " + tmp));
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0) return fail(sys_error(kStage, "cannot close " + tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(sys_error(kStage, "cannot rename " + tmp + " to " + path));

  // The rename lives in the directory: sync it, or the new name may not survive a crash.
  return sync_dir(parent_dir(path));
}

Status sync_dir(const std::string& dir) {
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.ok()) return sys_error(kStage, "cannot open directory " + dir + " to sync it");
  if (::fsync(d.get()) != 0) return sys_error(kStage, "cannot sync directory " + dir);
  return {};
}

std::string read_file_prefix(const std::string& path, std::size_t max_bytes, bool* ok) {
  if (ok) *ok = false;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd.ok()) return {};
  std::string out;
  char buf[16384];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(fd.get(), buf, std::min(sizeof buf, max_bytes - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return out;
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  if (ok) *ok = true;  // to the end, or what fits the bound (the rest is ignored)
  return out;
}

Result<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sys_error(kStage, "cannot open " + path);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return make_error(kStage, "cannot read " + path, e);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace sbx

#include <dirent.h>
#include <sys/syscall.h>

#include <memory>
#include <vector>

namespace sbx {
Result<std::vector<std::string>> list_dir(int dirfd, Stage stage, const std::string& what) {
  // fdopendir takes ownership of the fd it is given: hand it a duplicate.
  int dup = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return sys_error(stage, "open directory " + what);
  DIR* d = ::fdopendir(dup);
  if (!d) {
    int e = errno;
    ::close(dup);
    return make_error(stage, "open directory " + what, e);
  }
  std::unique_ptr<DIR, int (*)(DIR*)> guard(d, ::closedir);
  std::vector<std::string> names;
  errno = 0;
  while (auto* de = ::readdir(d)) {
    std::string_view n = de->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  if (errno != 0) return sys_error(stage, "read directory " + what);
  return names;
}

#ifdef SYS_fchmodat2
constexpr long kSysFchmodat2 = SYS_fchmodat2;
#else
constexpr long kSysFchmodat2 = 452;  // the same number on every architecture (Linux 6.6)
#endif

// chmod 0700 of the directory `name` in dirfd, never of what a symlink there points at.
// fchmodat(2) has no AT_SYMLINK_NOFOLLOW: fchmodat2 (Linux 6.6) has; before it, the directory is
// opened without following a link and changed by fchmod where it can be read, else pinned with
// O_PATH and changed through its /proc/self/fd entry (that very inode; needs /proc).
bool make_dir_writable_at(int dirfd, const std::string& name) {
  struct stat st;
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) return false;
  if (::syscall(kSysFchmodat2, dirfd, name.c_str(), 0700, AT_SYMLINK_NOFOLLOW) == 0) return true;
  int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    bool ok = ::fchmod(fd, 0700) == 0;
    ::close(fd);
    return ok;
  }
  fd = ::openat(dirfd, name.c_str(), O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::chmod(("/proc/self/fd/" + std::to_string(fd)).c_str(), 0700) == 0;
  ::close(fd);
  return ok;
}

namespace {
Status remove_children(int dirfd, const std::string& path) {
  auto names = list_dir(dirfd, kStage, path);
  if (!names) return names.error();
  for (auto& name : *names) {
    if (::unlinkat(dirfd, name.c_str(), 0) == 0) continue;
    if (errno != EISDIR && errno != EPERM) return sys_error(kStage, "cannot remove " + path + "/" + name);
    (void)make_dir_writable_at(dirfd, name);
    int sub = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) return sys_error(kStage, "cannot open directory " + path + "/" + name);
    auto st = remove_children(sub, path + "/" + name);
    ::close(sub);
    SBX_TRY(st);
    if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0)
      return sys_error(kStage, "cannot remove " + path + "/" + name);
  }
  return {};
}
}  // namespace

Status remove_at(int dirfd, const std::string& name, const std::string& path) {
  if (::unlinkat(dirfd, name.c_str(), 0) == 0 || errno == ENOENT) return {};
  if (errno != EISDIR && errno != EPERM) return sys_error(kStage, "cannot remove " + path);
  (void)make_dir_writable_at(dirfd, name);
  int sub = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0) return sys_error(kStage, "cannot open directory " + path);
  auto st = remove_children(sub, path);
  ::close(sub);
  SBX_TRY(st);
  if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0) return sys_error(kStage, "cannot remove " + path);
  return {};
}

Status remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? Status{} : sys_error(kStage, "cannot stat " + path);
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) != 0) return sys_error(kStage, "cannot remove " + path);
    return {};
  }
  (void)make_dir_writable_at(AT_FDCWD, path);
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return sys_error(kStage, "cannot open directory " + path);
  auto r = remove_children(fd, path);
  ::close(fd);
  SBX_TRY(r);
  if (::rmdir(path.c_str()) != 0) return sys_error(kStage, "cannot remove " + path);
  return {};
}
}  // namespace sbx

namespace sbx {
void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

const char* file_kind(unsigned mode) {
  if (S_ISREG(mode)) return "regular file";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISLNK(mode)) return "symlink";
  if (S_ISFIFO(mode)) return "fifo";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISCHR(mode)) return "char device";
  if (S_ISBLK(mode)) return "block device";
  return "unknown type";
}
}  // namespace sbx
