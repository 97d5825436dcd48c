#include "runtime/image/artifact_export.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/openat2.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/base/trace_field.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "export";
constexpr int kMaxDepth = 64;

int open_beneath(int dirfd, const std::string& name, int flags) {
  return openat2_retrying(dirfd, name.c_str(), static_cast<std::uint64_t>(flags | O_NOFOLLOW | O_CLOEXEC),
                          RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV);
}

const char* kind_of(mode_t m) { return S_ISLNK(m) ? "symlink (never followed)" : file_kind(m); }

struct Exporter {
  const ExportCaps& caps;
  ExportResult r;

  void skip(const std::string& rel, std::string reason) {
    ++r.skipped_count;
    if (r.skipped.size() >= kMaxListedSkips || r.skipped_bytes >= kMaxListedSkipBytes) return;
    std::string shown = "/out/" + display_name(rel);
    r.skipped_bytes += shown.size() + reason.size() + 32;
    r.skipped.push_back({std::move(shown), std::move(reason)});
  }

  Status walk(int src, int dst, const std::string& rel, int depth) {
    auto names = list_dir(src, kStage, "/out/" + display_name(rel));
    if (!names) return names.error();
    // Sorted: which entries a cap cuts off does not depend on the file system's order.
    std::sort(names->begin(), names->end());
    for (auto& name : *names) SBX_TRY(entry(src, dst, rel.empty() ? name : rel + "/" + name, name, depth));
    return {};
  }

