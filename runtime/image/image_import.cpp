#include "runtime/image/image_import.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string_view>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/openat2.hpp"
#include "runtime/image/tar_reader.hpp"
#include "runtime/image/tarball.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "image";

std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "/" + b; }

// Refuses the member that would take the import past a limit; `adding` bytes are about to be
// written (a tar header's size, a chunk just copied).
Status check_limits(const ImportLimits& l, const ImportStats& s, std::int64_t adding, const std::string& member) {
  std::int64_t dropped = static_cast<std::int64_t>(s.dropped.size());
  if (s.entries + dropped + 1 > l.max_entries)
    return make_error("usage", "the import stopped at " + member + ": more than " + std::to_string(l.max_entries) +
                                   " entries (--max-entries); nothing was stored");
  if (adding > l.max_bytes - s.bytes)
    return make_error("usage", "the import stopped at " + member + ": more than " + std::to_string(l.max_bytes) +
                                   " bytes of file data (--max-bytes); nothing was stored");
  return {};
}

// Gives `name` (beneath dirfd; `fd` instead where it is open) the image's owner, where the
// import carries owners (image_import.hpp). Never follows a symlink.
Status set_owner(const ImportLimits& l, ImportStats& s, int dirfd, const std::string& name, int fd, std::uint32_t uid,
                 std::uint32_t gid, const std::string& what) {
  if (!l.carry_owners) return {};
  // Past the range: the importer's (a later layer re-declaring a directory resets it so too).
  const bool outside = uid >= kOwnerIdRange || gid >= kOwnerIdRange;
  if (outside) ++s.owners_outside_range;
  const uid_t u = outside ? ::geteuid() : kOwnerIdBase + uid;
  const gid_t g = outside ? ::getegid() : kOwnerIdBase + gid;
  int r = fd >= 0 ? ::fchown(fd, u, g) : ::fchownat(dirfd, name.c_str(), u, g, AT_SYMLINK_NOFOLLOW);
  if (r != 0)
    return sys_error(kStage, "chown " + what + " to image ids " + std::to_string(uid) + ":" + std::to_string(gid));
  return {};
}

void count_mode(ImportStats& s, std::uint32_t mode) {
  if (mode & 07000) ++s.special_bits_cleared;
  if (mode & 0022) ++s.write_bits_cleared;
}

// Kernel-side copy where the file systems allow it, plain read/write otherwise; `copied` is
// told every chunk (64 MiB at most), so a large file shows progress too, and an error from it
// stops the copy there (a file that grows while it is copied would otherwise be copied whole).
Status copy_data(int in, int out, const std::string& what, const std::function<Status(std::int64_t)>& copied) {
  bool kernel_copy = true;
  for (;;) {
    if (kernel_copy) {
      ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, 64 << 20, 0);
      if (n > 0) {
        SBX_TRY(copied(n));
        continue;
      }
      if (n == 0) return {};
      if (errno == EINTR) continue;
      if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
        return sys_error(kStage, "copy " + what);
      kernel_copy = false;
    }
    char buf[1 << 16];
    ssize_t n = ::read(in, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error(kStage, "read " + what);
    }
    if (n == 0) return {};
    SBX_TRY(write_all(out, std::string_view(buf, static_cast<std::size_t>(n)), what));
    SBX_TRY(copied(n));
  }
}

