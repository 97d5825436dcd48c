#pragma once
// Internal to runtime/typed/schema_compile.cpp and runtime/typed/schema_validate.cpp: a draft-07 schema
// compiled into a graph of nodes, one per subschema location, that refer to each other by index.
// "$ref" is resolved once, at compile time, so validation never looks anything up by string.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/typed/ecma_regex.hpp"
#include "runtime/typed/schema_validate.hpp"

namespace sbx::schema {

inline constexpr int kNone = -1;

struct Node {
  std::string pointer;                   // RFC 6901 pointer of this subschema in the schema document
  const nlohmann::json* json = nullptr;  // the subschema itself (an object or a boolean)
  int ref = kNone;                       // draft-07: a "$ref" makes every sibling keyword ignored
  // Applied to the same instance (they consume no instance depth).
  std::vector<int> all_of, any_of, one_of;
  int not_ = kNone, if_ = kNone, then_ = kNone, else_ = kNone;
  std::vector<std::pair<std::string, int>> dep_schemas;
  std::vector<std::pair<std::string, std::vector<std::string>>> dep_required;
  // Applied to members and items.
  std::vector<std::pair<std::string, int>> properties;  // sorted by name
  std::vector<std::pair<EcmaRegex, int>> pattern_properties;
  int additional_properties = kNone, property_names = kNone;
  bool items_is_tuple = false;
  std::vector<int> items;  // one schema for every item, or the tuple
  int additional_items = kNone, contains = kNone;
  // Assertions whose operand is not a schema.
  std::vector<EcmaRegex> pattern;  // zero or one
};

}  // namespace sbx::schema

namespace sbx {

struct CompiledSchema::Impl {
  nlohmann::json doc;               // nodes point into it
  std::vector<schema::Node> nodes;  // nodes[0] is the root
  // Nodes refer to each other by int index (schema::kNone for none); every index looked up is
  // one the compiler handed out, never kNone.
  schema::Node& node(int i) { return nodes[static_cast<std::size_t>(i)]; }
  const schema::Node& node(int i) const { return nodes[static_cast<std::size_t>(i)]; }
};

}  // namespace sbx
