#pragma once
// Artifact export: what the program left in /out leaves the sandbox only through here, after the
// program and everything else in the sandbox are dead (the supervisor exports once init's pidfd
// reported its exit, and init's exit waits for every other process of the pid namespace). /out is
// a tmpfs of the sandbox's mount namespace; init handed the supervisor an O_PATH fd of it, which
// keeps it alive after the namespace is gone.
//
// Only regular files and directories are copied; nothing is ever followed: every open is
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV) relative
// to its directory, and the destination is created with O_EXCL | O_NOFOLLOW in a directory sbx
// created or found empty. Symlinks, FIFOs, sockets, device nodes, names with control characters
// or invalid UTF-8, and anything past --output-max-bytes / --output-max-files are skipped and
// listed. Hard links inside /out are copied as separate files (a hard link to a file outside /out
// cannot exist: /out is its own file system).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"

namespace sbx {

struct ExportCaps {
  std::int64_t max_bytes = 256LL << 20;
  std::int64_t max_files = 10000;  // entries created on the host: files and directories
};

struct ExportResult {
  struct File {
    std::string path;  // "/out/..." (display-escaped)
    std::int64_t bytes = 0;
    std::string sha256;
  };
  struct Skip {
    std::string path;
    std::string reason;
  };
  std::vector<File> files;               // the first kMaxListedOutputs, within kMaxListedOutputBytes
  std::int64_t file_count = 0;           // every exported file
  std::int64_t unlisted_file_bytes = 0;  // the bytes of those not in `files`
  std::size_t listed_bytes = 0;          // `files` as the record lists them (about: JSON overhead estimated)
  std::vector<Skip> skipped;             // the first kMaxListedSkips, about kMaxListedSkipBytes at most
  std::size_t skipped_bytes = 0;         // their paths and reasons
  std::int64_t skipped_count = 0;        // all of them
  std::int64_t bytes = 0, entries = 0;
  bool limit_hit = false;  // a cap was reached: the run's status becomes output_limit
  nlohmann::json to_json(const std::string& dir, const ExportCaps& caps) const;
};

// The exported files listed (the record's outputs, trace.hpp): a program chooses how many files it
// leaves and how long their names are (64 levels of 255-byte names: 16 KB a path), so the list is
// bounded in memory and in the record; every file is still exported, hashed and counted.
inline constexpr std::size_t kMaxListedOutputs = 10000;
inline constexpr std::size_t kMaxListedOutputBytes = 8u << 20;  // as compact JSON
inline constexpr std::size_t kMaxListedSkips = 1000;
// ...and at most this much of them as JSON: a skipped path can be 64 levels of 255-byte names.
inline constexpr std::size_t kMaxListedSkipBytes = 1u << 20;

// Before the run: DIR must not exist (it is created, 0755) or be an empty directory. Not a
// symlink. Errors are usage errors (exit 125) naming DIR. With `create` false (--dry-run) a
// missing DIR is not created: its parent must be a writable directory.
Status prepare_export_dir(const std::string& dir, bool create = true);

// After the run: copies the tree under `out_fd` (O_PATH of /out) into `dir`.
Result<ExportResult> export_out(int out_fd, const std::string& dir, const ExportCaps& caps);

// Reads /out/NAME for the typed-IO contract (result.json): a regular file only, at most `cap` bytes.
struct OutFile {
  bool present = false;
  bool too_big = false;
  std::int64_t size = 0;
  std::string bytes;
  std::string sha256;
  std::string problem;  // why it could not be read ("" when fine)
};
OutFile read_out_file(int out_fd, const std::string& name, std::int64_t cap);

// Escapes control bytes, backslash and invalid UTF-8 as \xHH, and C1 controls and format
// characters (text_escape.hpp) as \uXXXX, so any name fits a JSON string and reaches no terminal raw.
std::string display_name(const std::string& raw);
// No control bytes (C0, DEL, C1), no format characters printable() escapes, valid UTF-8.
bool safe_name(const std::string& raw);

}  // namespace sbx
