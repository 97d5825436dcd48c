#pragma once
// The trace store: one durable JSON file per run under <state>/traces/<run_id>.json. Run ids sort
// by time, so "newest first" is a reverse sort of names.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/paths.hpp"

namespace sbx {

struct TraceSummary {
  std::string run_id;
  std::string started_at;
  std::string status;
  std::optional<int> exit_code;
  std::int64_t wall_ms = 0;
  std::string command;  // argv joined with spaces, shell-quoted where needed
};

Status store_trace(const Dirs& dirs, const std::string& run_id, const std::string& json_text);
// Newest first; at most `newest` of them when not 0 (only those records are read).
Result<std::vector<TraceSummary>> list_traces(const Dirs& dirs, std::size_t newest = 0);
// Exact run id, a unique prefix of one, "last" (the newest run) or "-N" (the Nth newest).
Result<nlohmann::json> load_trace(const Dirs& dirs, const std::string& run_id_or_prefix);

}  // namespace sbx
