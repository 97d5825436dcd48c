#pragma once
// The trace ledger's query index: <state>/traces/index.sqlite, one row per ledger line with what
// `trace ls` shows and filters on, and where the line lies. Derived data only: it is caught up
// from the ledger by the reader that needs it (runs never write it, so the record phase does not
// pay for it), checked against the ledger's bytes where it stopped (a ledger rewritten under it
// is a rebuild, not a stale answer), and rebuilt from scratch by `sbx trace reindex`.
// Never trusted for what it says of a run: every row a reader uses is checked against the ledger
// line it names (read_indexed_line), and a row that does not match makes the index rebuilt.
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
// Each run returned is read back from its ledger line (a line's start, the row's run id and hash)
// and its summary is the one of that line's record: a row that disagrees with its line (a row edited in the index, an
// offset pointing at another run's line) has the index rebuilt from the ledger and the query run
// again. Rows the filter left out are not read: the work is that of the runs listed.
Result<std::vector<IndexedRun>> query_index(const Dirs& dirs, const TraceFilter& filter,
                                            std::uint64_t* skipped = nullptr);

// Where the index says a run's line lies, and the hash that line carries ("" for a line over the
// size bound, which is not read).
struct IndexedLine {
  std::string run_id;
  std::uint64_t offset = 0;
  std::string hash;
};
// Every indexed run id with its line's offset and hash, in run id order (for `trace show`).
Result<std::vector<IndexedLine>> index_run_ids(const Dirs& dirs);

// The ledger line at `l.offset`, authenticated against the index row: it must carry the row's run
// id and hash, and its bytes must hash to that hash (ledger_hash) or, for a line of the ledger that
// is itself broken (its bytes do not hash to the hash it carries: `trace verify` names it), begin
// where a line begins. Anything else is an error of stage "trace index" saying the row is stale.
Result<std::string> read_indexed_line(const Dirs& dirs, const IndexedLine& l);
// Drops the index and builds it again from the ledger; returns the number of rows.
Result<std::uint64_t> rebuild_index(const Dirs& dirs);

}  // namespace sbx
