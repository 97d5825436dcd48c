#include "runtime/image/blob_store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/trace_field.hpp"
#include "runtime/record/trace_ledger.hpp"
#include "runtime/base/units.hpp"

namespace sbx {
namespace {
using nlohmann::json;
constexpr const char* kStage = "blobs";
// How long a put or a gc waits for the store's lock (StoreLock below) before it says so.
constexpr long kStoreLockWaitMs = 60'000;

std::string mode_text(unsigned mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

// Reads all of fd, at most `max` bytes (more is an error: the caller checked the size first, so
// a file that grew since is refused rather than kept truncated).
// The store's lock, <blobs>/lock (flock, as the ledger's appends; trace_ledger.cpp): a keeper
// holds it shared for one put_blob, `sbx gc` exclusively from its first look at the blobs to its
// last delete. Without it a gc could read a reused blob's old mtime, the put then refresh it
// (a run keeping the same profile text again) and the gc delete it all the same: the run's record
// would name a blob that is gone. Two gc's run one after the other. A put waits out a gc (which
// reads the ledger once and deletes), never the other way round for long: a put is short.
class StoreLock {
 public:
  static Result<StoreLock> acquire(const Dirs& dirs, int how) {
    std::string dir = blobs_dir(dirs);
    SBX_TRY(ensure_dir(dir, 0700));
    std::string path = dir + "/lock";
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.ok()) return sys_error(kStage, "open the blob store's lock " + path);
    int e = flock_waiting(fd.get(), how, kStoreLockWaitMs);
    if (e == 0) return StoreLock(std::move(fd));
    if (e != EWOULDBLOCK) return make_error(kStage, "lock the blob store " + path, e);
    return make_error(kStage,
                      "the blob store " + dir + " is locked by another process for over " +
                          std::to_string(kStoreLockWaitMs / 1000) + " s (a stuck sbx gc?)",
                      EWOULDBLOCK);
  }

  // The exclusive lock if nobody holds the store's lock now, without waiting; nullopt otherwise.
  static std::optional<StoreLock> try_exclusive(const Dirs& dirs) {
    std::string path = blobs_dir(dirs) + "/lock";
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.ok() || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return std::nullopt;
    return StoreLock(std::move(fd));
  }

 private:
  explicit StoreLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;  // closing it releases the flock
};

// <blobs>/tmp holds a writer's temporary file only while it holds the store's lock (put_blob):
// with the lock held exclusively, whatever is there was left by a writer that was killed.
// Removes those files (at most kMaxListed of them per call: the rest go next time); returns how
// many and their bytes.
std::pair<std::size_t, std::int64_t> remove_abandoned_tmp(const Dirs& dirs, const StoreLock&) {
  constexpr std::size_t kMaxListed = 100000;
  std::string dir = blobs_dir(dirs) + "/tmp";
  std::size_t n = 0;
  std::int64_t bytes = 0;
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return {0, 0};
  std::unique_ptr<DIR, int (*)(DIR*)> d(::fdopendir(fd), ::closedir);
  if (!d) {
    ::close(fd);
    return {0, 0};
  }
  std::size_t seen = 0;
  while (auto* e = ::readdir(d.get())) {
    if (++seen > kMaxListed) break;
    std::string name = e->d_name;
    if (name.rfind("blob.", 0) != 0) continue;  // only what put_blob names so
    struct stat st;
    if (::fstatat(::dirfd(d.get()), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::unlinkat(::dirfd(d.get()), name.c_str(), 0) == 0) {
      ++n;
      bytes += st.st_size;
    }
  }
  return {n, bytes};
}

// Once per process, before its first put: if the store is not locked at all (no put, no gc under
// way), what killed writers left in tmp goes now, cheaply (an empty directory is one getdents).
void sweep_tmp_once(const Dirs& dirs) {
  static std::atomic<bool> swept{false};
  if (swept.exchange(true)) return;
  if (auto ex = StoreLock::try_exclusive(dirs)) remove_abandoned_tmp(dirs, *ex);
}

// RFC 3339 UTC with milliseconds, the form of a record's started_at (string order is time order).
std::string rfc3339_at(std::time_t t) {
  struct tm tm {};
  ::gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S.000Z", &tm);
  return buf;
}
}  // namespace

std::string blobs_dir(const Dirs& dirs) { return dirs.state + "/blobs"; }

std::string blob_path(const Dirs& dirs, std::string_view hex) {
  std::string h(hex);
  return blobs_dir(dirs) + "/sha256/" + h.substr(0, 2) + "/" + h;
}

Result<std::int64_t> keep_ceiling() {
  const char* v = std::getenv("SBX_KEEP_MAX_BYTES");
  if (!v || !*v) return kDefaultKeepMax;
  auto n = parse_size_bytes(v);
  if (!n) return make_error("usage", std::string("SBX_KEEP_MAX_BYTES: ") + n.error().message);
  return *n;
}

BlobPin::~BlobPin() {
  // The record (if the run got one) names the blobs from now on. Unlinked first: a gc that
  // already opened it sees it locked until the close below, then stale.
  if (!path_.empty()) ::unlink(path_.c_str());
}

Status BlobPin::add(const Dirs& dirs, const std::string& hex) {
  if (all_) return {};
  if (!fd_.ok()) {
    // Created under the store's lock (the caller holds it shared): a gc, which holds it
    // exclusively, never sees the file before its flock is taken.
    std::string dir = blobs_dir(dirs) + "/pins";
    SBX_TRY(ensure_dir(dir, 0700));
    std::string tmpl = dir + "/pin.XXXXXX";
    int fd = ::mkostemp(tmpl.data(), O_CLOEXEC | O_APPEND);
    if (fd < 0) return sys_error(kStage, "create a pin in " + dir);
    UniqueFd guard(fd);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::unlink(tmpl.c_str());
      return sys_error(kStage, "lock the pin " + tmpl);
    }
    fd_ = std::move(guard);
    path_ = tmpl;
  }
  std::string line = hex + "\n";
  if (bytes_ + static_cast<std::int64_t>(line.size()) > kMaxPinBytes - 2) {
    line = "*\n";  // past the bound: every blob of the store is pinned while this run goes on
    all_ = true;
  }
  if (auto st = write_all(fd_.get(), line, path_); !st) return st;
  bytes_ += static_cast<std::int64_t>(line.size());
  return {};
}

Result<std::string> put_blob(const Dirs& dirs, std::string_view bytes, BlobPin* pin) {
  sweep_tmp_once(dirs);
  auto lock = StoreLock::acquire(dirs, LOCK_SH);
  if (!lock) return lock.error();
  std::string hex = sha256_hex(bytes);
  std::string path = blob_path(dirs, hex);
  struct stat st;
  // Already there (same name, same content by construction): nothing to write. A file of the
  // wrong size under that name is a damaged blob, replaced below.
  // Its mtime is brought to now: `sbx gc` spares every blob written or reused in the last hour
  // (a run may keep a blob, then be recorded only after gc has read the ledger), and a reused one
  // (the same profile text in every run) would otherwise look as old as its first write.
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == static_cast<off_t>(bytes.size())) {
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
    if (pin) SBX_TRY(pin->add(dirs, hex));  // under the lock: a gc sees the pin or runs after us
    return hex;
  }
  std::string tmpdir = blobs_dir(dirs) + "/tmp";
  SBX_TRY(ensure_dir(tmpdir, 0700));
  std::string dir = path.substr(0, path.rfind('/'));
  SBX_TRY(ensure_dir(dir, 0700));
  std::string tmpl = tmpdir + "/blob.XXXXXX";
  int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) return sys_error(kStage, "create a temporary file in " + tmpdir);
  UniqueFd guard(fd);
  auto fail = [&](Error e) -> Result<std::string> {
    ::unlink(tmpl.c_str());
    return e;
  };
  if (::fchmod(fd, 0400) != 0) return fail(sys_error(kStage, "chmod " + tmpl));
  if (auto st2 = write_all(fd, bytes, tmpl); !st2) return fail(st2.error());
  if (::fsync(fd) != 0) return fail(sys_error(kStage, "fsync " + tmpl));
  // Same file system (both under <blobs>): the rename is atomic, and a concurrent writer of the
  // same blob wrote the same bytes.
  if (::rename(tmpl.c_str(), path.c_str()) != 0) return fail(sys_error(kStage, "rename to " + path));
  if (UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); dfd.ok()) ::fsync(dfd.get());
  if (pin) SBX_TRY(pin->add(dirs, hex));
  return hex;
}

