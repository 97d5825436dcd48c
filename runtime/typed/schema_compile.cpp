// Compiling a draft-07 schema into the node graph of runtime/typed/schema_impl.hpp. Everything walks
// with explicit work lists, not recursion: schema documents are caller input.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "runtime/typed/schema_impl.hpp"

using nlohmann::json;

namespace sbx {
namespace {

using schema::kNone;
using schema::Node;

// Keywords of drafts after 07. A draft-07 validator ignores unknown keywords, so a schema
// written for 2019-09/2020-12 would compile and let invalid documents through; refused instead.
const std::set<std::string> kLaterDraftKeywords = {
    "prefixItems",   "unevaluatedProperties", "unevaluatedItems", "dependentRequired", "dependentSchemas",
    "minContains",   "maxContains",           "$anchor",          "$dynamicRef",       "$dynamicAnchor",
    "$recursiveRef", "$recursiveAnchor",      "$vocabulary"};

// Every draft-07 keyword (validation, applicator, core and annotation vocabularies), and "$defs",
// which sbx accepts beside "definitions". Anything else in a schema object is unknown: draft-07
// says to ignore it, which turns a misspelled "requried" or "patern" into an assertion that never
// runs, so it is reported (a warning, an error under --strict).
const std::set<std::string> kDraft7Keywords = {"$schema",
                                               "$id",
                                               "$ref",
                                               "$comment",
                                               "$defs",
                                               "title",
                                               "description",
                                               "default",
                                               "readOnly",
                                               "writeOnly",
                                               "examples",
                                               "multipleOf",
                                               "maximum",
                                               "exclusiveMaximum",
                                               "minimum",
                                               "exclusiveMinimum",
                                               "maxLength",
                                               "minLength",
                                               "pattern",
                                               "additionalItems",
                                               "items",
                                               "maxItems",
                                               "minItems",
                                               "uniqueItems",
                                               "contains",
                                               "maxProperties",
                                               "minProperties",
                                               "required",
                                               "additionalProperties",
                                               "definitions",
                                               "properties",
                                               "patternProperties",
                                               "dependencies",
                                               "propertyNames",
                                               "const",
                                               "enum",
                                               "type",
                                               "format",
                                               "contentMediaType",
                                               "contentEncoding",
                                               "if",
                                               "then",
                                               "else",
                                               "allOf",
                                               "anyOf",
                                               "oneOf",
                                               "not"};

// Edit distance (insertions, deletions, substitutions, adjacent swaps), for "did you mean".
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t sub = d[i - 1][j - 1] + (std::tolower(a[i - 1]) != std::tolower(b[j - 1]));
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, sub});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string unknown_keyword_message(const std::string& k) {
  std::string msg = json(k).dump() + " is not a draft-07 keyword, so it checks nothing";
  if (k.size() > 64) return msg;  // a long name is no typo of a keyword; spare the quadratic distance
  std::string best;
  std::size_t best_d = 3;  // up to two edits: "requried", "patern", "minimun"
  for (auto& kw : kDraft7Keywords)
    if (std::size_t dist = edit_distance(k, kw); dist < best_d) best = kw, best_d = dist;
  if (!best.empty()) msg += " (did you mean " + json(best).dump() + "?)";
  return msg;
}

const std::set<std::string> kTypeNames = {"null", "boolean", "object", "array", "number", "string", "integer"};

bool is_draft7_uri(const std::string& s) {
  for (const char* u : {"http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-07/schema",
                        "https://json-schema.org/draft-07/schema#", "https://json-schema.org/draft-07/schema"})
    if (s == u) return true;
  return false;
}

bool is_schema(const json& j) { return j.is_object() || j.is_boolean(); }

bool is_count(const json& j) {
  if (j.is_number_unsigned() || (j.is_number_integer() && j.get<std::int64_t>() >= 0)) return true;
  if (!j.is_number_float()) return false;
  double d = j.get<double>();
  return d >= 0 && d == static_cast<double>(static_cast<std::uint64_t>(d));
}

struct Compiler {
  Compiler(CompiledSchema::Impl& impl) : s(impl) {}

