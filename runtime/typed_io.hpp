#pragma once
// The host side of a typed-IO run (sbx pack run, sbx exec): a private directory per run that holds
// the validated input the sandbox sees read-only under /in, and the writable directory it sees as
// /out. /out cannot be a tmpfs of the sandbox: that lives in the sandbox's mount namespace, which
// is gone when the run ends, before sbx could read the result. So sbx creates it on the host:
//
//   /tmp/sbx-io-XXXXXX/        0711, sbx's (traversable so the sandbox's init can bind from it:
//                                     as root, init's uid is an unprivileged mapped one)
//     in/                      0755, files 0444: exact copies of the bytes sbx validated (the
//                                     caller's file may change after validation; the copy cannot)
//     out/                     0700, owned by the program's host uid (the mapped one as root)
//
// After the run the result is read with O_NOFOLLOW|O_NONBLOCK (the sandbox may leave a symlink or
// a FIFO there), size-capped, and the directory is removed (without following links).
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/userns.hpp"

namespace sbx {

inline constexpr std::int64_t kMaxResultBytes = 16LL << 20;

class IoDir {
 public:
  // `identity` decides the owner of out/ (the host uid the program's uid maps to).
  static Result<IoDir> create(const IdentityPlan& identity);
  IoDir(IoDir&& o) noexcept : root_(std::move(o.root_)) { o.root_.clear(); }
  IoDir& operator=(IoDir&&) = delete;
  ~IoDir();

  // Writes in/NAME (0444) and returns its host path, to be bound read-only into the sandbox.
  Result<std::string> add_input(const std::string& name, const std::string& bytes) { return add_file("in/" + name, bytes); }
  // Writes ROOT/REL (0444), creating directories (0755) on the way; REL is checked by the caller
  // (relative, no "..").
  Result<std::string> add_file(const std::string& rel, const std::string& bytes);
  std::string out_dir() const { return root_ + "/out"; }
  std::string root() const { return root_; }

 private:
  IoDir() = default;
  std::string root_;
};

struct OutputFile {
  bool present = false;
  bool too_big = false;  // larger than the cap: `bytes` holds nothing
  std::int64_t size = 0;
  std::string bytes;
  std::string sha256;
  std::string problem;  // why it could not be read (not a regular file, ...), "" when fine
};

// Reads out/NAME safely (see above).
OutputFile read_output(const IoDir& dir, const std::string& name, std::int64_t cap = kMaxResultBytes);

// The host uid/gid that the program's uid/gid inside map to.
std::pair<uid_t, gid_t> mapped_program_ids(const IdentityPlan& identity);

// {path, bytes, sha256} for the trace's inputs/outputs.
nlohmann::json file_record(const std::string& path, std::int64_t bytes, const std::string& sha256);

}  // namespace sbx
