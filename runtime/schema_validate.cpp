// GCC 12 at -O2 reports bogus -Wstringop-overflow and -Wrestrict inside std::string::replace as inlined into
// valijson's json_pointer.hpp (a known false positive of that release). It would fail the
// -Werror CI build over third-party code, so it is silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include "runtime/schema_validate.hpp"

#include <stdexcept>

#include <nlohmann/json.hpp>

// valijson reports unparsable schemas by throwing only when this is set; otherwise it aborts.
#define VALIJSON_USE_EXCEPTIONS 1
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

namespace sbx {
namespace {

// A remote "$ref" (anything but a same-document fragment) is refused up front: the sandbox
// runner must not fetch schemas, and valijson would otherwise need a fetch callback.
void find_remote_refs(const nlohmann::json& j, const std::string& at, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) {
      std::string esc;
      for (char c : k) esc += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
      if (k == "$ref" && v.is_string() && !v.get<std::string>().starts_with("#")) out.push_back(at + "/$ref");
      find_remote_refs(v, at + "/" + esc, out);
    }
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) find_remote_refs(j[i], at + "/" + std::to_string(i), out);
  }
}

// valijson names the path as context components: "<root>", "[0]", "[name]" (the brackets hold
// property names unescaped). Converted to an RFC 6901 pointer.
std::string context_to_pointer(const std::vector<std::string>& context) {
  std::string p;
  for (auto& c : context) {
    if (c == "<root>") continue;
    std::string part = c;
    if (part.size() >= 2 && part.front() == '[' && part.back() == ']') part = part.substr(1, part.size() - 2);
    std::string esc;
    for (char ch : part) esc += ch == '~' ? "~0" : ch == '/' ? "~1" : std::string(1, ch);
    p += "/" + esc;
  }
  return p;
}

}  // namespace

struct CompiledSchema::Impl {
  nlohmann::json doc;  // valijson keeps references into the document it parsed
  valijson::Schema schema;
};

Result<CompiledSchema> CompiledSchema::compile(const nlohmann::json& schema, const std::string& source) {
  if (!schema.is_object() && !schema.is_boolean())
    return make_error("schema", source + ": a JSON Schema must be an object or a boolean");
  std::vector<std::string> remote;
  find_remote_refs(schema, "", remote);
  if (!remote.empty())
    return make_error("schema", source + "#" + remote.front() +
                                    ": only local references (\"#/...\") are supported; sbx does not fetch schemas");
  auto impl = std::make_shared<Impl>();
  impl->doc = schema;
  try {
    valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
    valijson::adapters::NlohmannJsonAdapter adapter(impl->doc);
    parser.populateSchema(adapter, impl->schema);
  } catch (const std::exception& e) {
    return make_error("schema", source + ": not a valid draft-07 schema: " + e.what());
  }
  CompiledSchema c;
  c.impl_ = std::move(impl);
  return c;
}

std::vector<SchemaError> CompiledSchema::validate(const nlohmann::json& value) const {
  std::vector<SchemaError> out;
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter target(value);
  try {
    if (validator.validate(impl_->schema, target, &results)) return out;
  } catch (const std::exception& e) {
    // e.g. a pattern std::regex cannot compile: the value is not shown to be valid.
    out.push_back({"", std::string("validator failed: ") + e.what()});
    return out;
  }
  valijson::ValidationResults::Error err;
  while (results.popError(err)) out.push_back({context_to_pointer(err.context), err.description});
  if (out.empty()) out.push_back({"", "does not match the schema"});
  return out;
}

nlohmann::json schema_errors_json(const std::vector<SchemaError>& errors) {
  nlohmann::json a = nlohmann::json::array();
  for (auto& e : errors) a.push_back({{"pointer", e.pointer}, {"message", e.message}});
  return a;
}

}  // namespace sbx
