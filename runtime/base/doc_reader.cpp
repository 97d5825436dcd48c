#include "runtime/base/doc_reader.hpp"

#include <algorithm>

#include "runtime/base/json_io.hpp"

namespace sbx {
using nlohmann::json;

std::string json_type_name(const json& j) {
  return j.is_object()    ? "object"
         : j.is_array()   ? "array"
         : j.is_string()  ? "string"
         : j.is_boolean() ? "boolean"
         : j.is_number()  ? "number"
                          : "null";
}

std::string pointer_join(const std::string& pointer, std::string_view key) {
  return pointer + "/" + pointer_token(key);
}

const json& DocReader::at(std::string_view key) {
  seen_.emplace_back(key);
  return j_.at(key);
}

DocReader DocReader::member(std::string_view key) {
  seen_.emplace_back(key);
  return DocReader(j_.at(key), src_, pointer_of(key));
}

Error DocReader::fail_at(const std::string& pointer, const std::string& what) const {
  const std::string& where = pointer.empty() ? src_.root_text : pointer;
  if (src_.collect) src_.collect(DocProblem{pointer, what});
  return make_error(src_.stage, src_.name + ": " + (where.empty() ? "" : where + ": ") + what);
}

Status DocReader::check_object(const std::string& what) const {
  if (!j_.is_object()) return fail(what);
  return {};
}

Status DocReader::check_array(const std::string& what) const {
  if (!j_.is_array()) return fail(what);
  return {};
}

Status DocReader::finish(UnknownKeyText text) const {
  if (!j_.is_object()) return {};
  Status first;
  for (auto& [k, v] : j_.items()) {
    bool read = false;
    for (auto& s : seen_) read = read || s == k;
    if (read) continue;
    std::string what = "unknown key";
    if (text.name) what += " '" + k + "'";
    if (text.known) {
      std::vector<std::string_view> names;
      for (auto& s : seen_)
        if (std::find(names.begin(), names.end(), s) == names.end()) names.push_back(s);
      std::string list;
      for (auto n : names) list += (list.empty() ? "" : ", ") + std::string(n);
      what += " (known: " + list + ")";
    }
    Error e = fail_key(k, what);
    if (!src_.collect) return e;
    if (first) first = e;
  }
  return first;
}

std::optional<std::int64_t> DocReader::integer_in(const json& v, std::int64_t lo, std::int64_t hi) {
  if (v.is_number_unsigned()) {  // nlohmann keeps every non-negative integer as unsigned
    std::uint64_t u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(hi) || (lo > 0 && u < static_cast<std::uint64_t>(lo))) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (!v.is_number_integer()) return std::nullopt;
  std::int64_t n = v.get<std::int64_t>();
  if (n < lo || n > hi) return std::nullopt;
  return n;
}

Status DocReader::check_string(const json& v, const std::string& pointer) const {
  if (!v.is_string()) return fail_at(pointer, "must be a string");
  if (src_.refuse_nul && v.get_ref<const std::string&>().find('\0') != std::string::npos)
    return fail_at(pointer, "must not contain a NUL byte");
  return {};
}

Status DocReader::get_string(std::string_view key, std::string& out) {
  seen_.emplace_back(key);
  if (!has(key)) return {};
  SBX_TRY(check_string(j_.at(key), pointer_of(key)));
  out = j_.at(key).get<std::string>();
  return {};
}

Status DocReader::get_bool(std::string_view key, bool& out, const std::string& what) {
  seen_.emplace_back(key);
  if (!has(key)) return {};
  if (!j_.at(key).is_boolean()) return fail_key(key, what);
  out = j_.at(key).get<bool>();
  return {};
}

Status DocReader::get_int(std::string_view key, std::int64_t& out, std::int64_t lo, std::int64_t hi,
                          const std::string& what) {
  seen_.emplace_back(key);
  if (!has(key)) return {};
  auto n = integer_in(j_.at(key), lo, hi);
  if (!n)
    return fail_key(
        key, what.empty() ? "must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi) : what);
  out = *n;
  return {};
}

Status DocReader::get_u64(std::string_view key, std::uint64_t& out, const std::string& what) {
  seen_.emplace_back(key);
  if (!has(key)) return {};
  const json& v = j_.at(key);
  if (v.is_number_unsigned()) out = v.get<std::uint64_t>();
  else if (v.is_number_integer() && v.get<std::int64_t>() >= 0) out = static_cast<std::uint64_t>(v.get<std::int64_t>());
  else return fail_key(key, what);
  return {};
}

Status DocReader::get_strings(std::string_view key, std::vector<std::string>& out, const std::string& what) {
  seen_.emplace_back(key);
  if (!has(key)) return {};
  const json& v = j_.at(key);
  if (!v.is_array()) return fail_key(key, what);
  std::vector<std::string> got;
  for (std::size_t i = 0; i < v.size(); ++i) {
    SBX_TRY(check_string(v[i], pointer_of(key) + "/" + std::to_string(i)));
    got.push_back(v[i].get<std::string>());
  }
  out = std::move(got);
  return {};
}

Status DocReader::quantity_value(std::string_view key, std::int64_t n, bool positive, std::int64_t max,
                                 std::optional<std::int64_t>& out) const {
  if (n < 0 || (positive && n == 0))
    return fail_key(key, positive ? "must be greater than zero" : "must not be negative");
  if (n > max) return fail_key(key, "must be at most " + std::to_string(max));
  out = n;
  return {};
}

}  // namespace sbx
