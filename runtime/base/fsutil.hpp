#pragma once
// Small filesystem helpers with errors that carry the path and errno.
#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"

namespace sbx {

// mkdir -p with `mode` for the directories it creates.
Status ensure_dir(const std::string& path, mode_t mode = 0700);

// Durable, atomic replace: write to a temp file beside `path`, fsync it, rename over `path`,
// fsync the directory. A reader sees the old file or the new one, never a torn one.
Status write_file_durable(const std::string& path, std::string_view data, mode_t mode = 0644);

// fsync of a directory, so that the names created, renamed or removed in it survive a crash (a
// file's own sync does not cover its directory entry). The error names the directory.
Status sync_dir(const std::string& dir);

Result<std::string> read_file(const std::string& path);

// At most `max_bytes` from the start of a file ("" when it cannot be opened), for host and kernel
// files whose useful part comes first (/proc/self/mounts, /etc/subuid). `ok`, when given: read to
// its end or to the bound without an error.
std::string read_file_prefix(const std::string& path, std::size_t max_bytes, bool* ok = nullptr);

// Writes all of `data`, retrying short writes and EINTR (a signal mid-write must not lose a
// trace); the error names `what`.
Status write_all(int fd, std::string_view data, const std::string& what);

// One write(2) of the whole of `data` to an existing kernel file (a cgroup control file,
// /proc/PID/uid_map, setgroups): such files parse each write as a unit, so it is never split.
// Returns 0, or the errno (EIO for a short write); `opened` says whether the open succeeded,
// for messages that name the step.
int write_whole(const std::string& path, std::string_view data, bool* opened = nullptr);

// flock(fd, how) (LOCK_SH or LOCK_EX) without blocking the caller for good: tries without
// waiting, then again with pauses growing from 0.2 to 20 ms, for at most `max_wait_ms`. Returns
// 0, EWOULDBLOCK when another holder kept it that long, or flock's errno. One loop for the
// ledger's and the blob store's locks.
int flock_waiting(int fd, int how, long max_wait_ms);

}  // namespace sbx

namespace sbx {
// The names in the directory open as `dirfd`, without "." and "..", in the file system's order.
// Reads through a duplicate, so dirfd stays open and usable; errors are "open directory <what>"
// and "read directory <what>" in `stage`.
Result<std::vector<std::string>> list_dir(int dirfd, Stage stage, const std::string& what);

// rm -rf without following symlinks (unlinkat relative to each directory's fd); directories the
// caller owns but cannot write are made writable first.
Status remove_tree(const std::string& path);
// Removes `name` in the directory dirfd, a whole tree if it is a directory, never following a
// symlink (a symlink is removed itself); a missing name is no error. `path` names it in messages.
Status remove_at(int dirfd, const std::string& name, const std::string& path);
// Mode 0700 for the directory `name` in dirfd (AT_FDCWD: a path); false, and nothing changed,
// where it is a symlink or no directory (or, on a kernel before 6.6 without /proc, where the
// directory cannot be read). The removals above use it.
bool make_dir_writable_at(int dirfd, const std::string& name);
}  // namespace sbx

namespace sbx {
// An owned file descriptor, closed on destruction (movable, not copyable).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// "fifo", "socket", "char device", "block device", "symlink", ... for messages and listings.
const char* file_kind(unsigned mode);
}  // namespace sbx