Result<std::string> get_blob(const Dirs& dirs, std::string_view hex, std::int64_t max_bytes) {
  if (!is_sha256_hex(hex)) return make_error(kStage, "'" + std::string(hex) + "' is not a sha256 digest");
  std::string path = blob_path(dirs, hex);
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return sys_error(kStage, "blob sha256:" + std::string(hex) + " (" + path + ")");
  UniqueFd guard(fd);
  auto data = read_bounded_fd(fd, static_cast<std::size_t>(std::max<std::int64_t>(max_bytes, 0)), kStage, path);
  if (!data) return data.error();
  if (sha256_hex(*data) != hex)
    return make_error(kStage, "blob sha256:" + std::string(hex) + " (" + path +
                                  ") does not hold the bytes of its name: it was changed");
  return data;
}

namespace {
// An entry of the record's blobs that was not kept: its role, its path and why.
json skipped_entry(const std::string& role, const std::string& path, const std::string& why) {
  return trace_object({{"blobs/[]/role", role}, {"blobs/[]/path", path}, {"blobs/[]/skipped", why}});
}
}  // namespace

bool BlobKeeper::over_total(const std::string& role, const std::string& path, std::int64_t bytes) {
  if (total_ + bytes <= max_total_) return false;
  entries_.push_back(
      trace_object({{"blobs/[]/role", role},
                    {"blobs/[]/path", path},
                    {"blobs/[]/bytes", bytes},
                    {"blobs/[]/skipped", "the run's kept blobs would pass " + format_size(max_total_) + " in all"}}));
  return true;
}

