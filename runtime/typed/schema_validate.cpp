// Validating a value against the node graph built by runtime/typed/schema_compile.cpp.
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <sys/resource.h>

#include "runtime/base/json_io.hpp"
#include "runtime/typed/schema_impl.hpp"

using nlohmann::json;

namespace sbx {

std::string pointer_token(const std::string& key) {
  std::string esc;
  for (char c : key) esc += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return esc;
}

DepthCheck find_too_deep(const json& value, std::size_t max_depth) {
  struct Frame {
    const json* v;
    json::const_iterator it;
    std::size_t index;
    std::string token;  // how the parent reaches this container
  };
  if (!value.is_structured()) return {};
  if (max_depth == 0) return {true, ""};
  std::vector<Frame> stack;
  stack.push_back({&value, value.cbegin(), 0, ""});
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.it == f.v->cend()) {
      stack.pop_back();
      continue;
    }
    const json& child = *f.it;
    if (!child.is_structured()) {
      ++f.it, ++f.index;
      continue;
    }
    std::string token = f.v->is_object() ? pointer_token(f.it.key()) : std::to_string(f.index);
    if (stack.size() + 1 > max_depth) {
      DepthCheck d{true, ""};
      for (std::size_t i = 1; i < stack.size(); ++i) d.pointer += "/" + stack[i].token;
      d.pointer += "/" + token;
      return d;
    }
    ++f.it, ++f.index;
    stack.push_back({&child, child.cbegin(), 0, std::move(token)});  // `f` is not used past here
  }
  return {};
}

