#include "runtime/image/image_manifest.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/bytes.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "image";

std::string join(const std::string& dir, const std::string& name) { return dir.empty() ? name : dir + "/" + name; }

struct Walker {
  const ScanOptions& opts;
  TreeScan scan;
  std::int64_t bytes_seen = 0;  // files hashed so far, and the part of the current one

  Status walk(int dirfd, const std::string& rel, std::size_t depth) {
    if (depth > kMaxTreeDepth)
      return make_error(kStage, rel + " is more than " + std::to_string(kMaxTreeDepth) + " directories deep");
    auto names = list_dir(dirfd, kStage, rel.empty() ? "." : rel);
    if (!names) return names.error();
    for (auto& name : *names) SBX_TRY(visit(dirfd, rel, name, depth));
    return {};
  }

  Status visit(int dirfd, const std::string& rel, const std::string& name, std::size_t depth) {
    std::string path = join(rel, name);
    struct stat st;
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return sys_error(kStage, "stat " + path);
    TreeEntry e;
    e.path = path;
    e.mode = st.st_mode & 07777;
    e.uid = st.st_uid;
    e.gid = st.st_gid;
    if (S_ISDIR(st.st_mode)) {
      e.type = TreeEntry::Type::dir;
      scan.entries.push_back(e);
      UniqueFd sub(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub.get() < 0) return sys_error(kStage, "open directory " + path);
      return walk(sub.get(), path, depth + 1);
    }
    if (S_ISLNK(st.st_mode)) {
      e.type = TreeEntry::Type::symlink;
      std::string target(static_cast<std::size_t>(st.st_size) + 1, '\0');
      ssize_t n = ::readlinkat(dirfd, name.c_str(), target.data(), target.size());
      if (n < 0) return sys_error(kStage, "readlink " + path);
      target.resize(static_cast<std::size_t>(n));
      e.size = n;
      e.content = std::move(target);
      scan.entries.push_back(std::move(e));
      return {};
    }
    if (!S_ISREG(st.st_mode)) {
      scan.skipped.push_back({path, file_kind(st.st_mode)});
      return {};
    }
    e.type = TreeEntry::Type::file;
    e.size = st.st_size;
    if (opts.hash) {
      // O_NONBLOCK: should the entry have become a FIFO since fstatat, open must not hang.
      UniqueFd f(::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
      if (f.get() < 0) return sys_error(kStage, "open " + path);
      struct stat fst;
      if (::fstat(f.get(), &fst) != 0 || !S_ISREG(fst.st_mode))
        return make_error(kStage, path + " changed during the scan");
      std::int64_t bytes = 0;
      auto h = sha256_fd(f.get(), &bytes, [&](std::int64_t n) {
        bytes_seen += n;
        if (opts.progress) opts.progress(static_cast<std::int64_t>(scan.entries.size()), bytes_seen);
      });
      if (!h) return make_error(kStage, "read " + path, h.error().err);
      e.size = bytes;
      e.content = std::move(*h);
    }
    scan.bytes += e.size;
    scan.entries.push_back(std::move(e));
    if (opts.progress) opts.progress(static_cast<std::int64_t>(scan.entries.size()), bytes_seen);
    return {};
  }
};

}  // namespace

std::string manifest_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : bytes_of(s)) {
    if (c <= 0x20 || c >= 0x7f || c == '\\') {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string manifest_line(const TreeEntry& e) {
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", e.mode & 07777);
  const char* type = e.type == TreeEntry::Type::file ? "file" : e.type == TreeEntry::Type::dir ? "dir" : "symlink";
  std::string content = e.type == TreeEntry::Type::dir       ? "-"
                        : e.type == TreeEntry::Type::symlink ? manifest_escape(e.content)
                                                             : e.content;
  return manifest_escape(e.path) + "\t" + type + "\t" + mode + "\t" + std::to_string(e.size) + "\t" + content + "\n";
}

std::string manifest_text(const std::vector<TreeEntry>& entries) {
  std::string text = "sbx-manifest v1\n";
  for (auto& e : entries) text += manifest_line(e);
  return text;
}

namespace {
constexpr std::string_view kImageHeader = "sbx-manifest v2\n";

// The image's own ids of a stored owner (image_import.hpp, set_owner), or "importer" for one the
// import left to the importer (an id past the image's range).
std::string image_owner(std::uint32_t uid, std::uint32_t gid) {
  auto in_range = [](std::uint32_t id) { return id >= kOwnerIdBase && id - kOwnerIdBase < kOwnerIdRange; };
  if (!in_range(uid) || !in_range(gid)) return "importer";
  return std::to_string(uid - kOwnerIdBase) + ":" + std::to_string(gid - kOwnerIdBase);
}
}  // namespace

std::string image_manifest_text(const std::vector<TreeEntry>& entries, bool owners_carried) {
  std::string text(kImageHeader);
  for (auto& e : entries) {
    std::string line = manifest_line(e);
    line.pop_back();  // its newline, after the owner
    text += line + "\t" + (owners_carried ? image_owner(e.uid, e.gid) : "-") + "\n";
  }
  return text;
}

std::string manifest_text_like(std::string_view text, const std::vector<TreeEntry>& entries, bool owners_carried) {
  return text.substr(0, kImageHeader.size()) == kImageHeader ? image_manifest_text(entries, owners_carried)
                                                             : manifest_text(entries);
}

Result<std::string> sha256_fd(int fd, std::int64_t* bytes_out, const std::function<void(std::int64_t)>& on_chunk) {
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  constexpr std::size_t kBuf = 1 << 20;
  std::unique_ptr<char[]> buf(new char[kBuf]);
  Sha256 h;
  std::int64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.get(), kBuf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error(kStage, "read");
    }
    if (n == 0) break;
    h.update(buf.get(), static_cast<std::size_t>(n));
    total += n;
    if (on_chunk) on_chunk(n);
  }
  if (bytes_out) *bytes_out = total;
  return h.final_hex();
}

Result<TreeScan> scan_tree(const std::string& root, const ScanOptions& opts) {
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return sys_error(kStage, "open directory " + root);
  Walker w{opts, {}, 0};
  SBX_TRY(w.walk(fd.get(), "", 0));
  // Byte-wise order of the full path (std::string compares as unsigned char via char_traits).
  std::sort(w.scan.entries.begin(), w.scan.entries.end(),
            [](const TreeEntry& a, const TreeEntry& b) { return a.path < b.path; });
  return std::move(w.scan);
}

}  // namespace sbx
