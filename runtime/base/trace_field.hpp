#pragma once
// The trace record's members, written by name checked when the program is compiled. The record
// (schemas/trace.schema.json; runtime/launch/trace.hpp) is a JSON object put together in layers
// (the facilities' parts, the run's, the typed-IO caller's); a misspelled member would pass every
// build and only fail schema validation in the integration tests, or not at all where the schema
// allows additional members. So its members are written through TraceField: made only from a path
// of kTraceFields (runtime/base/trace_fields.hpp, generated from the schema by
// tests/tools/gen_trace_fields.py), a literal outside it does not compile, as Stage's names do
// (stage.hpp).
//
// A path names the member from the record's top: "usage/network/hosts_summary". The functions
// below write it in the object that holds it (`parent`): the record for a top-level member, the
// item of an array ("[]" in the path), the value of a map entry ("*"), or a part a layer builds
// before it joins the record (enforcement, usage...). The full path says where the member lands;
// which object holds it is the caller's. Members of a free-form map (env names, limit names) are
// data: TraceMapEntry names the map, the key is a value.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/base/trace_fields.hpp"

namespace sbx {

namespace trace_field_detail {
// kTraceFields is sorted (the generator writes it so): a binary search.
consteval std::size_t index_of(std::string_view path) {
  std::size_t lo = 0, hi = kTraceFieldCount;
  while (lo < hi) {
    std::size_t mid = (lo + hi) / 2;
    std::string_view m = kTraceFields[mid];
    if (m == path) return mid;
    if (m < path) lo = mid + 1;
    else hi = mid;
  }
  throw "not a member of the trace record: add it to schemas/trace.schema.json, then run tests/tools/gen_trace_fields.py";
}
constexpr std::string_view last_segment(std::string_view path) {
  std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}
}  // namespace trace_field_detail

// One named member of the record, held as its index in kTraceFields.
class TraceField {
 public:
  // consteval: a path not in kTraceFields, or a map's entry (TraceMapEntry's), does not compile.
  consteval TraceField(const char* path) : index_(checked(path)) {}
  std::string_view path() const { return kTraceFields[index_]; }
  // The member's name in the object that holds it: the path's last segment.
  std::string_view name() const { return trace_field_detail::last_segment(path()); }
  friend constexpr bool operator==(TraceField a, TraceField b) { return a.index_ == b.index_; }

 private:
  static consteval std::uint16_t checked(const char* path) {
    if (trace_field_detail::last_segment(path) == "*") throw "a free-form map's entry: TraceMapEntry, its key a value";
    return static_cast<std::uint16_t>(trace_field_detail::index_of(path));
  }
  std::uint16_t index_;
};

// The entries of a free-form map of the record ("enforcement/limits_applied/*"): their names are
// data (limit names, environment names), given as values to at/put.
class TraceMapEntry {
 public:
  consteval TraceMapEntry(const char* path) : index_(checked(path)) {}
  std::string_view path() const { return kTraceFields[index_]; }

 private:
  static consteval std::uint16_t checked(const char* path) {
    if (trace_field_detail::last_segment(path) != "*") throw "not a free-form map's entry (path/*): TraceField";
    return static_cast<std::uint16_t>(trace_field_detail::index_of(path));
  }
  std::uint16_t index_;
};

// `parent`'s member `f` (made null when absent, as operator[] does).
inline nlohmann::json& at(nlohmann::json& parent, TraceField f) { return parent[std::string(f.name())]; }
template <class V>
void put(nlohmann::json& parent, TraceField f, V&& value) {
  at(parent, f) = std::forward<V>(value);
}

// The entry `key` of the map `map` (whose entries `e` names).
inline nlohmann::json& at(nlohmann::json& map, TraceMapEntry /*e*/, const std::string& key) { return map[key]; }
template <class V>
void put(nlohmann::json& map, TraceMapEntry e, const std::string& key, V&& value) {
  at(map, e, key) = std::forward<V>(value);
}

// An object of named members at once: trace_object({{"result/status", s}, {"result/reason", r}}).
// The values are copied out of the list: a big part is moved in with put instead.
struct TraceMember {
  TraceField field;
  nlohmann::json value;
};
inline nlohmann::json trace_object(std::initializer_list<TraceMember> members) {
  nlohmann::json o = nlohmann::json::object();
  for (const TraceMember& m : members) put(o, m.field, m.value);
  return o;
}

}  // namespace sbx