void BlobKeeper::add_bytes(const std::string& role, const std::string& path, std::string_view bytes) {
  auto n = static_cast<std::int64_t>(bytes.size());
  if (n > max_) {
    entries_.push_back(trace_object(
        {{"blobs/[]/role", role},
         {"blobs/[]/path", path},
         {"blobs/[]/bytes", n},
         {"blobs/[]/sha256", sha256_hex(bytes)},
         {"blobs/[]/skipped", "larger than the keep ceiling of " + format_size(max_) + " (SBX_KEEP_MAX_BYTES)"}}));
    return;
  }
  if (over_total(role, path, n)) return;
  auto hex = put_blob(dirs_, bytes, pin_.get());
  if (!hex) {
    entries_.push_back(trace_object({{"blobs/[]/role", role},
                                     {"blobs/[]/path", path},
                                     {"blobs/[]/bytes", n},
                                     {"blobs/[]/skipped", hex.error().describe()}}));
    return;
  }
  total_ += n;
  entries_.push_back(trace_object(
      {{"blobs/[]/role", role}, {"blobs/[]/path", path}, {"blobs/[]/sha256", *hex}, {"blobs/[]/bytes", n}}));
}

void BlobKeeper::add_fd(const std::string& role, const std::string& path, int fd, unsigned mode) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    entries_.push_back(skipped_entry(role, path, "fstat failed"));
    return;
  }
  json e = trace_object({{"blobs/[]/role", role},
                         {"blobs/[]/path", path},
                         {"blobs/[]/bytes", static_cast<std::int64_t>(st.st_size)},
                         {"blobs/[]/mode", mode_text(mode)}});
  if (st.st_size > max_) {
    put(e, "blobs/[]/skipped", "larger than the keep ceiling of " + format_size(max_) + " (SBX_KEEP_MAX_BYTES)");
    entries_.push_back(e);
    return;
  }
  if (over_total(role, path, st.st_size)) return;
  // Bounded again: a file that grew past the ceiling after the fstat above is refused whole.
  auto data = read_bounded_fd(fd, static_cast<std::size_t>(max_), kStage, path);
  if (!data) {
    put(e, "blobs/[]/skipped", data.error().describe());
    entries_.push_back(e);
    return;
  }
  auto hex = put_blob(dirs_, *data, pin_.get());
  if (!hex) {
    put(e, "blobs/[]/skipped", hex.error().describe());
    entries_.push_back(e);
    return;
  }
  total_ += static_cast<std::int64_t>(data->size());
  put(e, "blobs/[]/sha256", *hex);
  put(e, "blobs/[]/bytes", static_cast<std::int64_t>(data->size()));
  entries_.push_back(e);
  if (on_kept) on_kept(++kept_files_, total_);
}

