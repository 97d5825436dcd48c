#pragma once
// JSON Schema (draft-07) validation for the typed IO contract of packs and `sbx exec`. Backed by
// valijson (header-only, Debian's libvalijson-dev), confined to schema_validate.cpp so its heavy
// templates are compiled once. Local "$ref" (#/definitions/...) works; remote references are
// refused when the schema is compiled, because a sandbox runner must not fetch schemas.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/error.hpp"

namespace sbx {

struct SchemaError {
  std::string pointer;  // RFC 6901 JSON pointer into the validated value ("" is the whole value)
  std::string message;
};

class CompiledSchema {
 public:
  // Compiles `schema`; errors name `source` (a file name, "input_schema", ...).
  static Result<CompiledSchema> compile(const nlohmann::json& schema, const std::string& source);
  // Every violation found (empty: valid).
  std::vector<SchemaError> validate(const nlohmann::json& value) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

// Errors as JSON: [{"pointer": "/0/thickness", "message": "..."}].
nlohmann::json schema_errors_json(const std::vector<SchemaError>& errors);

}  // namespace sbx