Status set_mtime(int dirfd, const std::string& name, std::int64_t sec, long nsec, const std::string& what) {
  struct timespec ts[2] = {{0, UTIME_OMIT}, {static_cast<time_t>(sec), nsec}};
  if (::utimensat(dirfd, name.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) return sys_error(kStage, "set mtime of " + what);
  return {};
}

// ---- from a directory ----

struct DirCopier {
  const ImportProgress& progress;
  const ImportLimits& limits;
  int dst_root;
  ImportStats stats;
  std::map<std::pair<dev_t, ino_t>, std::string> linked;  // multiply-linked inodes already copied

  void tick() {
    ++stats.entries;
    if (progress) progress("copying", stats.entries, stats.bytes);
  }

  Status copy_dir(int src, int dst, const std::string& rel, std::size_t depth) {
    if (depth > kMaxTreeDepth)
      return make_error("usage", "the import stopped at " + rel + ": more than " + std::to_string(kMaxTreeDepth) +
                                     " directories deep; nothing was stored");
    auto names = list_dir(src, kStage, rel);
    if (!names) return names.error();
    for (auto& name : *names) SBX_TRY(copy_entry(src, dst, rel, name, depth));
    return {};
  }

  Status copy_entry(int src, int dst, const std::string& rel, const std::string& name, std::size_t depth) {
    std::string path = join(rel, name);
    struct stat st;
    if (::fstatat(src, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return sys_error(kStage, "stat " + path);
    SBX_TRY(check_limits(limits, stats, S_ISREG(st.st_mode) ? st.st_size : 0, path));
    if (S_ISDIR(st.st_mode)) {
      count_mode(stats, st.st_mode);
      if (::mkdirat(dst, name.c_str(), 0700) != 0) return sys_error(kStage, "create directory " + path);
      if (::fchmodat(dst, name.c_str(), normalise_mode(true, st.st_mode), 0) != 0)
        return sys_error(kStage, "chmod " + path);
      SBX_TRY(set_owner(limits, stats, dst, name, -1, st.st_uid, st.st_gid, path));
      UniqueFd s(::openat(src, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (s.get() < 0) return sys_error(kStage, "open directory " + path);
      UniqueFd t(::openat(dst, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (t.get() < 0) return sys_error(kStage, "open directory " + path + " in the store");
      tick();
      return copy_dir(s.get(), t.get(), path, depth + 1);
    }
    if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<std::size_t>(st.st_size) + 1, '\0');
      ssize_t n = ::readlinkat(src, name.c_str(), target.data(), target.size());
      if (n < 0) return sys_error(kStage, "readlink " + path);
      target.resize(static_cast<std::size_t>(n));
      if (::symlinkat(target.c_str(), dst, name.c_str()) != 0) return sys_error(kStage, "create symlink " + path);
      SBX_TRY(set_owner(limits, stats, dst, name, -1, st.st_uid, st.st_gid, path));
      tick();
      return set_mtime(dst, name, st.st_mtim.tv_sec, st.st_mtim.tv_nsec, path);
    }
    if (!S_ISREG(st.st_mode)) {
      stats.dropped.push_back({path, file_kind(st.st_mode)});
      return {};
    }
    auto key = std::make_pair(st.st_dev, st.st_ino);
    if (st.st_nlink > 1) {
      if (auto it = linked.find(key); it != linked.end()) {
        if (::linkat(dst_root, it->second.c_str(), dst, name.c_str(), 0) != 0)
          return sys_error(kStage, "hard link " + path);
        tick();
        return {};
      }
      linked[key] = path;
    }
    count_mode(stats, st.st_mode);
    UniqueFd in(::openat(src, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    if (in.get() < 0) return sys_error(kStage, "open " + path);
    UniqueFd out(::openat(dst, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (out.get() < 0) return sys_error(kStage, "create " + path + " in the store");
    // A file that grows while it is copied is held to the limit too: the copy stops at the
    // first chunk that passes it.
    SBX_TRY(copy_data(in.get(), out.get(), path, [&](std::int64_t n) -> Status {
      stats.bytes += n;
      if (stats.bytes > limits.max_bytes) return check_limits(limits, stats, 1, path);
      if (progress) progress("copying", stats.entries, stats.bytes);
      return {};
    }));
    SBX_TRY(set_owner(limits, stats, -1, path, out.get(), st.st_uid, st.st_gid, path));
    if (::fchmod(out.get(), normalise_mode(false, st.st_mode)) != 0) return sys_error(kStage, "chmod " + path);
    struct timespec ts[2] = {{0, UTIME_OMIT}, st.st_mtim};
    if (::futimens(out.get(), ts) != 0) return sys_error(kStage, "set mtime of " + path);
    tick();
    return {};
  }
};

// ---- from a tarball ----

// Opens DIR (relative to root, "" for root itself) beneath root without crossing any symlink,
// creating missing directories (0755) on the way.
Result<UniqueFd> open_dir_beneath(int root, const std::string& dir, bool create, std::int64_t* created = nullptr) {
  UniqueFd cur(::fcntl(root, F_DUPFD_CLOEXEC, 0));
  if (cur.get() < 0) return sys_error(kStage, "dup");
  std::size_t i = 0;
  while (i < dir.size()) {
    std::size_t j = dir.find('/', i);
    if (j == std::string::npos) j = dir.size();
    std::string comp = dir.substr(i, j - i);
    constexpr std::uint64_t flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
    constexpr std::uint64_t resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    int fd = openat2_retrying(cur.get(), comp.c_str(), flags, resolve);
    if (fd < 0 && errno == ENOENT && create) {
      if (::mkdirat(cur.get(), comp.c_str(), 0755) == 0) {
        if (created) ++*created;
      } else if (errno != EEXIST) {
        return sys_error(kStage, "create directory " + dir.substr(0, j));
      }
      ::fchmodat(cur.get(), comp.c_str(), 0755, 0);
      fd = openat2_retrying(cur.get(), comp.c_str(), flags, resolve);
    }
    if (fd < 0) {
      int err = errno;
      std::string where = dir.substr(0, j);
      // Built with append: GCC 12 warns falsely (-Wstringop-overflow) about "'" + std::string here.
      if (err == ELOOP || err == ENOTDIR)
        return make_error(kStage,
                          std::string("'").append(where).append(
                              "' is not a directory (a symlink or a file) where the archive puts entries under it"),
                          err);
      return make_error(kStage, "open directory " + where, err);
    }
    cur = UniqueFd(static_cast<int>(fd));
    i = j + 1;
  }
  return cur;
}

void split(const std::string& path, std::string& dir, std::string& base) {
  auto slash = path.rfind('/');
  dir = slash == std::string::npos ? "" : path.substr(0, slash);
  base = slash == std::string::npos ? path : path.substr(slash + 1);
}

// A later archive member replaces an earlier one of the same name (as tar does); within one
// archive a non-empty directory is never replaced by a non-directory, but a layer replaces a
// lower layer's directory tree whole (`replace_trees`).
Status clear_slot(int dirfd, const std::string& base, bool want_dir, bool& dir_exists, const std::string& path,
                  bool replace_trees) {
  dir_exists = false;
  struct stat st;
  if (::fstatat(dirfd, base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return {};
  if (S_ISDIR(st.st_mode)) {
    if (want_dir) {
      dir_exists = true;
      return {};
    }
    if (replace_trees) return remove_at(dirfd, base, path);
    if (::unlinkat(dirfd, base.c_str(), AT_REMOVEDIR) != 0) return sys_error(kStage, "replace directory " + path);
    return {};
  }
  if (::unlinkat(dirfd, base.c_str(), 0) != 0) return sys_error(kStage, "replace " + path);
  return {};
}

const char* tar_special_kind(char flag) {
  switch (flag) {
    case '3': return "char device";
    case '4': return "block device";
    case '6': return "fifo";
    default: return "unsupported entry type";
  }
}

}  // namespace

// The data, plus a header and up to a block of padding per member, plus room for long names (GNU
// 'L' and pax records of 1 KiB per member on average). Saturating: the limits may be huge.
std::int64_t max_archive_bytes(const ImportLimits& limits) {
  const std::int64_t headroom = limits.max_entries > (INT64_MAX - limits.max_bytes) / 3072
                                    ? INT64_MAX - limits.max_bytes
                                    : limits.max_entries * 3072;
  return limits.max_bytes + headroom;
}

std::uint32_t normalise_mode(bool is_dir, std::uint32_t mode) {
  // No setuid/setgid/sticky, no group/other write. Files are read-only even for their owner
  // (the store is never written after import); directories stay owner-writable so that the
  // store can remove them.
  return is_dir ? ((mode & 0755) | 0700) : ((mode & 0555) | 0400);
}

Result<ImportStats> populate_from_dir(const std::string& src, const std::string& staging,
                                      const ImportProgress& progress, const ImportLimits& limits) {
  UniqueFd s(::open(src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (s.get() < 0) return sys_error(kStage, "open directory " + src);
  UniqueFd d(::open(staging.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (d.get() < 0) return sys_error(kStage, "open staging directory " + staging);
  struct stat st;
  if (::fstat(s.get(), &st) != 0) return sys_error(kStage, "stat " + src);
  ::fchmod(d.get(), normalise_mode(true, st.st_mode));
  DirCopier c{progress, limits, d.get(), {}, {}};
  c.stats.owners_carried = limits.carry_owners;
  SBX_TRY(set_owner(limits, c.stats, -1, src, d.get(), st.st_uid, st.st_gid, src));
  SBX_TRY(c.copy_dir(s.get(), d.get(), "", 0));
  return std::move(c.stats);
}

namespace {

// A container image's layer is a change set (OCI image spec, layer.md): a member ".wh.NAME"
// deletes NAME of the layers below, ".wh..wh..opq" empties its directory of what the layers below
// put there (the members of this layer stay), and any member replaces what was at its path, a
// whole directory tree included.
struct LayerRules {
  std::set<std::string> created;  // paths this layer has made so far
};

constexpr std::string_view kWhiteout = ".wh.";
constexpr std::string_view kOpaque = ".wh..wh..opq";

Status apply_whiteout(int root, const std::string& path, LayerRules& layer) {
  std::string dir, base;
  split(path, dir, base);
  if (base == kOpaque) {
    auto parent = open_dir_beneath(root, dir, true);
    if (!parent)
      return make_error(kStage, "opaque whiteout " + path + ": " + parent.error().message, parent.error().err);
    auto names = list_dir(parent->get(), kStage, dir);
    if (!names) return names.error();
    for (auto& name : *names) {
      std::string child = dir.empty() ? name : dir + "/" + name;
      if (!layer.created.count(child)) SBX_TRY(remove_at(parent->get(), name, child));
    }
    return {};
  }
  std::string victim = base.substr(kWhiteout.size());
  if (victim.empty() || victim == "." || victim == "..")
    return make_error(kStage, "whiteout " + path + " names no entry");
  auto parent = open_dir_beneath(root, dir, false);
  if (!parent) {
    if (parent.error().err == ENOENT) return {};  // nothing below to delete
    return make_error(kStage, "whiteout " + path + ": " + parent.error().message, parent.error().err);
  }
  return remove_at(parent->get(), victim, dir.empty() ? victim : dir + "/" + victim);
}

// How one tarball is extracted: as a root file system (no layer), or as a container layer with its
// digest checked on the bytes read; `output_budget` is what the decompressed stream may still
// come to, shared by all the layers of an image (max_archive_bytes()).
struct ExtractOptions {
  LayerRules* layer = nullptr;
  std::string expect_sha256;  // hex, "" for none
  std::int64_t* output_budget = nullptr;
};

// Every ancestor of `path` and `path` itself: what a layer's member makes exist in this layer.
void mark_created(LayerRules& layer, const std::string& path) {
  for (std::size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1))
    layer.created.insert(path.substr(0, slash));
  layer.created.insert(path);
}

// One archive's members written beneath `root`, one at a time (extract_tar reads the archive).
class Extraction {
 public:
  Extraction(int root, ImportStats& stats, const ImportProgress& progress, const ImportLimits& limits,
             LayerRules* layer, TarReader& reader)
      : root_(root), stats_(stats), progress_(progress), limits_(limits), layer_(layer), reader_(reader) {}
  Status member(const TarEntry& e);
  bool stopped_at_limit = false;  // the error came from --max-bytes/--max-entries

 private:
  Status limit(std::int64_t bytes, const std::string& path) {
    auto st = check_limits(limits_, stats_, bytes, path);
    if (!st) stopped_at_limit = true;
    return st;
  }
  Status write(const TarEntry& e, int pfd, const std::string& base, bool dir_exists);
  Status write_file(const TarEntry& e, int pfd, const std::string& base);

  int root_;
  ImportStats& stats_;
  const ImportProgress& progress_;
  const ImportLimits& limits_;
  LayerRules* layer_;
  TarReader& reader_;
  std::vector<char> buf_ = std::vector<char>(1 << 20);
};

Status Extraction::member(const TarEntry& e) {
  if (e.path.empty()) {  // the archive's "./" itself: its mode becomes the root's
    if (e.type == TarEntry::Type::dir) ::fchmod(root_, normalise_mode(true, e.mode));
    return {};
  }
  SBX_TRY(limit(e.type == TarEntry::Type::file ? static_cast<std::int64_t>(e.size) : 0, e.path));
  // A root file system tarball made with `tar -P` is common and its leading "/" harmless; a
  // container layer with one is malformed (the image spec's paths are relative), so refuse it.
  if (layer_ && e.absolute)
    return make_error(kStage, "member " + e.path + " has an absolute name, which a container layer may not have");
  if (layer_ && e.path.substr(e.path.rfind('/') + 1).starts_with(kWhiteout)) {
    SBX_TRY(apply_whiteout(root_, e.path, *layer_));
    ++stats_.whiteouts;
    ++stats_.entries;
    return {};
  }
  if (e.type == TarEntry::Type::other) {
    stats_.dropped.push_back({e.path, tar_special_kind(e.typeflag)});
    return {};
  }
  std::string dir, base;
  split(e.path, dir, base);
  std::int64_t made = 0;
  auto parent = open_dir_beneath(root_, dir, true, &made);
  if (!parent)
    return make_error(kStage, "archive member " + e.path + ": " + parent.error().message, parent.error().err);
  // Directories made implicitly (a member "a/b/c/f" with no "a/" before it) are entries too:
  // one member with a long name must not become a million directories past --max-entries.
  stats_.entries += made;
  if (made > 0) SBX_TRY(limit(0, e.path));
  bool dir_exists = false;
  SBX_TRY(clear_slot(parent->get(), base, e.type == TarEntry::Type::dir, dir_exists, e.path, layer_ != nullptr));
  SBX_TRY(write(e, parent->get(), base, dir_exists));
  ++stats_.entries;
  if (layer_) mark_created(*layer_, e.path);
  if (progress_) progress_("extracting", stats_.entries, stats_.bytes);
  return {};
}

Status Extraction::write(const TarEntry& e, int pfd, const std::string& base, bool dir_exists) {
  switch (e.type) {
    case TarEntry::Type::dir:
      count_mode(stats_, e.mode);
      if (!dir_exists && ::mkdirat(pfd, base.c_str(), 0700) != 0)
        return sys_error(kStage, "create directory " + e.path);
      if (::fchmodat(pfd, base.c_str(), normalise_mode(true, e.mode), 0) != 0)
        return sys_error(kStage, "chmod " + e.path);
      return set_owner(limits_, stats_, pfd, base, -1, e.uid, e.gid, e.path);
    case TarEntry::Type::symlink:
      if (::symlinkat(e.link.c_str(), pfd, base.c_str()) != 0) return sys_error(kStage, "create symlink " + e.path);
      SBX_TRY(set_owner(limits_, stats_, pfd, base, -1, e.uid, e.gid, e.path));
      return set_mtime(pfd, base, e.mtime, 0, e.path);
    case TarEntry::Type::hardlink: {
      std::string tdir, tbase;
      split(e.link, tdir, tbase);
      auto tparent = open_dir_beneath(root_, tdir, false);
      if (!tparent)
        return make_error(kStage, "hard link " + e.path + " to " + e.link + ": " + tparent.error().message,
                          tparent.error().err);
      if (::linkat(tparent->get(), tbase.c_str(), pfd, base.c_str(), 0) != 0)
        return sys_error(kStage, "hard link " + e.path + " to " + e.link);
      return {};
    }
    case TarEntry::Type::file: return write_file(e, pfd, base);
    case TarEntry::Type::other: break;
  }
  return {};
}

Status Extraction::write_file(const TarEntry& e, int pfd, const std::string& base) {
  count_mode(stats_, e.mode);
  UniqueFd out(::openat(pfd, base.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (out.get() < 0) return sys_error(kStage, "create " + e.path);
  for (;;) {
    auto n = reader_.read(buf_.data(), buf_.size());
    if (!n) return n.error();
    if (*n == 0) break;
    SBX_TRY(write_all(out.get(), std::string_view(buf_.data(), *n), e.path));
    stats_.bytes += static_cast<std::int64_t>(*n);
    if (progress_) progress_("extracting", stats_.entries, stats_.bytes);
  }
  SBX_TRY(set_owner(limits_, stats_, -1, e.path, out.get(), e.uid, e.gid, e.path));
  if (::fchmod(out.get(), normalise_mode(false, e.mode)) != 0) return sys_error(kStage, "chmod " + e.path);
  struct timespec ts[2] = {{0, UTIME_OMIT}, {static_cast<time_t>(e.mtime), 0}};
  if (::futimens(out.get(), ts) != 0) return sys_error(kStage, "set mtime of " + e.path);
  return {};
}

Status extract_tar(const std::string& path, int root, ImportStats& stats, const ImportProgress& progress,
                   const ImportLimits& limits, const ExtractOptions& opt) {
  auto tarball = Tarball::open(path);
  if (!tarball) return tarball.error();
  if (!opt.expect_sha256.empty()) tarball->expect_sha256(opt.expect_sha256, "layer " + path);
  std::int64_t own_budget = max_archive_bytes(limits);
  std::int64_t& budget = opt.output_budget ? *opt.output_budget : own_budget;
  tarball->limit_output(budget,
                        "more than --max-bytes of file data and tar headers for --max-entries members could take; "
                        "nothing was stored");
  TarReader reader(*tarball);
  Extraction extraction(root, stats, progress, limits, opt.layer, reader);
  Status failed;
  for (;;) {
    auto next = reader.next();
    if (!next) {
      failed = next.error();
      // Nothing parsed at all: most likely not a tarball (a stray file given by mistake); a first
      // header that is a tar's but describes a member sbx refuses says so itself.
      if (reader.offset() <= 512 && stats.entries == 0 && !reader.header_seen())
        failed = make_error("usage", path + " is neither a directory nor a tar archive (" + next.error().message + ")");
      break;
    }
    if (!*next) break;
    if (failed = extraction.member(**next); !failed) break;
  }
  // A decompressor that failed first explains a "truncated archive" better than the reader can
  // (but one that was stopped by a limit only failed because its reader went away).
  auto finished = tarball->finish();
  budget -= tarball->output_bytes();
  if (extraction.stopped_at_limit) return failed.error();
  if (!finished) return finished.error();
  return failed;
}

Result<UniqueFd> open_staging(const std::string& staging) {
  UniqueFd root(::open(staging.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (root.get() < 0) return sys_error(kStage, "open staging directory " + staging);
  return root;
}

}  // namespace

Result<ImportStats> populate_from_tar(const std::string& path, const std::string& staging,
                                      const ImportProgress& progress, const ImportLimits& limits) {
  auto root = open_staging(staging);
  if (!root) return root.error();
  ImportStats stats;
  stats.owners_carried = limits.carry_owners;
  SBX_TRY(extract_tar(path, root->get(), stats, progress, limits, ExtractOptions{}));
  return stats;
}

Result<ImportStats> apply_layers(const std::vector<std::string>& layers, const std::vector<std::string>& digests,
                                 const std::string& staging, const ImportProgress& progress,
                                 const ImportLimits& limits) {
  auto root = open_staging(staging);
  if (!root) return root.error();
  ImportStats stats;
  stats.owners_carried = limits.carry_owners;
  // One decompression budget for the whole image: a small bomb listed as many layers must not get
  // a fresh one each time.
  std::int64_t budget = max_archive_bytes(limits);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    LayerRules rules;
    ExtractOptions opt;
    opt.layer = &rules;
    opt.output_budget = &budget;
    if (i < digests.size() && digests[i].starts_with("sha256:")) opt.expect_sha256 = digests[i].substr(7);
    if (auto st = extract_tar(layers[i], root->get(), stats, progress, limits, opt); !st) {
      Error e = st.error();
      e.message = "layer " + std::to_string(i + 1) + " of " + std::to_string(layers.size()) + ": " + e.message;
      return e;
    }
  }
  return stats;
}

}  // namespace sbx
