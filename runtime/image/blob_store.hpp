#pragma once
// The blob store: what a run consumed, kept by content beside the ledger so that `sbx replay`
// can rebuild the run (replay.hpp). A blob is a plain file <state>/blobs/sha256/ab/abcd... named
// by the sha256 of its bytes; the record names each one it needs in its "blobs" list:
//
//   {"role": "pack_file", "path": "run.sh", "sha256": "...", "bytes": 42, "mode": "0755"}
//   {"role": "input", "path": "/in/data.csv", "skipped": "larger than the keep ceiling (64M)", "bytes": N}
//
// Roles: pack_file / pack_dir (a pack's tree: pack_digest's manifest rebuilt from them), records
// (a pack run's validated input records), input_file / input_dir / input_link (`--input` with
// --keep-inputs; a symlink inside a tree is kept as its target text, never followed),
// exec_request (`sbx exec`'s whole request), profile (the profile's text), result (the validated
// result). A blob is written before the run or after it, never while the supervisor runs: to a
// temporary file in <blobs>/tmp, fsynced, then renamed to its name, so a reader sees the whole
// blob or none. The same bytes are stored once, whichever run needs them.
//
// Bounds: a file above the keep ceiling (SBX_KEEP_MAX_BYTES, default kDefaultKeepMax) is not
// kept; its entry says so ("skipped"), and a replay of that run names it as missing. Symlinks in
// a tree are never followed (their target text is recorded); special files are listed as skipped.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/paths.hpp"

namespace sbx {

inline constexpr std::int64_t kDefaultKeepMax = 64LL << 20;
// The whole of what one run keeps (every blob together): past it, further files are skipped.
inline constexpr std::int64_t kDefaultKeepTotal = 256LL << 20;

std::string blobs_dir(const Dirs& dirs);                        // <state>/blobs
std::string blob_path(const Dirs& dirs, std::string_view hex);  // <state>/blobs/sha256/ab/abcd...

// The per-file keep ceiling: SBX_KEEP_MAX_BYTES (a size, "16M") when set and valid, else the
// default; a bad value is an error naming the variable.
Result<std::int64_t> keep_ceiling();

// A run's claim on the blobs it kept, from its first put until its record names them: `sbx gc`
// never deletes a blob that a live pin holds, however old the blob's mtime (a run may last
// longer than any grace). On disk, <blobs>/pins/pin.XXXXXX: one blob hex per line, created and
// appended to under the store's lock (put_blob), flock(LOCK_EX) held from its creation until
// this object is destroyed — unlinked then, and released by the kernel if the process dies, so a
// pin that gc can lock belongs to no live process (and gc removes it). Nothing is written until
// the first put. Shared by everything that keeps blobs for one run (RunRequest::blob_pin) and
// released with it, after run_sandbox stored the record. Bounded: past kMaxPinBytes of hex
// lines, one "*" line pins every blob of the store (gc then deletes nothing unnamed).
inline constexpr std::int64_t kMaxPinBytes = 16LL << 20;
class BlobPin {
 public:
  BlobPin() = default;
  BlobPin(const BlobPin&) = delete;
  BlobPin& operator=(const BlobPin&) = delete;
  ~BlobPin();
  // Adds `hex` to the pin, creating its file first; called with the store's lock held.
  Status add(const Dirs& dirs, const std::string& hex);

