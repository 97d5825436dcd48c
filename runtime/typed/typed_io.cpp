#include "runtime/typed/typed_io.hpp"

namespace sbx {

JsonBounds result_bounds() { return {static_cast<std::size_t>(kMaxResultBytes)}; }

namespace {
nlohmann::json bounds_json(const JsonBounds& b) {
  return {{"max_bytes", b.max_bytes}, {"max_depth", b.max_depth}, {"max_values", b.max_values}};
}
}  // namespace

nlohmann::json result_bounds_json() { return bounds_json(result_bounds()); }

nlohmann::json invalid_check(std::vector<SchemaError>& errs, std::size_t omitted, const JsonBounds& bounds) {
  if (errs.size() > kMaxContractErrors) {
    omitted += errs.size() - kMaxContractErrors;
    errs.resize(kMaxContractErrors);
  }
  nlohmann::json check = {{"status", "invalid"}, {"errors", schema_errors_json(errs)}, {"bounds", bounds_json(bounds)}};
  if (omitted > 0) check["errors_omitted"] = omitted;
  return check;
}

nlohmann::json file_record(const std::string& path, std::int64_t bytes, const std::string& sha256) {
  return {{"path", path}, {"bytes", bytes}, {"sha256", sha256}};
}

}  // namespace sbx
