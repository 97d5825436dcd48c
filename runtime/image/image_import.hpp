#pragma once
// Populating an image's staging tree from a directory or a tarball, normalised on the way in:
//   - only directories, regular files (hard links kept as hard links) and symlinks are created;
//     FIFOs, sockets and device nodes are dropped and listed;
//   - setuid/setgid/sticky bits and group/other write bits are cleared; files lose their write
//     bits altogether and stay readable by their owner (0400); directories stay 0700 for their
//     owner, so the store can be verified and removed without privileges;
//   - ownership is carried over where the store is read through an idmapped mount (ImportLimits::
//     carry_owners: host root in the host's user namespace): an entry of image uid/gid N < 65536
//     is owned by host id kOwnerIdBase + N, which no host account and no sandbox is, and which a
//     run maps to sandbox id N (runtime/linux/mounts.hpp, make_idmapped_image). Never host id N:
//     the host's user N would own (and could rewrite, or plant symlinks in) the image's tree. Without
//     carry_owners everything belongs to the importing user (the caller rootless, which is then the
//     sandbox's user); entries whose ids are past that range stay the importer's (counted);
//   - file and symlink mtimes are kept (interpreters compare them against their byte-code caches).
// Nothing is ever created through a symlink: every parent is opened with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS) relative to the staging root, so a hostile tarball cannot write outside it.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/image/image_manifest.hpp"

namespace sbx {

struct ImportStats {
  std::int64_t entries = 0;
  std::int64_t bytes = 0;
  std::int64_t special_bits_cleared = 0;  // setuid/setgid/sticky
  std::int64_t write_bits_cleared = 0;    // group/other write
  std::vector<SkippedEntry> dropped;      // device nodes, FIFOs, sockets
  std::int64_t whiteouts = 0;             // layer members that deleted what a lower layer made
  bool owners_carried = false;            // ImportLimits::carry_owners was set
  std::int64_t owners_outside_range = 0;  // entries left to the importer: an id >= kOwnerIdRange
};

// The image ids an import carries over, and where they are stored: kOwnerIdRange, kOwnerIdBase
// (image_manifest.hpp, whose v2 lines name them).

// An archive is a promise about its size that it need not keep: a few MB of gzip expand to GBs,
// a tar of headers alone to millions of entries. Import stops at these bounds (what the archive
// says is checked before anything is written, what is written as it is written) and the store
// keeps nothing of it. Directories count the same way.
struct ImportLimits {
  static constexpr std::int64_t kDefaultMaxBytes = 4LL << 30;  // 4 GiB of file data
  static constexpr std::int64_t kDefaultMaxEntries = 1'000'000;
  std::int64_t max_bytes = kDefaultMaxBytes;
  std::int64_t max_entries = kDefaultMaxEntries;  // every member, dropped ones included
  // Not a bound but how entries are written: with their image owners (see the top of this file).
  bool carry_owners = false;
};

// What a tar holding at most max_bytes of file data in max_entries members can come to: the
// bound on a decompressed stream, and on an archive read from stdin before it is extracted.
std::int64_t max_archive_bytes(const ImportLimits& limits);

// Called often (after every entry and every chunk of a large file) with the phase ("copying",
// "extracting", "hashing") and the totals so far; the caller throttles what it prints.
using ImportProgress = std::function<void(const char* phase, std::int64_t entries, std::int64_t bytes)>;

std::uint32_t normalise_mode(bool is_dir, std::uint32_t mode);

// Copies the tree under `src` into the empty directory `staging` (never following symlinks).
Result<ImportStats> populate_from_dir(const std::string& src, const std::string& staging,
                                      const ImportProgress& progress, const ImportLimits& limits = {});

// Extracts the tarball at `path` (plain or compressed) into the empty directory `staging`.
Result<ImportStats> populate_from_tar(const std::string& path, const std::string& staging,
                                      const ImportProgress& progress, const ImportLimits& limits = {});

// Applies a container image's layer tarballs, lowest first, to the empty directory `staging`:
// whiteouts (".wh.NAME") and opaque directories (".wh..wh..opq") delete what lower layers made,
// and a member replaces a lower layer's entry at its path, a whole tree included. Each layer's
// file must match its digest in `digests` ("sha256:<hex>"), checked on the bytes extracted. The
// limits (and the decompression budget they imply) count every layer together.
Result<ImportStats> apply_layers(const std::vector<std::string>& layers, const std::vector<std::string>& digests,
                                 const std::string& staging, const ImportProgress& progress,
                                 const ImportLimits& limits = {});

}  // namespace sbx
