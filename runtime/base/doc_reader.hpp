#pragma once
// DocReader: the one way sbx reads a document it was given (a profile or RunSpec, pack.json, an
// exec request, a seccomp policy). Strict: each member is consumed by a typed getter, and
// finish() reports the members nobody read. Every error reads "<source>: <JSON pointer>: <what>",
// the pointer (RFC 6901) naming the exact value, so that a caller can find the mistake in a
// document of any size; an object or array inside gets a child reader that carries its pointer.
//
// Two ways to fail: by default the first error is returned and the caller stops (SBX_TRY). With
// DocSource::collect set, each failure is also appended there and the caller may go on, so that
// `sbx pack validate` lists every problem of a manifest at once (runtime/typed/pack.cpp).
//
// The reader does not parse text: the document is already bounded in size, depth and value count
// by parse_json (json_io.hpp), which every reader's input passes through first.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"

namespace sbx {

// One failure found in a document: where (a JSON pointer, "" for the document) and what.
struct DocProblem {
  std::string pointer;
  std::string message;
};

// What a reader's errors name and how they read.
struct DocSource {
  std::string name;  // "profile p.json", "pack.json", "exec request", "policy.json"
  Stage stage;       // Error::stage of every failure
  // How the document's own pointer ("") reads in a message: "" leaves it out ("<source>: <what>");
  // the seccomp policy has always said "/" there.
  std::string root_text;
  // A NUL byte in a string would silently cut it where it becomes a C string (argv, environment,
  // paths): get_string and get_strings refuse one when this is set.
  bool refuse_nul = true;
  std::function<void(const DocProblem&)> collect;  // when set, every failure is also handed here
};

// How finish() words a member nobody read (always at the member's own pointer).
struct UnknownKeyText {
  bool name = false;   // "unknown key 'k'"
  bool known = false;  // "... (known: a, b, c)": the keys read or declared, in that order
};

// The JSON type of `j` as a message says it: "object", "array", "string", "boolean", "number", "null".
std::string json_type_name(const nlohmann::json& j);

// `pointer` + "/" + the token of `key`, escaped per RFC 6901 ('~' as "~0", '/' as "~1").
std::string pointer_join(const std::string& pointer, std::string_view key);

class DocReader {
 public:
  // `src` must outlive the reader and every child made from it.
  DocReader(const nlohmann::json& j, const DocSource& src, std::string pointer = "")
      : j_(j), src_(src), pointer_(std::move(pointer)) {}

  const nlohmann::json& value() const { return j_; }
  const std::string& pointer() const { return pointer_; }
  const DocSource& source() const { return src_; }
  std::string pointer_of(std::string_view key) const { return pointer_join(pointer_, key); }
  std::string pointer_of(std::size_t index) const { return pointer_ + "/" + std::to_string(index); }

  // Members. has(): present and not null (null means "not given" in every sbx document).
  bool contains(std::string_view key) const { return j_.is_object() && j_.contains(key); }
  bool has(std::string_view key) const { return contains(key) && !j_.at(key).is_null(); }
  // The member `key` (which must exist), marked read.
  const nlohmann::json& at(std::string_view key);
  // A reader for the member `key` (which must exist), marked read.
  DocReader member(std::string_view key);
  // A reader for element `index` of an array (which must exist).
  DocReader element(std::size_t index) const { return DocReader(j_.at(index), src_, pointer_of(index)); }
  // Marks members read without reading them (free text, or members read elsewhere).
  void ignore(std::string_view key) { seen_.emplace_back(key); }
  void known(std::initializer_list<const char*> keys) {
    for (auto* k : keys) seen_.emplace_back(k);
  }

  // Failures, at this value, at one of its members or elements, or anywhere below.
  Error fail(const std::string& what) const { return fail_at(pointer_, what); }
  Error fail_key(std::string_view key, const std::string& what) const { return fail_at(pointer_of(key), what); }
  Error fail_index(std::size_t index, const std::string& what) const { return fail_at(pointer_of(index), what); }
  Error fail_at(const std::string& pointer, const std::string& what) const;

  Status check_object(const std::string& what = "must be a JSON object") const;
  Status check_array(const std::string& what = "must be an array") const;
  // Each member nobody read or declared is an error; without `collect`, the first one only.
  Status finish(UnknownKeyText text = {}) const;

  // Typed getters: a member that is absent or null leaves `out` as it is.
  Status get_string(std::string_view key, std::string& out);
  Status get_bool(std::string_view key, bool& out, const std::string& what = "must be true or false");
  // An integer within [lo, hi]: floats, larger values and anything not a number fail.
  Status get_int(std::string_view key, std::int64_t& out, std::int64_t lo, std::int64_t hi,
                 const std::string& what = "");
  // get_int into a narrower integer (int, std::uint32_t); [lo, hi] must fit it.
  template <typename I>
  Status get_integer(std::string_view key, I& out, std::int64_t lo, std::int64_t hi, const std::string& what = "") {
    std::int64_t n = static_cast<std::int64_t>(out);
    Status st = get_int(key, n, lo, hi, what);
    if (st) out = static_cast<I>(n);
    return st;
  }
  Status get_u64(std::string_view key, std::uint64_t& out, const std::string& what = "must be a non-negative integer");
  Status get_strings(std::string_view key, std::vector<std::string>& out,
                     const std::string& what = "must be an array of strings");
  // A number in the key's base unit, or a string with a unit parsed by `parse` (units.hpp).
  // Null resets `out`. `max` bounds what the rest of sbx computes with (deadlines, mount options,
  // cgroup files): a value past it is an error here, not an overflow there.
  template <typename Parse>
  Status get_quantity(std::string_view key, std::optional<std::int64_t>& out, Parse parse, bool positive,
                      std::int64_t max);

  // The checks behind the getters, for a value that is not a member (an array's element).
  static std::optional<std::int64_t> integer_in(const nlohmann::json& v, std::int64_t lo, std::int64_t hi);
  Status check_string(const nlohmann::json& v, const std::string& pointer) const;

 private:
  Status quantity_value(std::string_view key, std::int64_t n, bool positive, std::int64_t max,
                        std::optional<std::int64_t>& out) const;

  const nlohmann::json& j_;
  const DocSource& src_;
  std::string pointer_;
  std::vector<std::string> seen_;
};

template <typename Parse>
Status DocReader::get_quantity(std::string_view key, std::optional<std::int64_t>& out, Parse parse, bool positive,
                               std::int64_t max) {
  seen_.emplace_back(key);
  if (!contains(key)) return {};
  const nlohmann::json& v = j_.at(key);
  if (v.is_null()) {
    out.reset();
    return {};
  }
  std::int64_t n = 0;
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max))
    return fail_key(key, "must be at most " + std::to_string(max));
  if (v.is_number_integer()) {
    n = v.get<std::int64_t>();
  } else if (v.is_string()) {
    Result<std::int64_t> r = parse(v.get<std::string>());
    if (!r) return fail_key(key, r.error().message);
    n = *r;
  } else {
    return fail_key(key, "must be a number or a string with a unit");
  }
  return quantity_value(key, n, positive, max, out);
}

}  // namespace sbx
