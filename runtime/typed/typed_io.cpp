#include "runtime/typed/typed_io.hpp"

#include "runtime/base/trace_field.hpp"
namespace sbx {

JsonBounds result_bounds() { return {static_cast<std::size_t>(kMaxResultBytes)}; }

// A contract check's members (#/definitions/contract_check) are named by validation.output's
// paths: validation.input is the same definition.
namespace {
nlohmann::json bounds_json(const JsonBounds& b) {
  return trace_object({{"validation/output/bounds/max_bytes", b.max_bytes},
                       {"validation/output/bounds/max_depth", b.max_depth},
                       {"validation/output/bounds/max_values", b.max_values}});
}
}  // namespace

nlohmann::json result_bounds_json() { return bounds_json(result_bounds()); }

nlohmann::json invalid_check(std::vector<SchemaError>& errs, std::size_t omitted, const JsonBounds& bounds) {
  if (errs.size() > kMaxContractErrors) {
    omitted += errs.size() - kMaxContractErrors;
    errs.resize(kMaxContractErrors);
  }
  nlohmann::json check = trace_object({{"validation/output/status", "invalid"},
                                       {"validation/output/errors", schema_errors_json(errs)},
                                       {"validation/output/bounds", bounds_json(bounds)}});
  if (omitted > 0) put(check, "validation/output/errors_omitted", omitted);
  return check;
}

nlohmann::json file_record(const std::string& path, std::int64_t bytes, const std::string& sha256) {
  // inputs' items are the same definition (#/definitions/file).
  return trace_object({{"outputs/[]/path", path}, {"outputs/[]/bytes", bytes}, {"outputs/[]/sha256", sha256}});
}

}  // namespace sbx
