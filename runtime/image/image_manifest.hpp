#pragma once
// The canonical manifest of a file tree: one line per entry (path, type, mode, size, content
// sha256 or link target), sorted byte-wise by path. An image's digest is the sha256 of its
// manifest, so two trees with the same content and metadata get the same digest however they
// were built (mtimes, owners, inode numbers and directory order do not enter it). Directories
// given with --input are recorded in the trace by the same digest.
//
// Line format (tab-separated, one entry per line, after a header line "sbx-manifest v1"):
//   PATH  TYPE  MODE  SIZE  CONTENT
// PATH is relative to the tree's root; TYPE is file, dir or symlink; MODE four octal digits;
// SIZE bytes (0 for dirs, the target's length for symlinks); CONTENT the sha256 of a file, the
// target of a symlink, "-" for a directory. PATH and targets are escaped: bytes below 0x21,
// 0x7f and above, and backslash become \xHH, so a name with a newline or invalid UTF-8 still
// gives exactly one unambiguous line.
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
  std::string content;  // sha256 hex (file), target (symlink), empty (dir)
};

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

// Walks the tree under `root` (a directory) without following any symlink: files are opened with
// O_NOFOLLOW relative to their directory's fd, so a tree that changes during the scan cannot
// redirect it outside. FIFOs, sockets and device nodes are listed in `skipped`, not entered.
Result<TreeScan> scan_tree(const std::string& root, const ScanOptions& opts = {});

// Streams an open file through sha256 (large reads; posix_fadvise sequential); `on_chunk`, when
// given, is told the size of every chunk read.
Result<std::string> sha256_fd(int fd, std::int64_t* bytes_out = nullptr,
                              const std::function<void(std::int64_t)>& on_chunk = {});

}  // namespace sbx