void BlobKeeper::add_file(const std::string& role, const std::string& path, const std::string& host_path) {
  // O_NOFOLLOW: a symlink given as an input is refused here rather than kept as whatever it
  // points to (the sandbox's bind would resolve it, but the record keeps what was named).
  int fd = ::open(host_path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    entries_.push_back(skipped_entry(role, path, std::string("open: ") + std::strerror(errno)));
    return;
  }
  UniqueFd guard(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    entries_.push_back(skipped_entry(role, path, std::string("not a regular file: ") + file_kind(st.st_mode)));
    return;
  }
  add_fd(role, path, fd, st.st_mode);
}

void BlobKeeper::add_tree(const std::string& file_role, const std::string& dir_role, const std::string& link_role,
                          const std::string& prefix, const std::string& host_dir) {
  int root = ::open(host_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (root < 0) {
    entries_.push_back(skipped_entry(dir_role, prefix, std::string("open: ") + std::strerror(errno)));
    return;
  }
  // Depth-first through directory fds (openat with O_NOFOLLOW): a symlink anywhere in the tree
  // is listed, never followed, so nothing outside the tree is read.
  struct Dir {
    UniqueFd fd;
    std::string rel;
    int depth;
  };
  std::vector<Dir> stack;
  stack.push_back({UniqueFd(root), "", 0});
  std::size_t seen = 0;
  while (!stack.empty()) {
    Dir d = std::move(stack.back());
    stack.pop_back();
    auto names = list_dir(d.fd.get(), kStage, host_dir + (d.rel.empty() ? "" : "/" + d.rel));
    if (!names) {
      entries_.push_back(skipped_entry(dir_role, prefix + d.rel, names.error().describe()));
      continue;
    }
    std::sort(names->begin(), names->end());
    for (auto& name : *names) {
      std::string rel = d.rel.empty() ? name : d.rel + "/" + name;
      std::string path = prefix.empty() ? rel : prefix + "/" + rel;
      if (++seen > 100000) {
        entries_.push_back(skipped_entry(dir_role, prefix, "more than 100000 entries: the rest is not kept"));
        return;
      }
      struct stat st;
      if (::fstatat(d.fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        entries_.push_back(skipped_entry(file_role, path, std::string("stat: ") + std::strerror(errno)));
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        entries_.push_back(trace_object(
            {{"blobs/[]/role", dir_role}, {"blobs/[]/path", path}, {"blobs/[]/mode", mode_text(st.st_mode)}}));
        if (d.depth >= 64) {
          entries_.push_back(skipped_entry(dir_role, path, "deeper than 64 levels"));
          continue;
        }
        int sub = ::openat(d.fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) {
          entries_.push_back(skipped_entry(dir_role, path, std::string("open: ") + std::strerror(errno)));
          continue;
        }
        stack.push_back({UniqueFd(sub), rel, d.depth + 1});
      } else if (S_ISREG(st.st_mode)) {
        int fd = ::openat(d.fd.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
          entries_.push_back(skipped_entry(file_role, path, std::string("open: ") + std::strerror(errno)));
          continue;
        }
        UniqueFd guard(fd);
        add_fd(file_role, path, fd, st.st_mode);
      } else if (S_ISLNK(st.st_mode)) {
        char target[4097];
        ssize_t n = ::readlinkat(d.fd.get(), name.c_str(), target, sizeof target - 1);
        if (n < 0 || n >= static_cast<ssize_t>(sizeof target - 1))
          entries_.push_back(skipped_entry(link_role, path, "unreadable or overlong symlink"));
        else
          entries_.push_back(trace_object({{"blobs/[]/role", link_role},
                                           {"blobs/[]/path", path},
                                           {"blobs/[]/target", std::string(target, static_cast<std::size_t>(n))}}));
      } else {
        entries_.push_back(
            skipped_entry(file_role, path, std::string("a ") + file_kind(st.st_mode) + " is never followed nor kept"));
      }
    }
  }
}

namespace {

// A record that needs a blob: its run id and start; `kept` when it is within --keep-days.
struct Need {
  std::string run_id, started_at;
  bool kept = false;
};
using Needs = std::map<std::string, std::vector<Need>>;  // by blob hex, newest record last (ledger order)

struct Blob {
  std::string hex, path;
  std::int64_t bytes = 0;
  std::time_t mtime = 0;
};

// Which records need each blob, from the whole ledger.
Result<Needs> blob_needs(const Dirs& dirs, const std::string& cutoff, GcReport& rep, std::uint64_t& torn) {
  Needs needs;
  auto scanned = scan_ledger(
      dirs,
      [&](const LedgerLine& line) {
    auto entry = parse_ledger_line(line.text);
    if (!entry) {
      rep.warnings.push_back("ledger line " + std::to_string(line.line_no) + ": " + entry.error().message);
      return true;
    }
    ++rep.records;
    ParsedJson p = parse_json(entry->record, {kMaxTraceBytes});
    if (!p.ok() || !p.value.is_object()) return true;
    std::string started = p.value.value("started_at", std::string());
    bool kept = cutoff.empty() || started >= cutoff;
    if (kept) ++rep.kept_records;
    auto it = p.value.find("blobs");
    if (it == p.value.end() || !it->is_array()) return true;
    for (auto& b : *it) {
      if (!b.is_object() || !b.contains("sha256") || b.contains("skipped") || !b["sha256"].is_string()) continue;
      needs[b["sha256"].get<std::string>()].push_back({entry->run_id, started, kept});
    }
    return true;
      },
      &torn, 0, 1,
      [&](const OversizeLine& line) {
    // Its record cannot be read by any reader (replay included), so what it names is not known:
    // the blobs only it needs are treated as unneeded, and the line is named.
    rep.warnings.push_back(describe_oversize(line) + ": skipped; blobs only its record needed are not kept for it");
    return true;
  });
  // Without the whole ledger it cannot be known which blobs are needed: delete nothing.
  if (!scanned)
    return make_error(kStage, "cannot read the ledger, so nothing is deleted: " + scanned.error().describe());
  return needs;
}

using DirStream = std::unique_ptr<DIR, int (*)(DIR*)>;

// The blobs on disk: regular files named by their hex under sha256/<first two hex digits>/.
std::vector<Blob> present_blobs(const std::string& root) {
  std::vector<Blob> present;
  DirStream top(::opendir(root.c_str()), ::closedir);
  if (!top) return present;
  while (auto* e = ::readdir(top.get())) {
    std::string sub = e->d_name;
    if (sub.size() != 2) continue;
    std::string subdir = root + "/" + sub;
    DirStream d(::opendir(subdir.c_str()), ::closedir);
    if (!d) continue;
    while (auto* f = ::readdir(d.get())) {
      std::string name = f->d_name;
      if (!is_sha256_hex(name) || name.compare(0, 2, sub) != 0) continue;
      struct stat st;
      if (::lstat((subdir + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      present.push_back({name, subdir + "/" + name, static_cast<std::int64_t>(st.st_size), st.st_mtime});
    }
  }
  return present;
}

// What the live pins hold (BlobPin): the blobs of runs still going, not yet in any record.
struct Pinned {
  std::set<std::string> hex;
  bool all = false;  // a pin past its bound ("*"): every blob is pinned
};

// Reads every pin under <blobs>/pins. One whose flock can be taken belongs to no live process
// (the kernel released it with the process): removed, unless a dry run. A live one is read
// whole (bounded by kMaxPinBytes; past it, or unreadable, it pins everything: deleting what a
// running sandbox kept is the one mistake gc must not make).
Result<Pinned> read_pins(const Dirs& dirs, bool dry_run, GcReport& rep) {
  constexpr std::size_t kMaxPins = 100000;
  Pinned pinned;
  std::string dir = blobs_dir(dirs) + "/pins";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) {
    if (errno == ENOENT) return pinned;
    return make_error(
        kStage,
        "cannot read the pins of running sandboxes in " + dir + ", so nothing is deleted: " + std::strerror(errno),
        errno);
  }
  DirStream d(::fdopendir(dfd), ::closedir);
  if (!d) {
    ::close(dfd);
    return sys_error(kStage, "read " + dir);
  }
  std::size_t seen = 0;
  while (auto* e = ::readdir(d.get())) {
    std::string name = e->d_name;
    if (name.rfind("pin.", 0) != 0) continue;
    if (++seen > kMaxPins)
      return make_error(kStage,
                        "more than " + std::to_string(kMaxPins) + " pins in " + dir +
                            ", so nothing is deleted: remove the stale ones (no sbx running) and run gc again",
                        E2BIG);
    UniqueFd fd(::openat(::dirfd(d.get()), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd.ok()) continue;  // removed meanwhile: its run ended
    if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) {
      ++rep.stale_pins;
      if (!dry_run) ::unlinkat(::dirfd(d.get()), name.c_str(), 0);
      continue;
    }
    ++rep.live_pins;
    auto text = read_bounded_fd(fd.get(), static_cast<std::size_t>(kMaxPinBytes), kStage, dir + "/" + name);
    if (!text) {
      rep.warnings.push_back("pin " + name + ": " + text.error().describe() + ": every blob is kept");
      pinned.all = true;
      continue;
    }
    std::size_t pos = 0;
    while (pos < text->size()) {
      std::size_t nl = text->find('\n', pos);
      std::string line = text->substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      pos = nl == std::string::npos ? text->size() : nl + 1;
      if (line == "*") pinned.all = true;
      else if (is_sha256_hex(line)) pinned.hex.insert(line);
    }
  }
  return pinned;
}

std::string newest_kept_start(const std::vector<Need>& v) {
  std::string s;
  for (auto& n : v)
    if (n.kept) s = std::max(s, n.started_at);
  return s;
}

// One collection: each blob judged, deleted (unless a dry run) or kept, with why.
class Collection {
 public:
  Collection(GcReport& rep, const Needs& needs, const Pinned& pinned, bool dry_run, int keep_days)
      : rep_(rep), needs_(needs), pinned_(pinned), dry_run_(dry_run), keep_days_(keep_days) {}
  void judge(const Blob& b);
  void trim(std::int64_t max_bytes);

 private:
  void remove(const Blob& b, std::string why, bool needed);
  void keep(const Blob& b, std::string why, bool needed) {
    rep_.kept.push_back({b.hex, b.bytes, std::move(why), needed});
    rep_.kept_bytes += b.bytes;
  }

  GcReport& rep_;
  const Needs& needs_;
  const Pinned& pinned_;
  const bool dry_run_;
  const int keep_days_;
  const std::time_t now_ = std::time(nullptr);
  std::vector<std::pair<Blob, std::string>> candidates_;  // kept so far, with the newest kept run needing it
};

void Collection::remove(const Blob& b, std::string why, bool needed) {
  if (!dry_run_ && ::unlink(b.path.c_str()) != 0 && errno != ENOENT) {
    rep_.warnings.push_back("cannot delete " + b.path + ": " + std::strerror(errno));
    keep(b, "could not be deleted", needed);
    return;
  }
  rep_.deleted.push_back({b.hex, b.bytes, std::move(why), needed});
  rep_.deleted_bytes += b.bytes;
}

void Collection::judge(const Blob& b) {
  if (pinned_.all || pinned_.hex.count(b.hex)) {
    keep(b, "pinned by a running sandbox (its record is not written yet)", false);
    return;
  }
  auto it = needs_.find(b.hex);
  if (it == needs_.end()) {
    if (now_ - b.mtime < 3600)
      keep(b, "named by no record yet, written in the last hour (a run may still record it)", false);
    else remove(b, "named by no record", false);
    return;
  }
  const Need* newest_kept = nullptr;
  for (auto& n : it->second)
    if (n.kept && (!newest_kept || n.started_at > newest_kept->started_at)) newest_kept = &n;
  if (!newest_kept && now_ - b.mtime < 3600) {
    // Only old records name it, but a run kept it within the hour (put_blob): one that may be
    // recorded after this scan of the ledger.
    keep(b, "kept by a run in the last hour (it may not be recorded yet)", false);
    return;
  }
  if (!newest_kept) {
    remove(b,
           "needed only by runs older than " + std::to_string(keep_days_) +
               " day(s) (newest: " + it->second.back().run_id + ")",
           false);
    return;
  }
  std::string why = "needed by kept run " + newest_kept->run_id;
  if (it->second.size() > 1) why += " (and " + std::to_string(it->second.size() - 1) + " other record(s))";
  candidates_.push_back({b, why});
  rep_.kept_bytes += b.bytes;
}

// Over --max-bytes: the blobs whose newest kept run is oldest go first, and say whose replay
// they take away.
void Collection::trim(std::int64_t max_bytes) {
  std::sort(candidates_.begin(), candidates_.end(), [&](auto& a, auto& b) {
    return newest_kept_start(needs_.at(a.first.hex)) < newest_kept_start(needs_.at(b.first.hex));
  });
  for (auto& [b, why] : candidates_) {
    if (max_bytes >= 0 && rep_.kept_bytes > max_bytes) {
      rep_.kept_bytes -= b.bytes;
      remove(b,
             "over --max-bytes " + format_size(max_bytes) + ", although " +
                 why.substr(std::string("needed by ").size()) + " needs it: that run can no longer be replayed",
             true);
    } else {
      rep_.kept.push_back({b.hex, b.bytes, why, true});
    }
  }
}

}  // namespace

Result<GcReport> gc_blobs(const Dirs& dirs, int keep_days, std::int64_t max_bytes, bool dry_run) {
  GcReport rep;
  // Held before the ledger is read: a blob put after this point is either seen with its fresh
  // mtime (spared for the hour) or put after every delete. A dry run deletes nothing and shares it.
  std::optional<StoreLock> lock;
  if (struct stat st; ::stat(blobs_dir(dirs).c_str(), &st) == 0) {  // no store: nothing to delete, nothing made
    auto l = StoreLock::acquire(dirs, dry_run ? LOCK_SH : LOCK_EX);
    if (!l) return l.error();
    lock.emplace(std::move(*l));
  }
  // The pins before the ledger: a run whose pin is gone by now had stored its record before
  // releasing it, so the ledger read next names its blobs; one whose pin is read here is kept.
  auto pinned = read_pins(dirs, dry_run, rep);
  if (!pinned) return pinned.error();
  // With the lock held exclusively no put is under way: tmp holds only what killed writers left.
  if (lock && !dry_run) std::tie(rep.tmp_removed, rep.tmp_bytes) = remove_abandoned_tmp(dirs, *lock);
  std::string cutoff =
      keep_days < 0 ? "" : rfc3339_at(std::time(nullptr) - static_cast<std::time_t>(keep_days) * 86400);
  std::uint64_t torn = 0;
  auto needs = blob_needs(dirs, cutoff, rep, torn);
  if (!needs) return needs.error();
  Collection collection(rep, *needs, *pinned, dry_run, keep_days);
  for (auto& b : present_blobs(blobs_dir(dirs) + "/sha256")) collection.judge(b);
  collection.trim(max_bytes);
  if (torn)
    rep.warnings.push_back("the ledger ends in a torn append of " + std::to_string(torn) +
                           " bytes (see sbx trace verify)");
  return rep;
}

}  // namespace sbx