  Status entry(int src, int dst, const std::string& rel, const std::string& name, int depth) {
    if (!safe_name(name)) return skip(rel, "unsafe name (control or format character, or invalid UTF-8)"), Status{};
    struct stat st;
    if (::fstatat(src, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return sys_error(kStage, "stat /out/" + display_name(rel));
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) return skip(rel, kind_of(st.st_mode)), Status{};
    if (r.entries >= caps.max_files) {
      r.limit_hit = true;
      return skip(rel, "over --output-max-files (" + std::to_string(caps.max_files) + ")"), Status{};
    }
    if (S_ISDIR(st.st_mode)) {
      if (depth >= kMaxDepth)
        return skip(rel, "nested deeper than " + std::to_string(kMaxDepth) + " directories"), Status{};
      UniqueFd sub(open_beneath(src, name, O_RDONLY | O_DIRECTORY));
      if (sub.get() < 0) return skip(rel, std::string("cannot open: ") + std::strerror(errno)), Status{};
      if (::mkdirat(dst, name.c_str(), 0755) != 0)
        return sys_error(kStage, "create " + display_name(rel) + " in the output directory");
      UniqueFd out(::openat(dst, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (out.get() < 0) return sys_error(kStage, "open " + display_name(rel) + " in the output directory");
      ++r.entries;
      return walk(sub.get(), out.get(), rel, depth + 1);
    }
    if (r.bytes + st.st_size > caps.max_bytes) {
      r.limit_hit = true;
      return skip(rel, "over --output-max-bytes (" + std::to_string(st.st_size) + " bytes; " +
                           std::to_string(caps.max_bytes - r.bytes) + " left of " + std::to_string(caps.max_bytes) +
                           ")"),
             Status{};
    }
    UniqueFd in(open_beneath(src, name, O_RDONLY | O_NONBLOCK | O_NOCTTY));
    if (in.get() < 0) return skip(rel, std::string("cannot open: ") + std::strerror(errno)), Status{};
    struct stat fst;
    if (::fstat(in.get(), &fst) != 0 || !S_ISREG(fst.st_mode) || fst.st_ino != st.st_ino)
      return skip(rel, "changed while exporting"), Status{};
    mode_t mode = (st.st_mode & 0111) ? 0755 : 0644;
    UniqueFd out(::openat(dst, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (out.get() < 0) return sys_error(kStage, "create " + display_name(rel) + " in the output directory");
    Sha256 h;
    auto copied = copy_sparse(in.get(), out.get(), st.st_size, h, rel);
    if (!copied) return copied.error();
    ++r.entries;
    r.bytes += *copied;
    ++r.file_count;
    std::string shown = "/out/" + display_name(rel);
    // As the record lists it: {"path":"...","bytes":N,"sha256":"<64 hex>"} and a comma, where only
    // a backslash (display_name's escapes) or a quote in the path takes an extra byte.
    std::size_t cost = shown.size() + 64 + 80;
    for (char ch : shown) cost += ch == '\\' || ch == '"';
    if (r.files.size() < kMaxListedOutputs && r.listed_bytes + cost <= kMaxListedOutputBytes) {
      r.files.push_back({std::move(shown), *copied, h.final_hex()});
      r.listed_bytes += cost;
    } else {
      r.unlisted_file_bytes += *copied;
    }
    return {};
  }

  // Copies `size` bytes at most (the size checked against the cap: the file cannot grow, every
  // writer is dead, and the bound holds even if it could), hashing all of them. Holes stay holes:
  // a sparse file of gigabytes in the 64 MiB /out costs the host only its data (SEEK_DATA /
  // SEEK_HOLE; where the file system lacks them the whole file counts as data). The hash covers
  // the holes' zeros, so it is the hash of the content the program saw.
  // One buffer for the whole export, made at the first file with data: one per file was a 1 MiB
  // allocation and zero fill per file, 100 GB of memset for /out's 100,000 empty files (and,
  // under ASan, whose quarantine keeps freed blocks, a fresh mapping and its faults each time).
  std::vector<char> buf_;
  Result<std::int64_t> copy_sparse(int in, int out, std::int64_t size, Sha256& h, const std::string& rel) {
    if (size > 0 && buf_.empty()) buf_.resize(1 << 20);
    std::vector<char>& buf = buf_;
    std::int64_t at = 0;
    while (at < size) {
      off_t data = ::lseek(in, at, SEEK_DATA);
      if (data < 0) data = errno == ENXIO ? size : at;  // ENXIO: only a hole is left
      data = std::min<off_t>(data, size);
      if (data > at) {  // a hole: the zeros are hashed, nothing is written
        std::fill(buf.begin(), buf.end(), 0);
        for (std::int64_t z = at; z < data;) {
          std::size_t n =
              static_cast<std::size_t>(std::min<std::int64_t>(data - z, static_cast<std::int64_t>(buf.size())));
          h.update(buf.data(), n);
          z += static_cast<std::int64_t>(n);
        }
        at = data;
        continue;
      }
      off_t hole = ::lseek(in, at, SEEK_HOLE);
      if (hole < 0 || hole <= at) hole = size;
      std::size_t want = static_cast<std::size_t>(
          std::min<std::int64_t>(std::min<std::int64_t>(hole, size) - at, static_cast<std::int64_t>(buf.size())));
      ssize_t n = ::pread(in, buf.data(), want, at);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return sys_error(kStage, "read /out/" + display_name(rel));
      if (n == 0) break;  // shrank meanwhile
      h.update(buf.data(), static_cast<std::size_t>(n));
      for (ssize_t off = 0; off < n;) {
        ssize_t w = ::pwrite(out, buf.data() + off, static_cast<std::size_t>(n - off), at + off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return sys_error(kStage, "write " + display_name(rel) + " in the output directory");
        off += w;
      }
      at += n;
    }
    // A trailing hole: the size without the blocks.
    if (::ftruncate(out, at) != 0) return sys_error(kStage, "size " + display_name(rel) + " in the output directory");
    return at;
  }
};

}  // namespace

bool safe_name(const std::string& raw) {
  for (std::size_t i = 0; i < raw.size();) {
    unsigned char c = static_cast<unsigned char>(raw[i]);
    if (c < 0x20 || c == 0x7f) return false;
    std::size_t n = utf8_len(raw, i);
    // C1 controls and direction overrides are valid UTF-8, and a terminal acts on them as on C0.
    if (n == 0 || format_control_at(raw, i, n)) return false;
    i += n;
  }
  return true;
}

std::string display_name(const std::string& raw) {
  std::string out;
  for (std::size_t i = 0; i < raw.size();) {
    unsigned char c = static_cast<unsigned char>(raw[i]);
    std::size_t n = utf8_len(raw, i);
    std::uint32_t cp = 0;
    if (n == 0 || c < 0x20 || c == 0x7f || c == '\\') {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
      ++i;
    } else if (format_control_at(raw, i, n, &cp)) {  // as printable() shows it
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
      i += n;
    } else {
      out.append(raw, i, n);
      i += n;
    }
  }
  return out;
}

Status prepare_export_dir(const std::string& dir, bool create) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return sys_error("usage", "--output " + dir);
    if (!create) {
      auto slash = dir.find_last_of('/', dir.find_last_not_of('/'));
      std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
      if (::access(parent.c_str(), W_OK | X_OK) != 0) return sys_error("usage", "--output: cannot create " + dir);
      return {};
    }
    if (::mkdir(dir.c_str(), 0755) != 0) return sys_error("usage", "--output: cannot create " + dir);
    return {};
  }
  if (!S_ISDIR(st.st_mode))
    return make_error("usage",
                      "--output " + dir + " exists and is not a directory (sbx creates it, or uses an empty one)");
  DIR* d = ::opendir(dir.c_str());
  if (!d) return sys_error("usage", "--output " + dir);
  bool empty = true;
  while (auto* de = ::readdir(d)) {
    std::string n = de->d_name;
    if (n != "." && n != "..") empty = false;
  }
  ::closedir(d);
  if (!empty)
    return make_error("usage",
                      "--output " + dir + " is not empty (sbx never overwrites: give a new or empty directory)");
  return {};
}

Result<ExportResult> export_out(int out_fd, const std::string& dir, const ExportCaps& caps) {
  UniqueFd src(::openat(out_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (src.get() < 0) return sys_error(kStage, "open /out");
  UniqueFd dst(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dst.get() < 0) return sys_error(kStage, "open the output directory " + dir);
  Exporter e{caps, {}, {}};
  SBX_TRY(e.walk(src.get(), dst.get(), "", 0));
  return std::move(e.r);
}

nlohmann::json ExportResult::to_json(const std::string& dir, const ExportCaps& caps) const {
  nlohmann::json skips = nlohmann::json::array();
  for (auto& s : skipped)
    skips.push_back(trace_object({{"export/skipped/[]/path", s.path}, {"export/skipped/[]/reason", s.reason}}));
  cut_list(skips, kMaxListedSkips, kMaxListedSkipBytes);
  bool cut = static_cast<std::int64_t>(skips.size()) < skipped_count;
  return trace_object({{"export/dir", dir},
                       {"export/files", file_count},
                       {"export/entries", entries},
                       {"export/bytes", bytes},
                       {"export/max_bytes", caps.max_bytes},
                       {"export/max_files", caps.max_files},
                       {"export/limit_hit", limit_hit},
                       {"export/skipped_count", skipped_count},
                       {"export/skipped_truncated", cut},  // skipped lists fewer than skipped_count
                       {"export/skipped", skips}});
}

OutFile read_out_file(int out_fd, const std::string& name, std::int64_t cap) {
  OutFile f;
  UniqueFd fd(open_beneath(out_fd, name, O_RDONLY | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) {
    if (errno != ENOENT) {
      f.present = true;
      f.problem =
          errno == ELOOP ? "is a symlink (not followed)" : std::string("cannot be opened: ") + std::strerror(errno);
    }
    return f;
  }
  f.present = true;
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    f.problem = "is not a regular file";
    return f;
  }
  f.size = st.st_size;
  if (st.st_size > cap) {  // not read at all (a sparse file can claim any size)
    f.too_big = true;
    f.problem = "is larger than " + std::to_string(cap) + " bytes";
    return f;
  }
  Sha256 h;
  std::vector<char> buf(1 << 16);
  std::int64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      f.problem = std::string("cannot be read: ") + std::strerror(errno);
      return f;
    }
    if (n == 0) break;
    h.update(buf.data(), static_cast<std::size_t>(n));
    total += n;
    if (total > cap) {
      f.too_big = true;
      f.problem = "is larger than " + std::to_string(cap) + " bytes";
      f.bytes.clear();
      return f;
    }
    f.bytes.append(buf.data(), static_cast<std::size_t>(n));
  }
  f.size = total;
  f.sha256 = h.final_hex();
  return f;
}

}  // namespace sbx
