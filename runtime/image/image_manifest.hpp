#pragma once
// The canonical manifest of a file tree: one line per entry (path, type, mode, size, content
// sha256 or link target), sorted byte-wise by path. An image's digest is the sha256 of its
// manifest, so two trees with the same content and metadata get the same digest however they
// were built (mtimes, inode numbers and directory order do not enter it; an image's owners do:
// v2, below). Directories given with --input are recorded in the trace by the v1 digest.
//
// Line format (tab-separated, one entry per line, after a header line "sbx-manifest v1"):
//   PATH  TYPE  MODE  SIZE  CONTENT
// PATH is relative to the tree's root; TYPE is file, dir or symlink; MODE four octal digits;
// SIZE bytes (0 for dirs, the target's length for symlinks); CONTENT the sha256 of a file, the
// target of a symlink, "-" for a directory. PATH and targets are escaped: bytes below 0x21,
// 0x7f and above, and backslash become \xHH, so a name with a newline or invalid UTF-8 still
// gives exactly one unambiguous line.
//
// An image's manifest is "sbx-manifest v2" (image_manifest_text): each line has a sixth field,
// OWNER, the entry's owner as the image gives it: "UID:GID" (image ids) where the import carried
// owners (image_import.hpp) and the stored owner lies in the image's range, "importer" where it
// lies outside it, "-" on every line where the import carried none. Under v1 two imports of the
// same bytes with different owners had one digest, and the second import was handed the first's
// stored tree, its owners with it: a review made an image's root-only file readable by uid 1000
// so (tests/integration/test_image.py). Images stored by an older sbx keep their v1 manifest,
// which `sbx image verify --full` still checks as v1 (manifest_text_like).
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"

namespace sbx {

struct TreeEntry {
  enum class Type { file, dir, symlink };
  std::string path;  // relative, unescaped bytes
  Type type = Type::file;
  std::uint32_t mode = 0;  // permission bits (07777)
  std::int64_t size = 0;
  std::string content;             // sha256 hex (file), target (symlink), empty (dir)
  std::uint32_t uid = 0, gid = 0;  // the stored owner (host ids), for an image's v2 manifest
};

// The image ids an import carries over: those a run maps (runtime/linux/userns.hpp kMappedRange),
// stored from kOwnerIdBase on: past sbx's own sandbox ranges (userns.hpp kDefaultHostBase + its
// kDefaultSlices slices ends there) and the ranges tools hand out (subuid, systemd's).
inline constexpr std::uint32_t kOwnerIdRange = 65536;
inline constexpr std::uint32_t kOwnerIdBase = 0x80000000;

// How deep a tree may be (directories below its root), in every walk of an image or an input:
// each level is a frame of a recursive walk and an open directory. A tar member name has at most
// as many components (tar_reader.cpp).
inline constexpr std::size_t kMaxTreeDepth = 256;

struct SkippedEntry {
  std::string path;
  std::string why;  // "fifo", "char device", ...
};

struct TreeScan {
  std::vector<TreeEntry> entries;  // sorted byte-wise by path
  std::vector<SkippedEntry> skipped;
  std::int64_t bytes = 0;  // sum of file sizes
};

struct ScanOptions {
  bool hash = true;  // compute file content sha256
  // Called after every entry and every chunk of a large file: (entries, bytes) so far.
  std::function<void(std::int64_t entries, std::int64_t bytes)> progress;
};

std::string manifest_escape(std::string_view s);
std::string manifest_line(const TreeEntry& e);
// Header + lines; `entries` must be sorted (scan_tree returns them so).
std::string manifest_text(const std::vector<TreeEntry>& entries);
// An image's manifest (v2, above): its lines carry each entry's owner where `owners_carried`.
std::string image_manifest_text(const std::vector<TreeEntry>& entries, bool owners_carried);
// The manifest of `entries` in the version `text` (a stored manifest) has, by its header.
std::string manifest_text_like(std::string_view text, const std::vector<TreeEntry>& entries, bool owners_carried);

// Walks the tree under `root` (a directory) without following any symlink: files are opened with
// O_NOFOLLOW relative to their directory's fd, so a tree that changes during the scan cannot
// redirect it outside. A tree deeper than kMaxTreeDepth is an error. FIFOs, sockets and device nodes are listed in `skipped`, not entered.
Result<TreeScan> scan_tree(const std::string& root, const ScanOptions& opts = {});

// Streams an open file through sha256 (large reads; posix_fadvise sequential); `on_chunk`, when
// given, is told the size of every chunk read.
Result<std::string> sha256_fd(int fd, std::int64_t* bytes_out = nullptr,
                              const std::function<void(std::int64_t)>& on_chunk = {});

}  // namespace sbx