  CompiledSchema::Impl& s;
  std::map<std::string, int> by_pointer;
  std::map<std::string, std::string> anchors;  // "$id": "#name" -> pointer
  std::vector<int> work;
  std::vector<std::pair<int, std::string>> refs;  // node, "$ref" value
  std::vector<SchemaError> errors, warnings;      // every problem found, not only the first
  bool strict = false;                            // unknown keywords are errors, not warnings

  bool fail(std::string pointer, std::string message) {
    errors.push_back({std::move(pointer), std::move(message)});
    return false;
  }

  int node_at(const std::string& pointer, const json& j) {
    auto [it, fresh] = by_pointer.emplace(pointer, static_cast<int>(s.nodes.size()));
    if (!fresh) return it->second;
    s.nodes.push_back(Node{});
    s.nodes.back().pointer = pointer;
    s.nodes.back().json = &j;
    work.push_back(it->second);
    return it->second;
  }

  // A keyword whose value must be one schema.
  bool one(int n, const char* kw, int Node::*field) {
    const json& j = *s.node(n).json;
    auto it = j.find(kw);
    if (it == j.end()) return true;
    std::string at = s.node(n).pointer + "/" + kw;
    if (!is_schema(*it)) return fail(at, std::string(kw) + " must be a schema (an object or a boolean)");
    int c = node_at(at, *it);
    s.node(n).*field = c;
    return true;
  }

  // allOf/anyOf/oneOf, and items in its tuple form.
  bool list(int n, const char* kw, std::vector<int> Node::*field, bool allow_empty) {
    const json& j = *s.node(n).json;
    auto it = j.find(kw);
    if (it == j.end()) return true;
    std::string at = s.node(n).pointer + "/" + kw;
    if (!it->is_array() || (!allow_empty && it->empty()))
      return fail(at, std::string(kw) + " must be a" + (allow_empty ? "n" : " non-empty") + " array of schemas");
    std::vector<int> out;
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& e = (*it)[i];
      std::string ea = at + "/" + std::to_string(i);
      if (!is_schema(e)) {
        fail(ea, "must be a schema (an object or a boolean)");
        continue;
      }
      out.push_back(node_at(ea, e));
    }
    bool ok = out.size() == it->size();
    s.node(n).*field = std::move(out);
    return ok;
  }

  // properties, patternProperties, definitions: an object whose members are schemas.
  bool members(int n, const char* kw, std::vector<std::pair<std::string, int>>* out) {
    const json& j = *s.node(n).json;
    auto it = j.find(kw);
    if (it == j.end()) return true;
    std::string at = s.node(n).pointer + "/" + kw;
    if (!it->is_object()) return fail(at, std::string(kw) + " must be an object of schemas");
    bool ok = true;
    for (auto& [k, v] : it->items()) {
      std::string ma = at + "/" + pointer_token(k);
      if (!is_schema(v)) {
        ok = fail(ma, "must be a schema (an object or a boolean)");
        continue;
      }
      int c = node_at(ma, v);
      if (out) out->emplace_back(k, c);
    }
    return ok;
  }

  bool assertions(int n);
  bool keyword(int n, const std::string& k, const json& v);
  bool applicators(int n);
  bool compile_node(int n);
  bool resolve_refs();
  bool find_cycles();
};

// Every keyword of one schema object is checked, so that all of its problems are listed at once.
bool Compiler::assertions(int n) {
  bool ok = true;
  for (auto& [k, v] : s.node(n).json->items()) ok = keyword(n, k, v) && ok;
  return ok;
}

