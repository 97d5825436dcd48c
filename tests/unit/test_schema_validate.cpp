// runtime/schema_validate: the draft-07 keywords packs use, checked against the official JSON
// Schema test suite (Debian's json-schema-test-suite package), plus the error pointers sbx reports.
#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/schema_validate.hpp"

using nlohmann::json;
using sbx::CompiledSchema;

namespace {

const char* const kSuite = "/usr/share/json-schema-test-suite/tests/draft7/";

// Case groups sbx deliberately does not support, with the reason. A group is matched by
// "<file>: <group description>". Anything not listed here must pass.
const std::set<std::string> kSkippedGroups = {};

bool has_non_local_ref(const json& j) {
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) {
      if (k == "$ref" && v.is_string() && !v.get<std::string>().starts_with("#")) return true;
      if (has_non_local_ref(v)) return true;
    }
  } else if (j.is_array()) {
    for (auto& v : j)
      if (has_non_local_ref(v)) return true;
  }
  return false;
}

struct SuiteCounts {
  int passed = 0, skipped_remote = 0, skipped_listed = 0;
  std::vector<std::string> failures;
};

void run_suite_file(const std::string& file, SuiteCounts& c) {
  std::ifstream in(kSuite + file);
  REQUIRE_MESSAGE(in.good(), "missing ", kSuite, file, " (apt-get install json-schema-test-suite)");
  json groups = json::parse(in);
  for (auto& g : groups) {
    std::string gname = file + ": " + g["description"].get<std::string>();
    if (kSkippedGroups.count(gname)) {
      c.skipped_listed += static_cast<int>(g["tests"].size());
      continue;
    }
    // Remote and $id-relative references: sbx compiles only same-document "#..." references
    // (it never fetches a schema), and refuses the rest when compiling — tested separately below.
    if (has_non_local_ref(g["schema"])) {
      c.skipped_remote += static_cast<int>(g["tests"].size());
      continue;
    }
    auto schema = CompiledSchema::compile(g["schema"], gname);
    if (!schema) {
      c.failures.push_back(gname + ": does not compile: " + schema.error().message);
      continue;
    }
    for (auto& t : g["tests"]) {
      bool valid = schema->validate(t["data"]).empty();
      if (valid == t["valid"].get<bool>()) ++c.passed;
      else c.failures.push_back(gname + " / " + t["description"].get<std::string>() + ": expected " +
                                (t["valid"].get<bool>() ? "valid" : "invalid"));
    }
  }
}

}  // namespace

TEST_CASE("JSON Schema test suite, draft-07, the keywords packs use") {
  SuiteCounts c;
  for (const char* f : {"type.json", "properties.json", "required.json", "additionalProperties.json", "items.json",
                        "enum.json", "const.json", "minimum.json", "maximum.json", "minLength.json",
                        "maxLength.json", "pattern.json", "oneOf.json", "anyOf.json", "ref.json"})
    run_suite_file(f, c);
  std::string all;
  for (auto& f : c.failures) all += f + "\n";
  MESSAGE("suite: ", c.passed, " passed, ", c.skipped_remote, " skipped (non-local $ref), ", c.skipped_listed,
          " skipped (listed)");
  CHECK_MESSAGE(c.failures.empty(), all);
  CHECK(c.passed > 200);  // the files are really there and were really run
}

TEST_CASE("remote references are refused when compiling, with the pointer") {
  auto r = CompiledSchema::compile(json::parse(R"({"properties":{"a":{"$ref":"http://example.com/s.json"}}})"), "s.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("s.json#/properties/a/$ref") != std::string::npos);
}

TEST_CASE("a malformed schema is an error, not an abort") {
  auto r = CompiledSchema::compile(json::parse(R"({"type": 12})"), "bad.json");
  CHECK_FALSE(r.ok());
  CHECK_FALSE(CompiledSchema::compile(json::parse("[1]"), "x").ok());
}

TEST_CASE("errors carry JSON pointers into the value") {
  auto s = CompiledSchema::compile(json::parse(R"({
    "type": "array",
    "items": {"$ref": "#/definitions/rec"},
    "definitions": {"rec": {"type": "object", "required": ["id", "mm"], "additionalProperties": false,
                            "properties": {"id": {"type": "string", "minLength": 1},
                                           "mm": {"type": "number", "minimum": 0}}}}})"),
                                   "in.json");
  REQUIRE(s.ok());
  CHECK(s->validate(json::parse(R"([{"id":"a","mm":1.5}])")).empty());
  auto errs = s->validate(json::parse(R"([{"id":"a","mm":1}, {"id":"b","mm":-2}])"));
  REQUIRE_FALSE(errs.empty());
  bool found = false;
  for (auto& e : errs) found = found || e.pointer == "/1/mm";
  CHECK_MESSAGE(found, sbx::schema_errors_json(errs).dump());
  // additionalProperties: valijson reports the object that holds the extra member, naming it.
  errs = s->validate(json::parse(R"([{"id":"a/b","mm":1,"x~y":2}])"));
  found = false;
  for (auto& e : errs) found = found || (e.pointer == "/0" && e.message.find("x~y") != std::string::npos);
  CHECK_MESSAGE(found, sbx::schema_errors_json(errs).dump());
}
