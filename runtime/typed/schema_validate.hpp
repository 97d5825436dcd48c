#pragma once
// JSON Schema (draft-07) validation for the typed IO contract of packs and `sbx exec`. Both the
// schema and the validated value may be hostile, so this is sbx's own validator with bounds
// everywhere (Debian 12's valijson matches "pattern" with a backtracking std::regex built per
// call and recurses without a depth bound, which no wrapper can fix):
//  - compiling refuses what it does not implement instead of ignoring it: another "$schema"
//    draft, keywords of later drafts (prefixItems, dependentRequired, unevaluated*, ...),
//    remote references (a sandbox runner must not fetch schemas), patterns RE2 cannot run
//    (lookaround, backreferences), and "$ref"/allOf/... cycles that would recurse forever
//    without reaching into the value ({"$ref": "#"});
//  - patterns run on RE2, in time linear in the string (runtime/typed/ecma_regex.hpp);
//  - validation refuses a value nested deeper than SchemaLimits::max_depth before descending,
//    and stops at a step budget (enum, uniqueItems, patterns over a large document).
// Compile and validation errors name the place as an RFC 6901 JSON pointer.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/base/error.hpp"

namespace sbx {

struct SchemaError {
  std::string pointer;  // RFC 6901 JSON pointer ("" is the whole value or schema)
  std::string message;
};

struct SchemaLimits {
  std::size_t max_depth = 256;           // arrays/objects nested in the value (and the schema)
  std::uint64_t max_steps = 20'000'000;  // about a second of work; past it the value is invalid
  std::size_t max_errors = 100;          // listed; the rest are counted in one last entry
  // Messages end with the offending value, cut to 40 bytes ("(got \"AB1\")"). Off for what the
  // sandbox produced: an invalid result is withheld from the caller, excerpts included.
  bool show_values = true;
};

// Everything compiling found: errors make the schema unusable; warnings (unknown keywords, which
// draft-07 ignores) do not, unless compiled strictly.
struct SchemaReport {
  std::vector<SchemaError> errors, warnings;
};

// Limits for validating what a sandbox produced (a result): no values quoted in messages.
inline const SchemaLimits kProducedValues = [] {
  SchemaLimits l;
  l.show_values = false;
  return l;
}();

class CompiledSchema {
 public:
  // Compiles `schema`; the error message is "<source>#<pointer>: <what>", and `where` (when
  // given) receives the pointer into the schema and the bare message.
  static Result<CompiledSchema> compile(const nlohmann::json& schema, const std::string& source,
                                        SchemaError* where = nullptr);
  // The same, listing every problem in `report` (errors sorted by pointer); `strict` makes an
  // unknown keyword an error instead of a warning.
  static Result<CompiledSchema> compile(const nlohmann::json& schema, const std::string& source, SchemaReport* report,
                                        bool strict);
  // Every violation found (empty: valid).
  std::vector<SchemaError> validate(const nlohmann::json& value, const SchemaLimits& limits = {}) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

// Errors as JSON: [{"pointer": "/0/thickness", "message": "..."}].
nlohmann::json schema_errors_json(const std::vector<SchemaError>& errors);

// The pointer of the first array or object nested deeper than `max_depth` in `value`, or "" with
// found == false. Iterative, so a 50,000-deep value cannot exhaust the stack here.
struct DepthCheck {
  bool found = false;
  std::string pointer;
};
DepthCheck find_too_deep(const nlohmann::json& value, std::size_t max_depth);

// "~" and "/" escaped for one JSON pointer token.
std::string pointer_token(const std::string& key);

}  // namespace sbx
