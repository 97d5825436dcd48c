#pragma once
// Reading a pack's tree (and a pack run's contexts) safely: bounded, streaming, never following a
// link, and checking that what was opened is what was listed. A pack is someone else's
// directory: between a stat and an open any entry may become a symlink to /dev/zero, a FIFO that
// blocks forever or a 2 GiB sparse file; and between the hash and the mount its files may change.
// So a run hashes a private copy it made itself (snapshot_tree) and mounts that copy: the digest
// in the record, the tenant's allowlist check and the bytes the program runs are one and the same.
#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"

namespace sbx {

class Sha256;

// The bounds of a pack, and of each context of a pack run (both are copied before a run): file
// data in total, files and directories, directory depth. Past one: exit 125, naming the pack or
// context, the limit and what to do.
inline constexpr std::int64_t kMaxPackBytes = 64ll << 20;
inline constexpr std::size_t kMaxPackEntries = 4096;
inline constexpr int kMaxPackDepth = 32;

// Opens `name` in the directory `dirfd` for reading: O_NOFOLLOW (a symlink is refused, not
// followed) and O_NONBLOCK (a FIFO put there cannot block the open), then checks that what was
// opened is a regular file and the very one `expected` describes (lstat's device and inode): an
// entry swapped between the listing and the open is refused. `what` names it in errors.
Result<UniqueFd> open_regular_at(int dirfd, const std::string& name, const struct stat& expected,
                                 const std::string& what);

// Reads `in` to its end through a 64 KiB buffer, hashing each chunk into `h` and writing it to
// `out` when out >= 0. At most min(expected, max_bytes) + 1 bytes are read: a file longer than
// max_bytes is an error naming the cap, and one whose length differs from `expected` (the size
// stat saw) changed while it was read, which is an error too. Returns the bytes read.
Result<std::int64_t> hash_copy_bounded(int in, int out, std::int64_t expected, std::int64_t max_bytes, Sha256& h,
                                       const std::string& what);

// A private directory sbx made for copies (a pack run's pack and contexts; the pack and inputs a
// replay rebuilds from blobs), under <state>/tmp (kCopiesSubdir): sbx's state dir is
// checked private (check_private_dir) and no run may bind it read-write (check_binds_spare_state),
// so no sandbox -- not even a concurrent one of the same user with `--bind /tmp:/tmp:rw` -- can
// rewrite a copy between its hash and its mount, and no other user can rename it away ($TMPDIR
// allowed both). <state>/tmp and each copy directory are mode 0711: as root the sandbox runs as
// an unprivileged mapped uid, which must traverse to the copy it is given (so, as root, the state
// dir gains o+x too: search only, nothing in it can be listed); nobody else can list or write in
// them. Named "<prefix>-<pid>-<starttime>-XXXXXX": the copies a killed sbx left (no destructor ran)
// are removed by the next make() in that state dir, once their owner (pid and start time, as
// /proc tells) is gone (sweep_stale_copies). Removed with everything in it on destruction.
inline constexpr const char* kCopiesSubdir = "tmp";
class PrivateDir {
 public:
  static Result<std::shared_ptr<PrivateDir>> make(const std::string& state_dir, const std::string& prefix);
  ~PrivateDir();
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  PrivateDir() = default;
  std::string path_;
};

// Removes the copy directories in <state_dir>/tmp (prefix pack, context or replay) whose owner process is gone (at most
// kMaxPackEntries entries looked at per call: the rest go next time); a copy whose owner cannot be
// decided (unreadable /proc) is kept. Returns how many were removed.
std::size_t sweep_stale_copies(const std::string& state_dir);

// The digest of the tree at `src` (a directory, or for a context a single regular file), read as
// above and within the pack bounds. With `copy_to` (a path that does not exist yet), the tree is
// also copied there as it is read, so the digest is that of the copy: directories and files
// with their modes less group/other write and the set-id bits, the modes the digest names
// whether or not a copy is made. `what` names the tree in errors ("pack /p", "context data (/srv/d)"); `hint`, what to do
// about a tree past the bounds.
//
// A directory's digest is sha256 over its sorted manifest, one line each (mode as above):
// "<path>\t<mode octal>\t<size>\t<sha256>\n" (directories "<path>/\t<mode>\t0\t-\n"); a single
// file's is the sha256 of its content. Symlinks, FIFOs, devices and sockets are refused.
Result<std::string> hash_tree(const std::string& src, const std::string& copy_to, const std::string& what,
                              const std::string& hint);

}  // namespace sbx
