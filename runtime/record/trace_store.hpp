#pragma once
// The trace store: every run's record is a line of the hash-chained ledger <state>/traces/ledger.jsonl
// (trace_ledger.hpp). Records of the previous store format, one <state>/traces/<run_id>.json file
// per run, are still listed and shown. Run ids sort by time, so "newest first" is a reverse sort.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/record/trace_ledger.hpp"

namespace sbx {

struct TraceSummary {
  std::string run_id;
  std::string started_at;
  std::string status;
  std::optional<int> exit_code;
  std::int64_t wall_ms = 0;
  std::string command;  // argv joined with spaces, shell-quoted where needed
  // invocation.pack and image (empty when none / unknown), for `trace ls --pack/--image`.
  std::string pack, pack_version, pack_digest, image, image_digest;
};

// Appends the record (JSON text of one object) to the ledger: durable when this returns.
// What `trace ls` filters on ("" / 0: no filter).
struct TraceFilter {
  std::string status;  // result.status, exactly
  std::string since;   // started_at >= this (RFC 3339 text compares in time order)
  // A pack: its name, NAME@VERSION or its digest (sha256:<hex> or the bare hex); an image: the
  // name the run gave (--image) or its digest, likewise.
  std::string pack, image;
  std::size_t newest = 0;
  // "sha256:<hex>" for a bare 64-digit hex digest; anything else as it is.
  static std::string digest_form(const std::string& s);
  bool matches(const TraceSummary& s) const {
    auto pack_ok = pack.empty() || s.pack == pack || (!s.pack.empty() && s.pack + "@" + s.pack_version == pack) ||
                   (!s.pack_digest.empty() && s.pack_digest == digest_form(pack));
    auto image_ok = image.empty() || s.image == image || (!s.image_digest.empty() && s.image_digest == digest_form(image));
    return (status.empty() || s.status == status) && (since.empty() || s.started_at >= since) && pack_ok && image_ok;
  }
};

// The summary `trace ls` shows of one record (tolerant of odd records).
TraceSummary summarize_record(const std::string& id, const nlohmann::json& j);
// The same from the record's text (as the ledger holds it): an error when it is not a bounded
// JSON object.
Result<TraceSummary> summarize_record_text(const std::string& id, std::string_view text);

Result<AppendInfo> store_trace(const Dirs& dirs, const std::string& run_id, std::string_view json_text);
// Newest first; at most `newest` of them when not 0 (only those records are read).
Result<std::vector<TraceSummary>> list_traces(const Dirs& dirs, std::size_t newest = 0);
// Filtered, from the query index (trace_index.hpp) when it can be used, else by reading the ledger.
// A ledger line or record that cannot be read (not a ledger line, over the size bound, not JSON)
// is left out, named in a warning each time, and counted in `skipped`: the listing holds every
// other run.
Result<std::vector<TraceSummary>> list_traces(const Dirs& dirs, const TraceFilter& filter, std::uint64_t* skipped = nullptr);
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
Result<nlohmann::json> load_trace(const Dirs& dirs, const std::string& run_id_or_prefix);

}  // namespace sbx