namespace {

using schema::kNone;
using schema::Node;

// Validation stops (the value is invalid) when the budget or the frame bound is exhausted.
struct Stop {
  SchemaError error;
};

// The stack one validation may use. The value's depth is bounded before validation starts and
// same-value cycles are refused when compiling, so this only stops long acyclic chains of
// "$ref"/allOf/... (each costs a few hundred bytes; several times that under AddressSanitizer,
// which is why it is measured in bytes, not calls): half the soft limit, at most 4 MiB. (A
// tree 256 levels deep takes under 0.25 MiB in a release build, several MiB under ASan.)
std::size_t stack_allowance() {
  constexpr std::size_t kMax = std::size_t{4} << 20;
  rlimit r{};
  if (::getrlimit(RLIMIT_STACK, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return kMax;
  return std::min<std::size_t>(kMax, r.rlim_cur / 2);
}

std::uintptr_t stack_here() { return reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)); }

struct Errors {
  std::vector<SchemaError> list;
  std::size_t max;
  std::size_t unlisted = 0;
  void add(const std::string& pointer, std::string message) {
    if (list.size() < max) list.push_back({pointer, std::move(message)});
    else ++unlisted;
  }
};

// A property name as it appears in a message: quoted, escaped, and cut at 64 bytes.
std::string quoted(const std::string& name) {
  if (name.size() <= 64) return json(name).dump();
  std::size_t cut = 64;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;  // a UTF-8 boundary
  return json(name.substr(0, cut)).dump() + "...";
}

std::size_t code_points(const std::string& s) {
  return static_cast<std::size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

bool is_integral(const json& v) {
  if (v.is_number_integer()) return true;  // also unsigned
  if (!v.is_number_float()) return false;
  double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d;
}

bool has_type(const json& v, const std::string& t) {
  if (t == "integer") return is_integral(v);
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "boolean") return v.is_boolean();
  return v.is_null();
}

// long double holds every int64 and uint64 exactly (x86-64: 64-bit mantissa).
long double num(const json& v) {
  if (v.is_number_unsigned()) return static_cast<long double>(v.get<std::uint64_t>());
  if (v.is_number_integer()) return static_cast<long double>(v.get<std::int64_t>());
  return static_cast<long double>(v.get<double>());
}

bool multiple_of(const json& v, const json& m) {
  if (v.is_number_integer() && m.is_number_integer() && !v.is_number_unsigned() && !m.is_number_unsigned())
    return v.get<std::int64_t>() % m.get<std::int64_t>() == 0;
  long double q = num(v) / num(m);
  if (!std::isfinite(q)) return false;
  return std::fabs(q - std::round(q)) < 1e-9L;
}

// The value in a form where two values are equal iff JSON Schema calls them equal (1 == 1.0).
void canonical(const json& v, std::string& out) {
  if (v.is_number_float() && is_integral(v) && std::fabs(v.get<double>()) < 9.2e18) {
    out += std::to_string(static_cast<std::int64_t>(v.get<double>()));
  } else if (v.is_object()) {
    out += '{';
    for (auto& [k, m] : v.items()) {  // std::map: keys sorted
      out += json(k).dump() + ':';
      canonical(m, out);
      out += ',';
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (auto& m : v) {
      canonical(m, out);
      out += ',';
    }
    out += ']';
  } else {
    out += v.dump();
  }
}

// A schema's number as the schema spells it: integers as integers ("0", not "0.000000").
std::string str(const json& v) { return v.dump(); }

// The offending value, for the end of a message: compact JSON, cut at 40 bytes and escaped by
// json_excerpt, so that a hostile value can neither flood the message nor reach a terminal raw.
std::string got_value(const json& v) { return " (got " + json_excerpt(v, 40) + ")"; }

// The formats Debian's valijson checked (date, time, date-time), kept so that schemas relying on
// them keep their meaning; other formats are annotations, as draft-07 allows.
bool format_ok(const std::string& format, const std::string& s) {
  static const std::string kTime =
      "([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9]|60)(\\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  static const std::string kDate = "([0-9]+)-(0[1-9]|1[012])-(0[1-9]|[12][0-9]|3[01])";
  static const auto date = EcmaRegex::compile("^" + kDate + "$");
  static const auto time = EcmaRegex::compile("^" + kTime + "$");
  static const auto date_time = EcmaRegex::compile("^" + kDate + "[Tt]" + kTime + "$");
  auto day_fits = [&](std::size_t at) {  // "YYYY-MM-DD" checked by the pattern; the day against the month
    std::size_t dash = s.find('-', at);
    int month = std::stoi(s.substr(dash + 1, 2)), day = std::stoi(s.substr(dash + 4, 2));
    static const int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return day <= kDays[month - 1];
  };
  if (format == "date") return date->search(s) && day_fits(0);
  if (format == "time") return time->search(s);
  if (format == "date-time") return date_time->search(s) && day_fits(0);
  return true;
}

class Validator {
 public:
  Validator(const CompiledSchema::Impl& s, const SchemaLimits& limits)
      : s_(s), lim_(limits), stack_base_(stack_here()), stack_allowance_(stack_allowance()) {}

  // errs == nullptr: only the verdict is wanted (anyOf, oneOf, not, if, contains probe with it).
  bool node(int n, const json& v, Errors* errs);
  std::string ptr;  // where in the value node() is

 private:
  const CompiledSchema::Impl& s_;
  const SchemaLimits& lim_;
  std::uint64_t steps_ = 0;
  std::uintptr_t stack_base_;  // the stack grows down (x86-64, aarch64)
  std::size_t stack_allowance_;

  void charge(std::uint64_t n) {
    steps_ += n;
    if (steps_ > lim_.max_steps)
      throw Stop{{ptr, "validation stopped after " + std::to_string(lim_.max_steps) +
                           " steps (the budget for one document); the document is treated as invalid"}};
  }
  bool child(int n, const json& v, const std::string& token, Errors* errs) {
    std::size_t len = ptr.size();
    ptr += "/" + token;
    bool ok = node(n, v, errs);
    ptr.resize(len);
    return ok;
  }
  bool generic(const Node& n, const json& v, Errors* errs);
  bool number(const Node& n, const json& v, Errors* errs);
  bool string(const Node& n, const json& v, Errors* errs);
  bool array(const Node& n, const json& v, Errors* errs);
  bool object(const Node& n, const json& v, Errors* errs);
  bool members(const Node& n, const json& v, Errors* errs);
  bool combinators(const Node& n, const json& v, Errors* errs);
  std::string got(const json& v) const { return lim_.show_values ? got_value(v) : std::string(); }
};

// An array's or object's size beside a schema's bound (JSON numbers are doubles): exact, since no
// value read here comes near 2^53 members.
double count_of(const json& v) { return static_cast<double>(v.size()); }

// A failed assertion: recorded when errors are wanted; `return` it to stop at the first one
// when they are not.
#define SBX_FAIL(msg)        \
  do {                       \
    ok = false;              \
    if (!errs) return false; \
    errs->add(ptr, msg);     \
  } while (0)

bool Validator::node(int index, const json& v, Errors* errs) {
  const Node& n = s_.node(index);
  charge(1);
  if (n.json->is_boolean()) {
    if (n.json->get<bool>()) return true;
    if (errs) errs->add(ptr, "the schema at #" + n.pointer + " (false) allows no value here");
    return false;
  }
  if (stack_base_ - stack_here() > stack_allowance_)
    throw Stop{{ptr, "subschemas applied too deeply here (past " + std::to_string(stack_allowance_ >> 10) +
                         " KiB of stack); the document is treated as invalid"}};
  bool ok = true;
  if (n.ref != kNone) {
    ok = node(n.ref, v, errs);  // draft-07: the keywords beside "$ref" are ignored
  } else {
    ok = generic(n, v, errs);
    if (ok || errs) {
      bool kind = v.is_number()   ? number(n, v, errs)
                  : v.is_string() ? string(n, v, errs)
                  : v.is_array()  ? array(n, v, errs)
                  : v.is_object() ? object(n, v, errs)
                                  : true;
      ok = kind && ok;
    }
    if (ok || errs) ok = combinators(n, v, errs) && ok;
  }
  return ok;
}

// type, enum, const, format: whatever the value's type.
bool Validator::generic(const Node& n, const json& v, Errors* errs) {
  const json& j = *n.json;
  bool ok = true;
  if (auto t = j.find("type"); t != j.end()) {
    bool match = t->is_string() ? has_type(v, t->get<std::string>())
                                : std::any_of(t->begin(), t->end(),
                                              [&](const json& e) { return has_type(v, e.get<std::string>()); });
    if (!match)
      SBX_FAIL("must be of type " + (t->is_string() ? t->get<std::string>() : t->dump()) + ", not " +
               (is_integral(v) && v.is_number_integer() ? "integer" : v.type_name()) + got(v));
  }
  if (auto e = j.find("enum"); e != j.end()) {
    charge(e->size());
    if (std::none_of(e->begin(), e->end(), [&](const json& c) { return c == v; }))
      SBX_FAIL((e->size() <= 8 && e->dump().size() <= 120
                    ? "must be one of " + e->dump()
                    : "must be one of the " + std::to_string(e->size()) + " values listed in enum") +
               got(v));
  }
  if (auto c = j.find("const"); c != j.end() && *c != v) SBX_FAIL("must equal " + json_excerpt(*c, 40) + got(v));
  if (auto f = j.find("format"); f != j.end() && v.is_string()) {
    charge(1 + v.get_ref<const std::string&>().size() / 64);
    if (!format_ok(f->get<std::string>(), v.get_ref<const std::string&>()))
      SBX_FAIL("must be a valid " + f->get<std::string>() + got(v));
  }
  return ok;
}

bool Validator::number(const Node& n, const json& v, Errors* errs) {
  const json& j = *n.json;
  bool ok = true;
  long double x = num(v);
  if (auto m = j.find("multipleOf"); m != j.end() && !multiple_of(v, *m))
    SBX_FAIL("must be a multiple of " + str(*m) + got(v));
  if (auto m = j.find("minimum"); m != j.end() && x < num(*m)) SBX_FAIL("must be at least " + str(*m) + got(v));
  if (auto m = j.find("maximum"); m != j.end() && x > num(*m)) SBX_FAIL("must be at most " + str(*m) + got(v));
  if (auto m = j.find("exclusiveMinimum"); m != j.end() && x <= num(*m))
    SBX_FAIL("must be greater than " + str(*m) + got(v));
  if (auto m = j.find("exclusiveMaximum"); m != j.end() && x >= num(*m))
    SBX_FAIL("must be less than " + str(*m) + got(v));
  return ok;
}

bool Validator::string(const Node& n, const json& v, Errors* errs) {
  const json& j = *n.json;
  const std::string& sv = v.get_ref<const std::string&>();
  bool ok = true;
  std::size_t len = 0;
  auto has = [&](const char* kw) { return j.contains(kw); };
  if (has("minLength") || has("maxLength")) {
    charge(1 + sv.size() / 64);
    len = code_points(sv);
  }
  if (has("minLength") && static_cast<double>(len) < j.at("minLength").get<double>())
    SBX_FAIL("must be at least " + str(j.at("minLength")) + " characters long, not " + std::to_string(len) + got(v));
  if (has("maxLength") && static_cast<double>(len) > j.at("maxLength").get<double>())
    SBX_FAIL("must be at most " + str(j.at("maxLength")) + " characters long, not " + std::to_string(len) + got(v));
  for (auto& re : n.pattern) {
    charge(1 + sv.size() / 64);
    if (!re.search(sv)) SBX_FAIL("must match the pattern " + j.at("pattern").dump() + got(v));
  }
  return ok;
}

bool Validator::array(const Node& n, const json& v, Errors* errs) {
  const json& j = *n.json;
  bool ok = true;
  if (auto m = j.find("minItems"); m != j.end() && count_of(v) < m->get<double>())
    SBX_FAIL("must have at least " + str(*m) + " items, not " + std::to_string(v.size()));
  if (auto m = j.find("maxItems"); m != j.end() && count_of(v) > m->get<double>())
    SBX_FAIL("must have at most " + str(*m) + " items, not " + std::to_string(v.size()));
  if (auto u = j.find("uniqueItems"); u != j.end() && u->get<bool>()) {
    // Canonical forms in a hash set: linear, where comparing every pair would be quadratic.
    std::unordered_set<std::string> seen;
    for (std::size_t i = 0; i < v.size(); ++i) {
      std::string c;
      canonical(v[i], c);
      charge(1 + c.size() / 64);
      if (!seen.insert(std::move(c)).second) {
        SBX_FAIL("items must be unique; item " + std::to_string(i) + " repeats an earlier one");
        break;
      }
    }
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    int sub = !n.items_is_tuple    ? (n.items.empty() ? kNone : n.items[0])
              : i < n.items.size() ? n.items[i]
                                   : n.additional_items;
    if (sub != kNone && !child(sub, v[i], std::to_string(i), errs)) {
      ok = false;
      if (!errs) return false;
    }
  }
  if (n.contains != kNone) {
    bool found = false;
    for (std::size_t i = 0; i < v.size() && !found; ++i) found = child(n.contains, v[i], std::to_string(i), nullptr);
    if (!found) SBX_FAIL("must contain an item that matches the schema at #" + s_.node(n.contains).pointer);
  }
  return ok;
}

bool Validator::object(const Node& n, const json& v, Errors* errs) {
  const json& j = *n.json;
  bool ok = true;
  if (auto m = j.find("minProperties"); m != j.end() && count_of(v) < m->get<double>())
    SBX_FAIL("must have at least " + str(*m) + " properties, not " + std::to_string(v.size()));
  if (auto m = j.find("maxProperties"); m != j.end() && count_of(v) > m->get<double>())
    SBX_FAIL("must have at most " + str(*m) + " properties, not " + std::to_string(v.size()));
  if (auto r = j.find("required"); r != j.end()) {
    charge(r->size());
    for (auto& name : *r)
      if (!v.contains(name.get_ref<const std::string&>()))
        SBX_FAIL("the required property " + quoted(name.get<std::string>()) + " is missing");
  }
  for (auto& [key, names] : n.dep_required) {
    if (!v.contains(key)) continue;
    charge(names.size());
    for (auto& name : names)
      if (!v.contains(name)) SBX_FAIL("property " + quoted(name) + " is required when " + quoted(key) + " is present");
  }
  for (auto& [key, sub] : n.dep_schemas)
    if (v.contains(key) && !node(sub, v, errs)) {
      ok = false;
      if (!errs) return false;
    }
  if (n.property_names != kNone)
    for (auto& [key, unused] : v.items())
      if (!node(n.property_names, json(key), nullptr))
        SBX_FAIL("the property name " + quoted(key) + " does not match propertyNames");
  return members(n, v, errs) && ok;
}

// properties, patternProperties and additionalProperties, member by member.
bool Validator::members(const Node& n, const json& v, Errors* errs) {
  bool ok = true;
  bool any = !n.properties.empty() || !n.pattern_properties.empty() || n.additional_properties != kNone;
  if (!any) return true;
  for (auto& [key, member] : v.items()) {
    charge(1);
    bool matched = false, member_ok = true;
    auto it = std::lower_bound(n.properties.begin(), n.properties.end(), key,
                               [](const auto& p, const std::string& k) { return p.first < k; });
    if (it != n.properties.end() && it->first == key) {
      matched = true;
      member_ok = child(it->second, member, pointer_token(key), errs);
    }
    for (auto& [re, sub] : n.pattern_properties) {
      if (!member_ok && !errs) break;
      charge(1 + key.size() / 64);
      if (!re.search(key)) continue;
      matched = true;
      member_ok = child(sub, member, pointer_token(key), errs) && member_ok;
    }
    if (!matched && n.additional_properties != kNone) {
      const json& add = *s_.node(n.additional_properties).json;
      if (add.is_boolean() && !add.get<bool>()) SBX_FAIL("the property " + quoted(key) + " is not allowed");
      else member_ok = child(n.additional_properties, member, pointer_token(key), errs);
    }
    if (!member_ok) {
      ok = false;
      if (!errs) return false;
    }
  }
  return ok;
}

bool Validator::combinators(const Node& n, const json& v, Errors* errs) {
  bool ok = true;
  for (int sub : n.all_of)
    if (!node(sub, v, errs)) {
      ok = false;
      if (!errs) return false;
    }
  if (!n.any_of.empty() &&
      std::none_of(n.any_of.begin(), n.any_of.end(), [&](int sub) { return node(sub, v, nullptr); }))
    SBX_FAIL("must match at least one of the " + std::to_string(n.any_of.size()) + " schemas in anyOf");
  if (!n.one_of.empty()) {
    std::size_t matches = 0;
    for (std::size_t i = 0; i < n.one_of.size() && matches < 2; ++i) matches += node(n.one_of[i], v, nullptr);
    if (matches != 1)
      SBX_FAIL("must match exactly one of the " + std::to_string(n.one_of.size()) + " schemas in oneOf, not " +
               (matches ? "more" : "none"));
  }
  if (n.not_ != kNone && node(n.not_, v, nullptr)) SBX_FAIL("must not match the schema in not");
  if (n.if_ != kNone) {
    int branch = node(n.if_, v, nullptr) ? n.then_ : n.else_;
    if (branch != kNone && !node(branch, v, errs)) {
      ok = false;
      if (!errs) return false;
    }
  }
  return ok;
}

#undef SBX_FAIL

}  // namespace

std::vector<SchemaError> CompiledSchema::validate(const json& value, const SchemaLimits& limits) const {
  // Before any recursion: nothing below (nor json's operator==) descends deeper than this.
  auto deep = find_too_deep(value, limits.max_depth);
  if (deep.found)
    return {{deep.pointer, "nested deeper than " + std::to_string(limits.max_depth) +
                               " levels of arrays and objects; not validated"}};
  Errors errs{{}, std::max<std::size_t>(limits.max_errors, 1)};
  Validator v(*impl_, limits);
  try {
    if (v.node(0, value, &errs)) return {};
  } catch (const Stop& stop) { return {stop.error}; }
  if (errs.unlisted) errs.list.push_back({"", std::to_string(errs.unlisted) + " more error(s) not listed"});
  if (errs.list.empty()) errs.list.push_back({"", "does not match the schema"});
  return errs.list;
}

nlohmann::json schema_errors_json(const std::vector<SchemaError>& errors) {
  json a = json::array();
  for (auto& e : errors) a.push_back({{"pointer", e.pointer}, {"message", e.message}});
  return a;
}

}  // namespace sbx