 private:
  UniqueFd fd_;
  std::string path_;
  std::int64_t bytes_ = 0;
  bool all_ = false;
};

// Collects the "blobs" entries of one run. Each add_* stores what it is given (or records why
// not) and never fails the run: a blob that cannot be written is an entry with "skipped".
class BlobKeeper {
 public:
  // `pin`: the run's (RunRequest::blob_pin), which keeps what is stored here from `sbx gc` until
  // the run's record names it; null only where no record will (a test's keeper).
  BlobKeeper(Dirs dirs, std::int64_t max_bytes, std::shared_ptr<BlobPin> pin,
             std::int64_t max_total = kDefaultKeepTotal)
      : dirs_(std::move(dirs)), max_(max_bytes), max_total_(max_total), pin_(std::move(pin)) {}
  // Bytes in memory (records, a request, the profile's text, the result).
  void add_bytes(const std::string& role, const std::string& path, std::string_view bytes);
  // A host file, opened without following a symlink; `role` names it.
  void add_file(const std::string& role, const std::string& path, const std::string& host_path);
  // A host directory: every regular file (role file_role, path `prefix` + "/" + relative path,
  // with its mode), directory (dir_role, no blob) and symlink (link_role, its "target" as text:
  // the link is kept, never followed); special files are listed as skipped. `prefix` "" gives
  // paths relative to the tree.
  void add_tree(const std::string& file_role, const std::string& dir_role, const std::string& link_role,
                const std::string& prefix, const std::string& host_dir);
  // Called after each file kept, with the files and bytes kept so far (`sbx run --keep-inputs`
  // shows a progress line: a large tree takes a while to hash and store).
  std::function<void(std::int64_t files, std::int64_t bytes)> on_kept;
  const nlohmann::json& entries() const { return entries_; }
  nlohmann::json take() { return std::move(entries_); }

 private:
  void add_fd(const std::string& role, const std::string& path, int fd, unsigned mode);
  bool over_total(const std::string& role, const std::string& path, std::int64_t bytes);
  Dirs dirs_;
  std::int64_t max_, max_total_, total_ = 0, kept_files_ = 0;
  std::shared_ptr<BlobPin> pin_;
  nlohmann::json entries_ = nlohmann::json::array();
};

// Stores `bytes` as a blob (a no-op when it is already there) and adds it to `pin` (when given)
// before the store's lock is released; returns its sha256 hex. The first put of a process that
// finds the store unlocked also removes what killed writers left in <blobs>/tmp.
Result<std::string> put_blob(const Dirs& dirs, std::string_view bytes, BlobPin* pin = nullptr);
// Reads a blob back and checks its content against its name (a blob changed on disk is an error,
// never replayed). At most `max_bytes`.
Result<std::string> get_blob(const Dirs& dirs, std::string_view hex, std::int64_t max_bytes = 1LL << 30);

// Retention (`sbx gc`). A record is kept when it started within keep_days (all records when
// keep_days < 0). Blobs that no kept record needs are deleted; then, while the store is above
// max_bytes (no ceiling when < 0), the blobs of the oldest kept records go too, and each is
// reported with the runs that needed it. A blob that a live pin holds (BlobPin: a run still
// going, its record not written) is kept whatever its age; stale pins (their process is gone)
// are removed. Blobs of no record at all younger than an hour are kept too (a writer that pins
// nothing). Temporary files in <blobs>/tmp are removed: gc holds the store's lock exclusively,
// and every writer holds it while its temporary file exists, so what is there was left by a
// writer that was killed (not counted in a dry run, which shares the lock with writers).
struct GcItem {
  std::string sha256;
  std::int64_t bytes = 0;
  std::string why;              // kept: which record needs it; deleted: why it could go
  bool needed_by_kept = false;  // deleted although a kept record names it (over --max-bytes)
};
struct GcReport {
  std::vector<GcItem> kept, deleted;
  std::int64_t kept_bytes = 0, deleted_bytes = 0;
  std::size_t records = 0, kept_records = 0;
  std::size_t live_pins = 0, stale_pins = 0;  // pins of running sandboxes; of dead ones (removed)
  std::size_t tmp_removed = 0;                // temporary files of killed writers removed
  std::int64_t tmp_bytes = 0;
  std::vector<std::string> warnings;
};
Result<GcReport> gc_blobs(const Dirs& dirs, int keep_days, std::int64_t max_bytes, bool dry_run);

}  // namespace sbx
