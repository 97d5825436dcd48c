#pragma once
// The trace store: every run's record is a line of the hash-chained ledger <state>/traces/ledger.jsonl
// (trace_ledger.hpp). Records of the previous store format, one <state>/traces/<run_id>.json file
// per run, are still listed and shown, marked as outside the ledger (TraceSummary::in_ledger): the
// hash chain does not cover them, so nothing vouches for them (`trace export` refuses them), and
// they are read as a file planted there may be (a regular file, not a link, bounded). Run ids sort
// by time, so "newest first" is a reverse sort.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/record/trace_ledger.hpp"
#include "runtime/record/trace_summary.hpp"

namespace sbx {

// Appends the record (JSON text of one object) to the ledger: durable when this returns.
Result<AppendInfo> store_trace(const Dirs& dirs, const std::string& run_id, std::string_view json_text);
// Newest first; at most `newest` of them when not 0 (only those records are read).
Result<std::vector<TraceSummary>> list_traces(const Dirs& dirs, std::size_t newest = 0);
// Filtered, from the query index (trace_index.hpp) when it can be used, else by reading the ledger.
// A ledger line or record that cannot be read (not a ledger line, over the size bound, not JSON)
// is left out, named in a warning each time, and counted in `skipped`: the listing holds every
// other run.
Result<std::vector<TraceSummary>> list_traces(const Dirs& dirs, const TraceFilter& filter,
                                              std::uint64_t* skipped = nullptr);
struct ImportReport {
  std::size_t imported = 0, already = 0;
  std::vector<std::string> skipped;  // "<file>: why", for files that are not importable records
};
// Appends every record of the previous store format (<traces>/<run_id>.json), oldest first, to
// the ledger, noting the file and the sha256 of its bytes in the record ("ledger_import"), then
// moves the file into <traces>/imported/. A run id already in the ledger is not appended twice
// (its file is moved all the same); a file that is not a record is left where it is and listed.
Result<ImportReport> import_legacy_traces(const Dirs& dirs);

// Exact run id, a unique prefix of one, "last" (the newest run) or "-N" (the Nth newest).
// `legacy_file` (when given) is set to the record's file when it is one of the previous store
// format (outside the hash-chained ledger: nothing vouches for it), and cleared otherwise.
Result<nlohmann::json> load_trace(const Dirs& dirs, const std::string& run_id_or_prefix,
                                  std::string* legacy_file = nullptr);

}  // namespace sbx
