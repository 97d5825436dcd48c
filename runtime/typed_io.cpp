#include "runtime/typed_io.hpp"

namespace sbx {

JsonBounds result_bounds() { return {static_cast<std::size_t>(kMaxResultBytes)}; }

nlohmann::json result_bounds_json() {
  JsonBounds b = result_bounds();
  return {{"max_bytes", b.max_bytes}, {"max_depth", b.max_depth}, {"max_values", b.max_values}};
}

nlohmann::json file_record(const std::string& path, std::int64_t bytes, const std::string& sha256) {
  return {{"path", path}, {"bytes", bytes}, {"sha256", sha256}};
}

}  // namespace sbx
