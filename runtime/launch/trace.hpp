#pragma once
// The trace record, schema sbx.trace/v1 (schemas/trace.schema.json; docs/ARCHITECTURE.md, "What is recorded where"): what ran, on which
// image, under which limits and policy, how it ended and what it used.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/clock.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/trace_field.hpp"  // the record's members are written through it, by checked path
#include "runtime/launch/outcome.hpp"
#include "runtime/launch/supervisor.hpp"

namespace sbx {

inline constexpr const char* kTraceSchema = "sbx.trace/v1";

// One limit in the record: limits_applied / limits_not_applied (facility.hpp, add_limit_entries).
struct LimitEntry {
  std::string limit;  // "timeout_ms", "memory_bytes", ...
  nlohmann::json value;
  std::string mechanism;  // how it was enforced ("" when not applied)
  std::string reason;     // why it was not applied, or how a degraded mechanism differs
  bool degraded = false;  // enforced, but weaker than asked (per-process rlimit, not cgroup)
};

// Everything the record is made of, gathered by run_sandbox (sandbox.hpp). Each part's members
// are written with their record paths (put/trace_object, trace_field.hpp): "usage/network" into
// usage_extra, "enforcement/seccomp" into enforcement.
struct TraceParts {
  std::string run_id, started_at, ended_at;
  nlohmann::json invocation;   // {argv, cwd, profile{...}, pack, spec}
  nlohmann::json image;        // {name, digest, mounts}
  nlohmann::json host;         // {kernel, cgroup{...}}
  nlohmann::json enforcement;  // the facilities' contributions (facility.hpp: enforcement_record)
  Outcome outcome;
  const SuperviseResult* sup = nullptr;  // null when the run failed before the sandbox existed
  nlohmann::json usage_extra;            // cgroup usage, when measured
  nlohmann::json violations = nlohmann::json::array();
  nlohmann::json violations_summary = nlohmann::json::object();  // per kind: totals, what was cut
};

// Consumes the parts: the record is built from them by moves, not copies.
nlohmann::json trace_record(TraceParts&& parts);

// The record's bounds. A program must not be able to grow its record past what every reader
// takes (kMaxTraceBytes, json_io.hpp, from which the ledger's line bound derives): each list a
// program can grow is cut where it is made (the outputs: artifact_export.hpp; cut_list, json_io.hpp), counted and flagged in a "*_summary" member (like violations and
// violations_summary), and the whole record is bounded before it is stored (bound_record).
// The stored record's bound: the reader's, less room for what the ledger may add to a record
// when it appends it (its repair note, trace_ledger.cpp).
inline constexpr std::size_t kMaxRecordBytes = kMaxTraceBytes - 4096;

// The record within `max_bytes` of compact JSON (serialised as dump_json does), whatever it holds:
// while it is over, the member whose cut brings it closest under is cut — an array to the prefix
// that fits, a string to a prefix, an object emptied — and named in "record_truncated" {max_bytes,
// bytes (before), cut: [{pointer, bytes, kept_bytes}]}. schema, run_id, times, result and sbx
// are never cut. Returns false (the record is then left to trace_text's minimal fallback) only
// if even that does not bring it under. A record already within the bound is not touched.
bool bound_record(nlohmann::json& record, std::size_t max_bytes = kMaxRecordBytes);

// The record as the text stored and written to --trace-file; never throws. Strings of outside
// origin that are not valid UTF-8 (argv, environment, paths...) are escaped in `record` itself
// and listed under "escaped_strings" (json_io.hpp: dump_json). Should the record still not
// serialise, the text is a minimal record (schema, run_id, times, result) with "record_error".
// `indent` -1 gives one line (the ledger's form, trace_ledger.hpp), without the final newline.
// The text is within kMaxRecordBytes (bound_record, applied to `record` itself when needed): a
// record is always stored and always readable.
std::string trace_text(nlohmann::json& record, int indent = 2);

}  // namespace sbx
