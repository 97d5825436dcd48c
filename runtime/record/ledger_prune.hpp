#pragma once
// `sbx trace prune`: drops the oldest records of the trace ledger (trace_ledger.hpp) while keeping
// what is left verifiable. The records pruned are a prefix of the ledger (never one in the
// middle: the chain would break there); in their place the new ledger begins with a prune anchor,
// the envelope of the last one pruned (PruneAnchorLine), to which the first kept record chains as
// it did before. `sbx trace verify` then walks from the anchor and says "pruned through seq N".
//
// Crash-safe: the new ledger is written beside the old one, synced, and renamed over it; an
// interrupted prune leaves the old ledger as it was (and a temporary file that the next prune
// removes). The rewrite holds the ledger's lock, the one appends take (an append waiting on it
// finds the new file when it gets it: with_ledger_locked). Bounded: the ledger is streamed, one
// line at a time to find the cut, then copied in chunks; never read whole.
//
// Only a ledger that verifies is pruned: pruning a broken one would remove the evidence of the
// break. The query index is rebuilt afterwards (it holds the old lines' offsets).
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/base/error.hpp"
#include "runtime/base/paths.hpp"

namespace sbx {

struct PruneRequest {
  // Keep at least the newest `keep` records (unset: no such bound).
  std::optional<std::uint64_t> keep;
  // Prune only records that started before this (RFC 3339 text as since_bound returns it; "":
  // no such bound). With both, a record is pruned only when both allow it.
  std::string before;
  bool dry_run = false;
  std::string now;  // the anchor's time, RFC 3339
};

struct PruneReport {
  std::uint64_t pruned = 0, kept = 0;
  std::uint64_t through_seq = 0;  // the last record pruned (now the anchor); 0 when none
  std::string through_run_id, through_hash;
  std::uint64_t bytes_before = 0, bytes_after = 0;
  std::uint64_t pruned_before = 0;  // what an earlier prune had already removed (its anchor's seq)
  std::string index_warning;        // the index could not be rebuilt (the next reader rebuilds it)
};

Result<PruneReport> prune_ledger(const Dirs& dirs, const PruneRequest& req);

}  // namespace sbx
