#include "runtime/typed/pack_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "runtime/base/sha256.hpp"
#include "runtime/base/units.hpp"
#include "runtime/linux/cgroup.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "pack";
constexpr std::size_t kChunk = 64 * 1024;

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

std::string mode_octal(mode_t m) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// The mode a copy gets: nobody but its owner (sbx) may write it (the copy's path is no secret:
// $TMPDIR is listable), and no set-id bit survives. The digest names these modes, those of what
// is mounted, whether or not a copy is made, so a tree rebuilt from its blobs (replay) has it too.
mode_t copy_mode(mode_t m) { return m & 0755; }

struct Walk {
  const std::string& what;
  const std::string& hint;
  std::int64_t bytes = 0;
  std::size_t entries = 0;
  std::vector<std::string> lines;
  struct DirMode {
    std::string rel;
    int depth;
    mode_t mode;
  };
  std::vector<DirMode> dir_modes;  // set on the copy once it is filled (a 0555 source dir)

  Error over(const std::string& what_is_over) const {
    return make_error(kStage, what + ": " + what_is_over + ": " + hint);
  }
};

// The names in the directory `fd` (without . and ..), at most kMaxPackEntries + 1 of them: a
// directory of a million entries is refused without listing it all.
Result<std::vector<std::string>> names_in(int fd, const std::string& shown) {
  int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return sys_error(kStage, "open directory " + shown);
  DIR* d = ::fdopendir(dup);
  if (!d) {
    ::close(dup);
    return sys_error(kStage, "open directory " + shown);
  }
  ::rewinddir(d);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
    if (names.size() > kMaxPackEntries) break;
    errno = 0;
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return make_error(kStage, "read directory " + shown, err);
  return names;
}

Result<UniqueFd> open_dir_at(int dirfd, const std::string& name, const struct stat& expected, const std::string& what) {
  UniqueFd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.ok()) return sys_error(kStage, "open " + what);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return sys_error(kStage, "stat " + what);
  if (!same_file(st, expected)) return make_error(kStage, what + " was replaced while the tree was read: try again");
  return fd;
}

