#include "runtime/linux/mount_target.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/base/openat2.hpp"

namespace sbx {
namespace {

int openat2_fd(int dirfd, const std::string& path, std::uint64_t flags, std::uint64_t resolve) {
  return openat2_retrying(dirfd, path.c_str(), flags | O_PATH | O_CLOEXEC, resolve);
}

Error target_error(const std::string& dst, const std::string& where, const std::string& what, int err) {
  return make_error("mounts", "cannot mount at " + dst + ": " + where + " " + what, err);
}

// Creates `name` in `parent` (a directory fd) and opens it. mkdirat and O_CREAT|O_EXCL never
// follow a symlink in the name: one that is there (dangling inside the root, since its
// resolution said ENOENT) answers EEXIST, and the reopen (O_NOFOLLOW) returns the link itself,
// which the caller refuses.
Result<UniqueFd> create_component(int parent, const std::string& name, bool dir, const std::string& dst,
                                  const std::string& where) {
  if (dir) {
    if (::mkdirat(parent, name.c_str(), 0755) != 0 && errno != EEXIST) return target_error(dst, "create", where, errno);
  } else {
    UniqueFd made(::openat(parent, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!made.ok() && errno != EEXIST) return target_error(dst, "create", where, errno);
  }
  int fd = openat2_fd(parent, name, O_NOFOLLOW, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
  if (fd < 0) return target_error(dst, "open", where, errno);
  return UniqueFd(fd);
}

}  // namespace

Result<MountTarget> open_mount_target(int root_fd, const std::string& dst, bool dir) {
  if (dst.size() < 2 || dst[0] != '/')
    return make_error("mounts", "cannot mount at '" + dst + "': not an absolute path below /", EINVAL);
  MountTarget t;
  t.parent = UniqueFd(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  if (!t.parent.ok()) return sys_error("mounts", "dup the new root's fd");
  std::size_t i = 1;
  while (true) {
    std::size_t j = dst.find('/', i);
    bool last = j == std::string::npos;
    if (last) j = dst.size();
    std::string name = dst.substr(i, j - i), rel = dst.substr(1, j - 1), where = "/" + rel;
    if (name.empty() || name == "." || name == "..") return target_error(dst, where, "is not a plain name", EINVAL);
    // The whole prefix is resolved from the root each time: a symlink's target (absolute or
    // relative with "..") must be taken relative to the new root, not to the directory it sits in.
    // The last component is opened itself (O_NOFOLLOW), to refuse it if it is a symlink.
    std::uint64_t flags = last ? O_NOFOLLOW : O_DIRECTORY;
    int fd = openat2_fd(root_fd, rel, flags, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
    UniqueFd node;
    if (fd >= 0) {
      node = UniqueFd(fd);
    } else if (errno == ENOENT) {
      auto made = create_component(t.parent.get(), name, !last || dir, dst, where);
      if (!made) return made.error();
      node = std::move(*made);
    } else {
      return target_error(dst, "open", where, errno);
    }
    struct stat st;
    if (::fstat(node.get(), &st) != 0) return target_error(dst, "stat", where, errno);
    if (S_ISLNK(st.st_mode))  // last, or dangling inside the root
      return target_error(dst, where, last ? "is a symlink" : "is a symlink that leads nowhere inside the sandbox",
                          ELOOP);
    bool want_dir = !last || dir;
    if (want_dir != S_ISDIR(st.st_mode))
      return target_error(dst, where, S_ISDIR(st.st_mode) ? "is a directory" : "is not a directory",
                          want_dir ? ENOTDIR : EISDIR);
    if (last) {
      t.name = name;
      t.node = std::move(node);
      return t;
    }
    t.parent = std::move(node);
    i = j + 1;
  }
}

Result<UniqueFd> open_mounted(const MountTarget& t, const std::string& dst) {
  int fd =
      openat2_fd(t.parent.get(), t.name, O_NOFOLLOW, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
  if (fd < 0) return target_error(dst, "reopen", dst + " after mounting", errno);
  return UniqueFd(fd);
}

}  // namespace sbx