// The keywords whose operands are not schemas: their shapes, so that a typo'd value is an error
// rather than an assertion that never fails. Unknown keywords ("x-" extensions aside) likewise.
bool Compiler::keyword(int n, const std::string& k, const json& v) {
  const std::string& p = s.node(n).pointer;
  {
    std::string at = p + "/" + pointer_token(k);
    if (!kDraft7Keywords.count(k) && !kLaterDraftKeywords.count(k) && !k.starts_with("x-")) {
      if (strict) return fail(at, unknown_keyword_message(k));
      warnings.push_back({at, unknown_keyword_message(k)});
      return true;
    }
    if (kLaterDraftKeywords.count(k))
      return fail(at, k + " is a keyword of a later JSON Schema draft (2019-09/2020-12); sbx implements draft-07");
    if (k == "$schema" && !(v.is_string() && is_draft7_uri(v.get<std::string>())))
      return fail(at, "JSON Schema draft " + v.dump() +
                          " is not supported; sbx implements draft-07 "
                          "(http://json-schema.org/draft-07/schema#)");
    if (k == "type") {
      auto ok_name = [](const json& t) { return t.is_string() && kTypeNames.count(t.get<std::string>()); };
      bool ok = ok_name(v) || (v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), ok_name));
      if (!ok) return fail(at, "type must be a type name or an array of them");
    } else if ((k == "enum" && !v.is_array()) || (k == "required" && !v.is_array()) ||
               (k == "uniqueItems" && !v.is_boolean()) || ((k == "format" || k == "$id") && !v.is_string())) {
      return fail(at, k + " has the wrong type");
    } else if (k == "required" && !std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); })) {
      return fail(at, "required must be an array of strings");
    } else if (k == "multipleOf" && !(v.is_number() && v.get<double>() > 0)) {
      return fail(at, "multipleOf must be a number greater than 0");
    } else if ((k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") &&
               !v.is_number()) {
      return fail(at, k + " must be a number");
    } else if ((k == "minLength" || k == "maxLength" || k == "minItems" || k == "maxItems" || k == "minProperties" ||
                k == "maxProperties") &&
               !is_count(v)) {
      return fail(at, k + " must be a non-negative integer");
    } else if (k == "pattern") {
      if (!v.is_string()) return fail(at, "pattern must be a string");
      auto re = EcmaRegex::compile(v.get<std::string>());
      if (!re) return fail(at, "pattern " + v.dump() + ": " + re.error().message);
      s.node(n).pattern.push_back(std::move(*re));
    } else if (k == "$id" && v.get<std::string>().starts_with("#")) {
      anchors.emplace(v.get<std::string>().substr(1), p);
    } else if (k == "$ref" && !v.is_string()) {
      return fail(at, "$ref must be a string");
    }
  }
  return true;
}

bool Compiler::applicators(int n) {
  const json& j = *s.node(n).json;
  const std::string p = s.node(n).pointer;
  // Not short-circuited: each keyword's problems are listed, not only the first keyword's.
  bool ok = true;
  for (auto [kw, field] : {std::pair{"not", &Node::not_},
                           {"if", &Node::if_},
                           {"then", &Node::then_},
                           {"else", &Node::else_},
                           {"additionalProperties", &Node::additional_properties},
                           {"propertyNames", &Node::property_names},
                           {"additionalItems", &Node::additional_items},
                           {"contains", &Node::contains}})
    ok = one(n, kw, field) && ok;
  for (auto [kw, field] : {std::pair{"allOf", &Node::all_of}, {"anyOf", &Node::any_of}, {"oneOf", &Node::one_of}})
    ok = list(n, kw, field, false) && ok;
  std::vector<std::pair<std::string, int>> props, pats;
  ok = members(n, "properties", &props) && ok;
  ok = members(n, "patternProperties", &pats) && ok;
  ok = members(n, "definitions", nullptr) && ok;
  ok = members(n, "$defs", nullptr) && ok;
  std::sort(props.begin(), props.end());
  s.node(n).properties = std::move(props);
  for (auto& [pat, c] : pats) {
    auto re = EcmaRegex::compile(pat);
    if (!re) {
      ok = fail(p + "/patternProperties/" + pointer_token(pat),
                "pattern " + json(pat).dump() + ": " + re.error().message);
      continue;
    }
    s.node(n).pattern_properties.emplace_back(std::move(*re), c);
  }
  if (!ok) return false;
  if (auto it = j.find("items"); it != j.end()) {
    if (it->is_array()) {
      s.node(n).items_is_tuple = true;
      if (!list(n, "items", &Node::items, true)) return false;
    } else {
      if (!is_schema(*it)) return fail(p + "/items", "items must be a schema or an array of schemas");
      int c = node_at(p + "/items", *it);
      s.node(n).items = {c};
    }
  }
  if (auto it = j.find("dependencies"); it != j.end()) {
    if (!it->is_object()) return fail(p + "/dependencies", "dependencies must be an object");
    for (auto& [k, v] : it->items()) {
      std::string at = p + "/dependencies/" + pointer_token(k);
      if (is_schema(v)) {
        int c = node_at(at, v);
        s.node(n).dep_schemas.emplace_back(k, c);
      } else if (v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); })) {
        s.node(n).dep_required.emplace_back(k, v.get<std::vector<std::string>>());
      } else {
        return fail(at, "a dependency must be a schema or an array of property names");
      }
    }
  }
  return true;
}