// One regular file: hashed (and copied into the directory `copy_dir` when >= 0); its line added.
Status file_entry(Walk& w, int dirfd, const std::string& name, const std::string& rel, const struct stat& st,
                  int copy_dir) {
  if (st.st_size > kMaxPackBytes - w.bytes)
    return w.over("more than " + format_size(kMaxPackBytes) + " of file data (" + rel + " alone is " +
                  format_size(st.st_size) + " as stat sees it, sparse or not)");
  auto in = open_regular_at(dirfd, name, st, rel);
  if (!in) return in.error();
  UniqueFd out;
  if (copy_dir >= 0) {
    out = UniqueFd(::openat(copy_dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out.ok()) return sys_error(kStage, "copy " + rel);
  }
  Sha256 h;
  auto n = hash_copy_bounded(in->get(), out.get(), st.st_size, kMaxPackBytes - w.bytes, h, rel);
  if (!n) return n.error();
  if (out.ok() && ::fchmod(out.get(), copy_mode(st.st_mode)) != 0) return sys_error(kStage, "chmod the copy of " + rel);
  w.bytes += *n;
  w.lines.push_back(rel + "\t" + mode_octal(copy_mode(st.st_mode)) + "\t" + std::to_string(*n) + "\t" + h.final_hex() +
                    "\n");
  return {};
}

Status walk_dirs(Walk& w, UniqueFd root, UniqueFd copy_root) {
  struct Dir {
    UniqueFd fd, copy;
    std::string rel;
    int depth;
  };
  std::vector<Dir> stack;
  stack.push_back({std::move(root), std::move(copy_root), "", 0});
  while (!stack.empty()) {
    Dir d = std::move(stack.back());
    stack.pop_back();
    auto names = names_in(d.fd.get(), d.rel.empty() ? "." : d.rel);
    if (!names) return names.error();
    for (auto& name : *names) {
      if (++w.entries > kMaxPackEntries)
        return w.over("more than " + std::to_string(kMaxPackEntries) + " files and directories");
      std::string rel = d.rel.empty() ? name : d.rel + "/" + name;
      struct stat st;
      if (::fstatat(d.fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return sys_error(kStage, "stat " + rel);
      if (S_ISREG(st.st_mode)) {
        SBX_TRY(file_entry(w, d.fd.get(), name, rel, st, d.copy.get()));
      } else if (S_ISDIR(st.st_mode)) {
        if (d.depth + 1 > kMaxPackDepth)
          return w.over("directories nested deeper than " + std::to_string(kMaxPackDepth) + " (at " + rel + ")");
        auto sub = open_dir_at(d.fd.get(), name, st, rel);
        if (!sub) return sub.error();
        UniqueFd copy;
        if (d.copy.ok()) {
          if (::mkdirat(d.copy.get(), name.c_str(), 0700) != 0) return sys_error(kStage, "copy directory " + rel);
          copy = UniqueFd(::openat(d.copy.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
          if (!copy.ok()) return sys_error(kStage, "open the copy of " + rel);
          w.dir_modes.push_back({rel, d.depth + 1, st.st_mode});
        }
        w.lines.push_back(rel + "/\t" + mode_octal(copy_mode(st.st_mode)) + "\t0\t-\n");
        stack.push_back({std::move(*sub), std::move(copy), rel, d.depth + 1});
      } else {
        return make_error(kStage,
                          w.what + ": " + rel + " is a " + file_kind(st.st_mode) +
                              ": only regular files and directories may be in it (a symlink or device could expose "
                              "host files once it is mounted)");
      }
    }
  }
  return {};
}

}  // namespace

Result<UniqueFd> open_regular_at(int dirfd, const std::string& name, const struct stat& expected,
                                 const std::string& what) {
  UniqueFd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.ok()) {
    if (errno == ELOOP)
      return make_error(kStage, what + " is a symlink now: only regular files are read (was it replaced?)");
    return sys_error(kStage, "open " + what);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return sys_error(kStage, "stat " + what);
  if (!S_ISREG(st.st_mode))
    return make_error(kStage, what + " is a " + std::string(file_kind(st.st_mode)) + ", not a regular file");
  if (!same_file(st, expected))
    return make_error(kStage, what + " was replaced between its listing and its opening: try again");
  return fd;
}

Result<std::int64_t> hash_copy_bounded(int in, int out, std::int64_t expected, std::int64_t max_bytes, Sha256& h,
                                       const std::string& what) {
  // One byte past what may be read: enough to tell "longer" without reading on.
  const std::int64_t want = std::min(std::max<std::int64_t>(expected, 0), std::max<std::int64_t>(max_bytes, 0)) + 1;
  std::vector<char> buf(kChunk);
  std::int64_t got = 0;
  while (got < want) {
    std::size_t ask = static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(kChunk), want - got));
    ssize_t n = ::read(in, buf.data(), ask);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error(kStage, "read " + what);
    if (n == 0) break;
    got += n;
    if (got > max_bytes) return make_error(kStage, what + ": larger than " + format_size(max_bytes));
    if (got > expected) break;
    h.update(buf.data(), static_cast<std::size_t>(n));
    if (out >= 0)
      SBX_TRY(write_all(out, std::string_view(buf.data(), static_cast<std::size_t>(n)), "the copy of " + what));
  }
  if (got != expected)
    return make_error(kStage, what + " changed while it was read (" + std::to_string(expected) +
                                  " bytes when listed, " + (got > expected ? "more" : std::to_string(got)) +
                                  " read): try again");
  return got;
}

namespace {
// Field 22 of /proc/<pid>/stat (the start time, in ticks since boot); nullopt with `gone` set when
// no such process exists, nullopt alone when it cannot be told.
std::optional<std::uint64_t> proc_starttime(const std::string& pid, bool* gone) {
  *gone = false;
  UniqueFd fd(::open(("/proc/" + pid + "/stat").c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.ok()) {
    *gone = errno == ENOENT || errno == ESRCH;
    return std::nullopt;
  }
  char buf[1024];
  ssize_t n = ::read(fd.get(), buf, sizeof buf);
  if (n <= 0) {
    *gone = n < 0 && errno == ESRCH;
    return std::nullopt;
  }
  return parse_stat_starttime(std::string_view(buf, static_cast<std::size_t>(n)));
}

// The "<pid>-<start>" part of a copy's name for this process ("" if /proc cannot tell).
std::string self_owner() {
  bool gone = false;
  auto start = proc_starttime(std::to_string(::getpid()), &gone);
  return start ? std::to_string(::getpid()) + "-" + std::to_string(*start) : "";
}

bool all_digits(std::string_view s) {
  return !s.empty() && s.size() <= 20 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
}  // namespace

std::size_t sweep_stale_copies(const std::string& state_dir) {
  std::string base = state_dir + "/" + kCopiesSubdir;
  int fd = ::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::fdopendir(fd), ::closedir);
  if (!d) {
    ::close(fd);
    return 0;
  }
  std::vector<std::string> stale;
  std::size_t seen = 0;
  while (auto* e = ::readdir(d.get())) {
    if (++seen > kMaxPackEntries) break;
    std::string_view name = e->d_name;
    // "<prefix>-<pid>-<start>-XXXXXX", prefix pack, context or replay: nothing else is sbx's to remove.
    std::size_t a = name.find('-'), b = a == name.npos ? a : name.find('-', a + 1),
                c = b == name.npos ? b : name.find('-', b + 1);
    if (c == name.npos) continue;
    std::string_view prefix = name.substr(0, a), pid = name.substr(a + 1, b - a - 1),
                     start = name.substr(b + 1, c - b - 1);
    if ((prefix != "pack" && prefix != "context" && prefix != "replay") || !all_digits(pid) || !all_digits(start))
      continue;
    bool gone = false;
    auto now = proc_starttime(std::string(pid), &gone);
    // Undecidable (unreadable /proc): kept. A live owner with the same start time: its copy, in use.
    if (!gone && (!now || std::to_string(*now) == start)) continue;
    stale.emplace_back(name);
  }
  std::size_t removed = 0;
  for (auto& n : stale) {
    struct stat st;
    // Only directories sbx made (a copy is one); remove_tree does not follow links below it.
    if (::fstatat(::dirfd(d.get()), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (remove_tree(base + "/" + n)) ++removed;
  }
  return removed;
}

Result<std::shared_ptr<PrivateDir>> PrivateDir::make(const std::string& state_dir, const std::string& prefix) {
  if (state_dir.empty()) return make_error(kStage, "no state dir to make a private copy in");
  std::string base = state_dir + "/" + kCopiesSubdir;
  SBX_TRY(ensure_dir(base, 0700));
  if (::geteuid() == 0) {
    // As root the sandbox's mapped uid must reach the copy: search (not read) for others on the
    // state dir and <state>/tmp. Everything else in the state dir stays 0700 below it.
    struct stat st;
    for (const std::string& p : {state_dir, base})
      if (::stat(p.c_str(), &st) == 0 && (st.st_mode & 0011) != 0011 &&
          ::chmod(p.c_str(), (st.st_mode & 07777) | 0011) != 0)
        return sys_error(kStage, "chmod o+x " + p);
  }
  // What killed runs left here: a readdir of a directory that holds only the live runs' copies.
  sweep_stale_copies(state_dir);
  std::string owner = self_owner();
  // Without its start time a copy could not be told from a dead run's: made nowhere, then.
  if (owner.empty()) return make_error(kStage, "cannot read this process's start time in /proc/self/stat");
  std::string tmpl = base + "/" + prefix + "-" + owner + "-XXXXXX";
  if (!::mkdtemp(tmpl.data())) return sys_error(kStage, "create a private directory in " + base);
  std::shared_ptr<PrivateDir> d(new PrivateDir());
  d->path_ = tmpl;
  if (::chmod(d->path_.c_str(), 0711) != 0) return sys_error(kStage, "chmod " + d->path_);
  return d;
}

PrivateDir::~PrivateDir() {
  if (!path_.empty()) (void)remove_tree(path_);
}

Result<std::string> hash_tree(const std::string& src, const std::string& copy_to, const std::string& what,
                              const std::string& hint) {
  struct stat st;
  if (::lstat(src.c_str(), &st) != 0) return sys_error(kStage, "stat " + what);
  Walk w{what, hint};
  if (S_ISREG(st.st_mode)) {
    // A single file (a context): its content's digest.
    if (st.st_size > kMaxPackBytes)
      return w.over("larger than " + format_size(kMaxPackBytes) + " (" + format_size(st.st_size) + ")");
    auto in = open_regular_at(AT_FDCWD, src, st, what);
    if (!in) return in.error();
    UniqueFd out;
    if (!copy_to.empty()) {
      out = UniqueFd(::open(copy_to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (!out.ok()) return sys_error(kStage, "copy " + what + " to " + copy_to);
    }
    Sha256 h;
    auto n = hash_copy_bounded(in->get(), out.get(), st.st_size, kMaxPackBytes, h, what);
    if (!n) return n.error();
    if (out.ok() && ::fchmod(out.get(), copy_mode(st.st_mode)) != 0) return sys_error(kStage, "chmod " + copy_to);
    return "sha256:" + h.final_hex();
  }
  if (!S_ISDIR(st.st_mode))
    return make_error(kStage,
                      what + " is a " + std::string(file_kind(st.st_mode)) + ", not a directory or a regular file");
  UniqueFd root(::open(src.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root.ok()) return sys_error(kStage, "open " + what);
  struct stat opened;
  if (::fstat(root.get(), &opened) != 0) return sys_error(kStage, "stat " + what);
  if (!same_file(opened, st)) return make_error(kStage, what + " was replaced while it was opened: try again");
  UniqueFd copy;
  if (!copy_to.empty()) {
    if (::mkdir(copy_to.c_str(), 0700) != 0) return sys_error(kStage, "create " + copy_to);
    copy = UniqueFd(::open(copy_to.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!copy.ok()) return sys_error(kStage, "open " + copy_to);
  }
  int copy_fd = copy.get();
  UniqueFd keep_copy(copy_fd >= 0 ? ::fcntl(copy_fd, F_DUPFD_CLOEXEC, 0) : -1);
  SBX_TRY(walk_dirs(w, std::move(root), std::move(copy)));
  if (keep_copy.ok()) {
    // The copy's directories get their modes last, deepest first: a 0555 directory is filled
    // before it becomes read-only, and its parent is still searchable while it is changed.
    std::sort(w.dir_modes.begin(), w.dir_modes.end(), [](auto& a, auto& b) { return a.depth > b.depth; });
    for (auto& dm : w.dir_modes)
      if (::fchmodat(keep_copy.get(), dm.rel.c_str(), copy_mode(dm.mode), 0) != 0)  // sbx's own copy: no links in it
        return sys_error(kStage, "chmod the copy of " + dm.rel);
    if (::fchmod(keep_copy.get(), copy_mode(st.st_mode)) != 0) return sys_error(kStage, "chmod " + copy_to);
  }
  std::sort(w.lines.begin(), w.lines.end());
  Sha256 h;
  for (auto& l : w.lines) h.update(l);
  return "sha256:" + h.final_hex();
}

}  // namespace sbx
