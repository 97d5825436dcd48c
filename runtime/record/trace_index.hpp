#pragma once
// The trace ledger's query index: <state>/traces/index.sqlite, one row per ledger line with what
// `trace ls` shows and filters on, and where the line lies. Derived data only: it is caught up
// from the ledger by the reader that needs it (runs never write it, so the record phase does not
// pay for it), checked against the ledger's bytes where it stopped (a ledger rewritten under it
// is a rebuild, not a stale answer), and rebuilt from scratch by `sbx trace reindex`.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/record/trace_summary.hpp"

namespace sbx {

struct IndexedRun {
  TraceSummary summary;
  std::uint64_t offset = 0;  // of its ledger line
};

// Matching runs, newest first (by run id), at most filter.newest when not 0. Catches up first.
// Lines and records that cannot be read are named in warnings and added to `skipped`.
Result<std::vector<IndexedRun>> query_index(const Dirs& dirs, const TraceFilter& filter,
                                            std::uint64_t* skipped = nullptr);
// Every indexed run id with its line's offset, in run id order (for `trace show`).
Result<std::vector<std::pair<std::string, std::uint64_t>>> index_run_ids(const Dirs& dirs);
// Drops the index and builds it again from the ledger; returns the number of rows.
Result<std::uint64_t> rebuild_index(const Dirs& dirs);

}  // namespace sbx
