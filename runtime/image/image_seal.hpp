#pragma once
// The seal of a stored image tree: a digest of (path, inode, mode, size, mtime, ctime) of every
// entry, taken when the image is stored. `sbx run` re-takes it before every run on the image
// and refuses the run when it differs, so a file changed inside the store (even with its mtime
// put back: ctime cannot be set from user space) is caught without re-reading any content;
// `sbx image verify --full` re-hashes the content against the manifest.
//
// Its cost is one fstatat per entry and no reads. The seal is change detection for the store,
// not a signature: whoever can write the store can also rewrite the seal.
#include <cstdint>
#include <string>

#include "runtime/base/error.hpp"

namespace sbx {

struct Seal {
  std::int64_t entries = 0;
  std::string digest;  // sha256 hex
};

Result<Seal> compute_seal(const std::string& root);
// The same, for a tree already open (a directory fd, e.g. the one the overlay is then built from,
// so that what was checked is what is mounted).
Result<Seal> compute_seal_fd(int root_fd);

}  // namespace sbx
