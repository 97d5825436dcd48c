#pragma once
// Shared pieces of the typed-IO contract (sbx pack run, sbx exec). Inputs reach the sandbox as
// generated files (sandbox.hpp, RunRequest::files); the result is read from the sandbox's /out
// tmpfs through the fd init hands over (artifact_export.hpp, read_out_file). Nothing of either
// is stored on the host, so a killed sbx leaves nothing behind.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/json_io.hpp"

namespace sbx {

// The largest /out/result.json sbx reads and validates.
inline constexpr std::int64_t kMaxResultBytes = 16LL << 20;

// The bounds /out/result.json is parsed within (json_io.hpp): a result past them is output_invalid
// with a JSON pointer to where, never a crash.
JsonBounds result_bounds();
// {max_bytes, max_depth, max_values}, recorded in the trace beside an invalid result.
nlohmann::json result_bounds_json();

// {path, bytes, sha256} for the trace's inputs/outputs.
nlohmann::json file_record(const std::string& path, std::int64_t bytes, const std::string& sha256);

}  // namespace sbx
