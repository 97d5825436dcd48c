#pragma once
// The sha256 of the running sbx binary, for the trace record ("sbx": {"binary_sha256"}): which
// build made a record, beyond its version string.
#include <string>

#include "runtime/base/error.hpp"
#include "runtime/base/paths.hpp"

namespace sbx {

// Hashing an 11 MiB static binary costs milliseconds, more than the whole record phase; the
// digest is therefore cached in <state>/binary-sha256, keyed by the binary's device, inode, size,
// mtime and ctime (any rebuild, copy or in-place edit changes one of them), and recomputed on a
// mismatch. The cache is as trustworthy as the state dir that also holds the ledger.
Result<std::string> self_binary_sha256(const Dirs& dirs);

}  // namespace sbx