bool Compiler::compile_node(int n) {
  const json& j = *s.node(n).json;
  if (j.is_boolean()) return true;
  if (auto it = j.find("$ref"); it != j.end() && it->is_string()) refs.emplace_back(n, it->get<std::string>());
  bool ok = assertions(n);
  return applicators(n) && ok;
}

std::string percent_decode(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The canonical pointer (as node pointers are spelled) and the value a "#/..." fragment names.
const json* walk_pointer(const json& doc, const std::string& fragment, std::string& canonical) {
  const json* cur = &doc;
  canonical.clear();
  std::size_t pos = 1;  // past the leading '/'
  while (pos <= fragment.size()) {
    std::size_t end = fragment.find('/', pos);
    if (end == std::string::npos) end = fragment.size();
    std::string tok;
    for (std::size_t i = pos; i < end; ++i) {
      if (fragment[i] == '~' && i + 1 < end && (fragment[i + 1] == '0' || fragment[i + 1] == '1')) {
        tok += fragment[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        tok += fragment[i];
      }
    }
    if (cur->is_object()) {
      auto it = cur->find(tok);
      if (it == cur->end()) return nullptr;
      cur = &*it;
    } else if (cur->is_array()) {
      if (tok.empty() || tok.size() > 9 || !std::all_of(tok.begin(), tok.end(), ::isdigit) ||
          (tok.size() > 1 && tok[0] == '0'))
        return nullptr;
      std::size_t idx = std::stoul(tok);
      if (idx >= cur->size()) return nullptr;
      cur = &(*cur)[idx];
    } else {
      return nullptr;
    }
    canonical += '/';
    canonical.append(pointer_token(tok));  // not `"/" + ...`: GCC 12 misreports that as an overflow
    pos = end + 1;
  }
  return cur;
}

bool resolve_one(Compiler& c, int n, const std::string& ref) {
  std::string at = c.s.node(n).pointer + "/$ref";
  if (!ref.starts_with("#"))
    return c.fail(at, "only local references (\"#/...\") are supported; sbx does not fetch schemas");
  std::string frag = percent_decode(ref.substr(1));
  std::string canonical;
  const json* target = nullptr;
  if (frag.empty()) {
    target = &c.s.doc;
  } else if (frag.front() == '/') {
    target = walk_pointer(c.s.doc, frag, canonical);
  } else if (auto a = c.anchors.find(frag); a != c.anchors.end()) {
    const std::string anchored = a->second;
    target = walk_pointer(c.s.doc, anchored, canonical);
  }
  if (!target) return c.fail(at, json(ref).dump() + " does not name anything in this schema");
  if (!is_schema(*target)) return c.fail(at, json(ref).dump() + " names a value that is not a schema");
  int t = c.node_at(canonical, *target);
  c.s.node(n).ref = t;
  return true;
}

// Compiles what the work list holds, then resolves references; a reference may name a location
// no keyword reached (a "#/x/y" outside definitions), which is compiled in turn. A node with a
// problem does not stop the others: every problem in the schema is listed at once.
bool compile_all(Compiler& c) {
  std::size_t resolved = 0;
  for (;;) {
    while (!c.work.empty()) {
      int n = c.work.back();
      c.work.pop_back();
      c.compile_node(n);
    }
    if (resolved == c.refs.size()) return c.errors.empty();
    auto [n, ref] = c.refs[resolved++];
    resolve_one(c, n, ref);
  }
}

struct Edge {
  std::size_t to;     // a node's index (an edge exists only where a node is named)
  std::string where;  // the keyword that applies `to`
};

// Edges between subschemas applied to the same value: "$ref", allOf/anyOf/oneOf, not,
// if/then/else and schema dependencies. A cycle among them never descends into the value, so
// validating anything against it would recurse until the stack runs out.
std::vector<Edge> same_value_edges(const Node& n) {
  if (n.ref != kNone) return {{static_cast<std::size_t>(n.ref), n.pointer + "/$ref"}};
  std::vector<Edge> e;
  auto add = [&](int to, const std::string& kw) {
    if (to != kNone) e.push_back({static_cast<std::size_t>(to), n.pointer + "/" + kw});
  };
  for (std::size_t i = 0; i < n.all_of.size(); ++i) add(n.all_of[i], "allOf/" + std::to_string(i));
  for (std::size_t i = 0; i < n.any_of.size(); ++i) add(n.any_of[i], "anyOf/" + std::to_string(i));
  for (std::size_t i = 0; i < n.one_of.size(); ++i) add(n.one_of[i], "oneOf/" + std::to_string(i));
  add(n.not_, "not");
  add(n.if_, "if");
  add(n.then_, "then");
  add(n.else_, "else");
  for (auto& [k, to] : n.dep_schemas) add(to, "dependencies/" + pointer_token(k));
  return e;
}

bool Compiler::find_cycles() {
  std::size_t count = s.nodes.size();
  std::vector<std::vector<Edge>> edges(count);
  for (std::size_t i = 0; i < count; ++i) edges[i] = same_value_edges(s.nodes[i]);
  enum : char { kWhite, kGrey, kBlack };
  std::vector<char> color(count, kWhite);
  for (std::size_t root = 0; root < count; ++root) {
    if (color[root] != kWhite) continue;
    std::vector<std::pair<std::size_t, std::size_t>> stack{{root, 0}};
    color[root] = kGrey;
    while (!stack.empty()) {
      std::size_t u = stack.back().first;
      std::size_t k = stack.back().second++;
      if (k == edges[u].size()) {
        color[u] = kBlack;
        stack.pop_back();
        continue;
      }
      const Edge& e = edges[u][k];
      if (color[e.to] == kGrey) {
        std::string path;
        bool on = false;
        for (auto& [v, unused] : stack) {
          on = on || v == e.to;
          if (on) path += "#" + s.nodes[v].pointer + " -> ";
        }
        return fail(e.where,
                    "a cycle of $ref/allOf/anyOf/oneOf/not/if/then/else that never descends into the "
                    "value (" +
                        path + "#" + s.nodes[e.to].pointer + "): validation would never end");
      }
      if (color[e.to] == kWhite) {
        color[e.to] = kGrey;
        stack.emplace_back(e.to, 0);
      }
    }
  }
  return true;
}

}  // namespace

Result<CompiledSchema> CompiledSchema::compile(const json& schema, const std::string& source, SchemaError* where) {
  SchemaReport report;
  auto r = compile(schema, source, &report, false);
  if (!r && where && !report.errors.empty()) *where = report.errors.front();
  return r;
}

Result<CompiledSchema> CompiledSchema::compile(const json& schema, const std::string& source, SchemaReport* report,
                                               bool strict) {
  SchemaReport local;
  SchemaReport& rep = report ? *report : local;
  auto error = [&](std::vector<SchemaError> all) -> Error {
    const SchemaError& e = all.front();
    std::string more = all.size() > 1 ? " (and " + std::to_string(all.size() - 1) + " more problem(s))" : "";
    rep.errors = std::move(all);
    return make_error("schema", source + "#" + e.pointer + ": " + e.message + more);
  };
  if (!is_schema(schema)) return error({{"", "a JSON Schema must be an object or a boolean"}});
  auto deep = find_too_deep(schema, SchemaLimits{}.max_depth);
  if (deep.found)
    return error(
        {{deep.pointer, "the schema nests deeper than " + std::to_string(SchemaLimits{}.max_depth) + " levels"}});
  auto impl = std::make_shared<Impl>();
  impl->doc = schema;
  Compiler c(*impl);
  c.strict = strict;
  c.node_at("", impl->doc);
  bool ok = compile_all(c) && c.find_cycles();
  // Sorted by place, so the listing reads in the schema's order whatever order nodes compiled in.
  auto by_pointer = [](const SchemaError& a, const SchemaError& b) { return a.pointer < b.pointer; };
  std::stable_sort(c.warnings.begin(), c.warnings.end(), by_pointer);
  rep.warnings = std::move(c.warnings);
  if (!ok) {
    std::stable_sort(c.errors.begin(), c.errors.end(), by_pointer);
    return error(std::move(c.errors));
  }
  CompiledSchema out;
  out.impl_ = std::move(impl);
  return out;
}

}  // namespace sbx
