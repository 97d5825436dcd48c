#pragma once
// Shared pieces of the typed-IO contract (sbx pack run, sbx exec). Inputs reach the sandbox as
// generated files (run_request.hpp, RunRequest::files); the result is read from the sandbox's /out
// tmpfs through the fd init hands over (artifact_export.hpp, read_out_file). Nothing of either
// is stored on the host, so a killed sbx leaves nothing behind.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/base/json_io.hpp"
#include "runtime/typed/schema_validate.hpp"

namespace sbx {

// The largest /out/result.json sbx reads and validates.
inline constexpr std::int64_t kMaxResultBytes = 16LL << 20;

// The bounds /out/result.json is parsed within (json_io.hpp): a result past them is output_invalid
// with a JSON pointer to where, never a crash.
JsonBounds result_bounds();
// {max_bytes, max_depth, max_values}, recorded in the trace beside an invalid result.
nlohmann::json result_bounds_json();

// Contract errors kept per document (in the trace, on stderr, in an exec response); the rest are
// counted, not stored: a 64 MiB records file of bad records would otherwise be millions of lines.
inline constexpr std::size_t kMaxContractErrors = 100;

// The failed side of a contract check: {status: invalid, errors (at most kMaxContractErrors),
// errors_omitted (when any were), bounds}. Cuts `errs` to the kept ones.
nlohmann::json invalid_check(std::vector<SchemaError>& errs, std::size_t omitted, const JsonBounds& bounds);

// {path, bytes, sha256} for the trace's inputs/outputs.
nlohmann::json file_record(const std::string& path, std::int64_t bytes, const std::string& sha256);

}  // namespace sbx
