#include "runtime/typed/pack.hpp"

#include "runtime/image/image_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "runtime/base/doc_reader.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/model/limits_table.hpp"
#include "runtime/model/spec.hpp"
#include "runtime/typed/pack_tree.hpp"

namespace sbx {
namespace {
using nlohmann::json;
namespace fs = std::filesystem;

// Mount points sbx itself owns inside a pack run; a context declared there would shadow them.
const char* const kReservedPaths[] = {"/pack", "/in",  "/out",  "/run/secrets", "/proc",  "/dev", "/tmp",
                                      "/usr",  "/bin", "/sbin", "/lib",         "/lib64", "/etc"};

bool ident_ok(const std::string& s, bool allow_dot_dash) {
  if (s.empty() || s.size() > 64) return false;
  if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (allow_dot_dash && (c == '-' || c == '.'))))
      return false;
  return true;
}

// A path inside the pack: relative, no "..", no empty or "." components, no NUL (which would cut
// the C string the kernel sees).
bool pack_relative_ok(const std::string& p) {
  if (p.empty() || p[0] == '/' || p.find('\0') != std::string::npos) return false;
  std::size_t i = 0;
  while (i <= p.size()) {
    auto j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    std::string part = p.substr(i, j - i);
    if (part.empty() || part == "." || part == "..") return false;
    i = j + 1;
  }
  return true;
}

struct Checker {
  std::vector<PackProblem>& problems;
  std::string file = kPackManifest;
  void add(const std::string& pointer, const std::string& message) { problems.push_back({file, pointer, message}); }
};

// Reads DIR/REL of a pack, which its owner may be changing while it is read: every component is
// opened without following a link, the file is checked to be the regular file listed
// (open_regular_at: a FIFO or a link to /dev/zero put there is refused, never read), and at most
// `max` bytes are read. `rel` is pack_relative_ok; `dir` is canonical.
Result<std::string> read_pack_file(const std::string& dir, const std::string& rel, std::size_t max) {
  UniqueFd at(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!at.ok()) return sys_error("pack", "open " + dir);
  for (std::size_t i = 0;;) {
    auto j = rel.find('/', i);
    std::string part = rel.substr(i, j == std::string::npos ? std::string::npos : j - i);
    if (j == std::string::npos) {
      struct stat st;
      if (::fstatat(at.get(), part.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return sys_error("pack", "'" + rel + "'");
      if (!S_ISREG(st.st_mode))
        return make_error("pack", "'" + rel + "' is a " + std::string(file_kind(st.st_mode)) + ", not a regular file");
      auto fd = open_regular_at(at.get(), part, st, rel);
      if (!fd) return fd.error();
      return read_bounded_fd(fd->get(), max, "pack", rel);
    }
    UniqueFd next(::openat(at.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.ok()) return sys_error("pack", "'" + rel.substr(0, j) + "' (a directory without links)");
    at = std::move(next);
    i = j + 1;
  }
}

// Reads and compiles one of the pack's schema files; problems name the schema file itself.
// Unknown keywords are warnings, or problems when `strict`.
void load_schema(const std::string& dir, const json& m, const char* key, std::string& path_out, json& schema_out,
                 Checker& c, std::vector<PackProblem>& warnings, bool strict) {
  if (!m.contains(key))
    return c.add(std::string("/") + key, "required: the path of a draft-07 JSON Schema file in the pack");
  if (!m[key].is_string())
    return c.add(std::string("/") + key, "must be a string (a path inside the pack), not " + json_type_name(m[key]));
  std::string rel = m[key].get<std::string>();
  if (!pack_relative_ok(rel))
    return c.add(std::string("/") + key, "'" + rel + "' must be a relative path inside the pack, without '..'");
  auto text = read_pack_file(dir, rel, kMaxSchemaFileBytes);
  if (!text) return c.add(std::string("/") + key, text.error().describe());
  path_out = rel;
  ParsedJson parsed = parse_json(*text, {kMaxSchemaFileBytes});
  if (!parsed.ok()) return c.problems.push_back({rel, parsed.pointer, parsed.problem});
  json schema = std::move(parsed.value);
  SchemaReport report;
  auto compiled = CompiledSchema::compile(schema, rel, &report, strict);
  for (auto& w : report.warnings) warnings.push_back({rel, w.pointer, w.message});
  if (!compiled) {
    for (auto& e : report.errors) c.problems.push_back({rel, e.pointer, e.message});
    return;
  }
  schema_out = std::move(schema);
}

}  // namespace

Result<json> limits_to_spec_patch(const json& in, const std::string& file, std::vector<PackProblem>& problems) {
  std::size_t before = problems.size();
  json limits = json::object();
  const RunSpec defaults_spec;  // named: GCC 12 misreports a temporary RunSpec as uninitialized
  const json defaults = spec_to_json(defaults_spec);
  if (!in.is_object()) {
    problems.push_back({file, "/limits", "must be an object, not " + json_type_name(in)});
  } else {
    const auto& keys = limit_keys();
    for (auto& [k, v] : in.items()) {
      const std::string& key = k;  // clang before 16 cannot capture a structured binding
      // The public spelling (timeout) or the RunSpec's (timeout_ms): spec.hpp, limit_keys.
      auto it = std::find_if(keys.begin(), keys.end(), [&](auto& lk) { return key == lk.name || key == lk.spec_key; });
      if (it == keys.end()) {
        std::string known;
        for (auto& lk : keys) known += (known.empty() ? "" : ", ") + std::string(lk.name);
        problems.push_back({file, "/limits/" + k, "unknown limit (known: " + known + ")"});
        continue;
      }
      if (limits.contains(it->spec_key)) {
        problems.push_back({file, "/limits/" + k, std::string("a second spelling of '") + it->name + "'; keep one"});
        continue;
      }
      // A bare number for a duration or a size is the caller's guess at a unit (spec.hpp).
      if (std::string why = bare_limit_number(key, v); !why.empty()) {
        problems.push_back({file, "/limits/" + k, why});
        continue;
      }
      // Checked on its own through the RunSpec parser, so a bad value is reported at its key,
      // with the RunSpec's own name for it replaced by the key as written.
      json probe = defaults;
      probe["limits"][it->spec_key] = v;
      if (auto r = spec_from_json(probe, "limits"); !r) {
        std::string why = r.error().message, prefix = std::string("limits: /limits/") + it->spec_key + ": ";
        if (why.starts_with(prefix)) why = why.substr(prefix.size());  // the place is named already
        problems.push_back(
            {file, "/limits/" + k, "bad value " + json_excerpt(v) + ": " + as_written(why, {{it->spec_key, k}})});
      } else limits[it->spec_key] = v;
    }
  }
  if (problems.size() > before) return make_error("pack", problems[before].describe());
  return limits;
}

json limits_properties_schema() {
  json props = json::object();
  for (auto& k : limit_kinds()) {
    if (!k.in_manifests) continue;
    json p = k.unit == LimitUnit::count  ? json{{"type", "integer"}, {"minimum", k.positive ? 1 : 0}}
             : k.unit == LimitUnit::cpus ? json{{"type", "number"}, {"exclusiveMinimum", 0}}
                                         : json{{"type", "string"}};
    // A bare number is refused (spec.hpp, bare_limit_number): the schema says so, with an example.
    if (k.unit == LimitUnit::duration_ms)
      p["description"] = std::string("a duration with its unit (ms, s, m, h), e.g. \"") +
                         (k.example ? k.example : "10s") + "\"; a bare number is refused";
    else if (k.unit == LimitUnit::size_bytes)
      p["description"] = std::string("a size with its unit (K, M, G), e.g. \"") + (k.example ? k.example : "16M") +
                         "\"; a bare number is refused";
    else if (k.example) p["description"] = std::string("e.g. \"") + k.example + "\"";
    props[k.name] = std::move(p);
  }
  return props;
}

std::string PackProblem::describe() const { return file + "#" + pointer + ": " + message; }

bool valid_pack_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  if (!std::isalnum(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' ||
          c == '_' || c == '.'))
      return false;
  return true;
}

namespace {

// pack.json is read with one collecting DocReader (doc_reader.hpp): every problem is listed, the
// reader goes on after each, so `sbx pack validate` shows them all at once. Each reader below
// fails through `r` (which files the problem) and carries on.

// A string member: absent is fine unless `required`.
void read_text(DocReader& r, const char* key, std::string& out, bool required) {
  r.ignore(key);
  if (!r.contains(key)) {
    if (required) (void)r.fail_key(key, "required");
    return;
  }
  if (!r.value().at(key).is_string())
    return (void)r.fail_key(key, "must be a string, not " + json_type_name(r.value().at(key)));
  out = r.value().at(key).get<std::string>();
}

void read_identity(DocReader& r, Pack& p) {
  read_text(r, "name", p.name, true);
  if (r.contains("name") && r.value().at("name").is_string() && !valid_pack_name(p.name))
    (void)r.fail_key(
        "name", "'" + p.name + "' is not a valid pack name (1-64 of a-z 0-9 . _ -, starting with a letter or digit)");
  read_text(r, "version", p.version, true);
  if (r.contains("version") && r.value().at("version").is_string() && p.version.empty())
    (void)r.fail_key("version", "must not be empty");
  read_text(r, "description", p.description, false);
  if (!r.contains("entrypoint")) {
    (void)r.fail_key("entrypoint", "required: the program's argv, e.g. [\"/bin/sh\", \"/pack/run.sh\"]");
  } else if (DocReader e = r.member("entrypoint"); !e.value().is_array() || e.value().empty()) {
    (void)e.fail("must be a non-empty array of strings (the program's argv)");
  } else {
    for (std::size_t i = 0; i < e.value().size(); ++i) {
      if (!e.value()[i].is_string()) (void)e.fail_index(i, "must be a string");
      else p.entrypoint.push_back(e.value()[i].get<std::string>());
    }
    if (!p.entrypoint.empty() && p.entrypoint[0].empty()) (void)e.fail_index(0, "must not be empty");
  }
  read_text(r, "image", p.image, false);
  if (p.image.empty()) p.image = "host";
  if (p.image != "host" && !p.image.starts_with("sha256:"))
    if (auto n = canonical_image_name(p.image); !n)
      (void)r.fail_key("image", n.error().message + " (or \"host\", or sha256:<hex>)");
}

// An object member whose only keys are `known` (network, capabilities): null when absent or not
// an object (after saying so).
std::optional<DocReader> small_object(DocReader& r, const char* key, const char* shape,
                                      std::initializer_list<const char*> known) {
  r.ignore(key);
  if (!r.contains(key)) return std::nullopt;
  DocReader o = r.member(key);
  if (!o.check_object(std::string("must be an object like ") + shape)) return std::nullopt;
  o.known(known);
  (void)o.finish({.known = true});
  return o;
}

// A manifest member read as the RunSpec's member `key` would be (a probe spec holding only it, so
// one reader checks it for packs and profiles alike). A problem is reported at the pointer the
// reader names ("<source>: <pointer>: <what>", with an empty source: ": /warm/preload/0: ..."),
// else by `unplaced`; nullopt then.
std::optional<RunSpec> read_spec_member(DocReader& r, const std::string& key, const json& value,
                                        const std::function<void(const std::string&)>& unplaced) {
  json probe = default_spec_json();
  probe[key] = value;
  auto s = spec_from_json(probe, "");
  if (s) return std::move(*s);
  const std::string& msg = s.error().message;
  auto at = msg.find("/" + key);
  auto colon = at == std::string::npos ? at : msg.find(": ", at);
  if (colon == std::string::npos) unplaced(msg);
  else (void)r.fail_at(msg.substr(at, colon - at), msg.substr(colon + 2));
  return std::nullopt;
}

// limits, network and capabilities: the manifest's layer of the RunSpec (Pack::spec_patch).
json read_run_layer(DocReader& r, std::vector<PackProblem>& problems) {
  json limits = json::object();
  r.ignore("limits");
  if (r.contains("limits"))
    if (auto l = limits_to_spec_patch(r.value().at("limits"), kPackManifest, problems); l) limits = *l;
  if (auto n = small_object(r, "network", "{\"mode\": \"none\"}", {"mode"}); n && n->contains("mode"))
    if (n->value().at("mode") != "none")
      (void)n->fail_key("mode",
                        json_excerpt(n->value().at("mode")) + ": only \"none\" (loopback only) is supported for packs");
  json patch = {{"network", {{"mode", "none"}}}, {"limits", limits}};
  // {"keep": ["CAP_CHOWN", ...]}: names are checked with the rest of the spec, and the profile's
  // ceiling when the pack runs (profile.hpp keeps_at_most).
  auto cp = small_object(r, "capabilities", "{\"keep\": [\"CAP_CHOWN\"]}", {"keep"});
  if (cp && cp->contains("keep"))
    if (auto s = read_spec_member(r, "capabilities", {{"keep", cp->value().at("keep")}},
                                  [&](const std::string& msg) { (void)cp->fail_key("keep", msg); }))
      patch["capabilities"] = {{"keep", s->capabilities.keep}};
  return patch;
}

// warm: the profile's key (model/warm.hpp), for the pack's own calls from a pool (`sbx mcp --pool`):
// the interpreter its entrypoint starts, the preloads imported before the call. Not a layer of the
// spec (a merge patch would mix the profile's preloads into the pack's): Pack::warm. A prepared
// interpreter runs only its own command line on a script ([PATH, SCRIPT, ARGS...], model/warm.cpp's
// driver; with an option first it would start afresh), so the entrypoint must be one.
void read_warm(DocReader& r, Pack& p, Checker& c) {
  r.ignore("warm");
  if (!r.contains("warm")) return;
  auto s = read_spec_member(r, "warm", r.value().at("warm"), [&](const std::string& msg) { c.add("/warm", msg); });
  if (!s) return;
  const WarmInterpreter* interp = find_warm_interpreter(s->warm.interpreter);
  const auto& e = p.entrypoint;
  if (interp && interp->has_driver && (e.size() < 2 || e[0] != interp->path || e[1].starts_with("-")))
    c.add("/warm/interpreter", std::string("a prepared ") + interp->name + " runs only an entrypoint [\"" +
                                   interp->path + "\", SCRIPT, ARGS...] (no option before the script): change the " +
                                   "entrypoint, or drop warm");
  // Templates serve run_code only (runtime/server/mcp_template.hpp): a pack's calls are pooled.
  if (s->warm.mode == "template")
    c.add("/warm/mode",
          "\"template\" serves a profile's run_code calls only; a pack's own calls are pooled: use "
          "\"pool\"");
  p.warm = s->warm;
}

// A boolean member that defaults to false (null is not a boolean here).
bool flag(DocReader& e, const char* key) {
  e.ignore(key);
  if (!e.contains(key)) return false;
  if (!e.value().at(key).is_boolean()) return (void)e.fail_key(key, "must be true or false"), false;
  return e.value().at(key).get<bool>();
}

void read_context(DocReader& e, Pack& p, std::set<std::string>& names) {
  e.known({"name", "path", "required"});
  (void)e.finish({.known = true});
  PackContext ctx;
  const json& v = e.value();
  if (!v.contains("name") || !v["name"].is_string() || !ident_ok(v["name"].get<std::string>(), true))
    (void)e.fail_key("name", "required: a name of letters, digits, '_', '-', '.' starting with a letter");
  else ctx.name = v["name"];
  if (!ctx.name.empty() && !names.insert(ctx.name).second)
    (void)e.fail_key("name", "duplicate context name '" + ctx.name + "'");
  if (!v.contains("path") || !v["path"].is_string()) {
    (void)e.fail_key("path", "required: an absolute path inside the sandbox");
  } else {
    ctx.path = v["path"];
    bool ok = ctx.path.size() > 1 && ctx.path[0] == '/' && pack_relative_ok(ctx.path.substr(1));
    if (!ok) (void)e.fail_key("path", "'" + ctx.path + "' must be an absolute, normalised path other than /");
    for (const char* r : kReservedPaths) {
      std::string rs = r;
      if (ok && (ctx.path == rs || ctx.path.starts_with(rs + "/") || rs.starts_with(ctx.path + "/")))
        (void)e.fail_key("path", "'" + ctx.path + "' collides with " + rs + ", which sbx mounts itself"), ok = false;
    }
  }
  ctx.required = flag(e, "required");
  p.contexts.push_back(ctx);
}

void read_secret(DocReader& e, Pack& p, std::set<std::string>& names) {
  e.known({"name", "required", "delivery"});
  (void)e.finish({.known = true});
  PackSecret s;
  const json& v = e.value();
  // Also a file name under /run/secrets and possibly an environment variable name.
  if (!v.contains("name") || !v["name"].is_string() || !ident_ok(v["name"].get<std::string>(), false))
    (void)e.fail_key("name", "required: letters, digits and '_', starting with a letter or '_'");
  else s.name = v["name"];
  if (!s.name.empty() && !names.insert(s.name).second)
    (void)e.fail_key("name", "duplicate secret name '" + s.name + "'");
  s.required = flag(e, "required");
  if (v.contains("delivery")) {
    if (v["delivery"] != "file" && v["delivery"] != "env") (void)e.fail_key("delivery", "must be \"file\" or \"env\"");
    else s.delivery = v["delivery"];
  }
  p.secrets.push_back(s);
}

// context and secrets: arrays of small objects, each read by `one`.
void read_entries(DocReader& r, const char* key, const char* shape, Pack& p,
                  void (*one)(DocReader&, Pack&, std::set<std::string>&)) {
  r.ignore(key);
  if (!r.contains(key)) return;
  DocReader list = r.member(key);
  if (!list.check_array(std::string("must be an array of ") + shape)) return;
  std::set<std::string> names;
  for (std::size_t i = 0; i < list.value().size(); ++i) {
    DocReader e = list.element(i);
    if (e.check_object(std::string("must be an object ") + shape)) one(e, p, names);
  }
}

}  // namespace

namespace {
// The entrypoint's words that name a file of the pack (under /pack/, where a run mounts it): each
// must be a regular file there, and argv[0] an executable one. A typo otherwise shows only at the
// first run, as exit 127 from inside the sandbox. (The tree was hashed first, links refused: this
// is a check for the author, not a boundary; a run executes its private copy.)
void check_entrypoint_files(const std::string& dir, const Pack& p, Checker& c) {
  for (std::size_t i = 0; i < p.entrypoint.size(); ++i) {
    const std::string& word = p.entrypoint[i];
    if (!word.starts_with("/pack/")) continue;
    std::string rel = word.substr(6), at = "/entrypoint/" + std::to_string(i);
    if (!pack_relative_ok(rel)) {
      c.add(at, "'" + word + "' is not a path inside the pack (no '..', '.' or '//')");
      continue;
    }
    struct stat st;
    if (::lstat((dir + "/" + rel).c_str(), &st) != 0) {
      c.add(at, "'" + word + "' names '" + rel + "', which the pack does not have (" + std::strerror(errno) + ")");
    } else if (!S_ISREG(st.st_mode)) {
      c.add(at, "'" + word + "' names '" + rel + "', a " + file_kind(st.st_mode) + ", not a regular file");
    } else if (i == 0 && (st.st_mode & 0111) == 0) {
      c.add(at, "'" + word + "' is not executable: chmod +x " + rel +
                    ", or run it through its interpreter ([\"/bin/sh\", \"" + word + "\"])");
    }
  }
}

// parse_pack_manifest, reading the schemas from `dir` and naming `shown` (the pack as the caller
// named it, when `dir` is a private copy of it).
Result<Pack> parse_manifest_in(const std::string& dir, const std::string& shown, const std::string& text,
                               std::vector<PackProblem>& problems, bool strict, PackIdentity* read) {
  Checker c{problems};
  std::size_t before = problems.size();
  auto failed = [&]() -> Error {
    return make_error("pack", shown + ": " + std::to_string(problems.size() - before) +
                                  " problem(s) in the pack, first: " + problems[before].describe());
  };
  ParsedJson parsed = parse_json(text, {kMaxManifestBytes});
  if (!parsed.ok()) {
    c.add(parsed.pointer, parsed.problem);
    return failed();
  }
  json m = std::move(parsed.value);
  // Strings are checked where they are used (pack_relative_ok refuses a NUL in a path).
  DocSource src{kPackManifest, "pack", "", false, [&c](const DocProblem& d) { c.add(d.pointer, d.message); }};
  DocReader r(m, src);
  if (!r.check_object("must be a JSON object, not " + json_type_name(m))) return failed();
  if (read)
    for (auto [key, into] : {std::pair{"name", &read->name}, std::pair{"version", &read->version}})
      if (auto it = m.find(key); it != m.end() && it->is_string()) *into = it->get<std::string>();
  r.known({"name", "version", "description", "entrypoint", "image", "input_schema", "output_schema", "limits",
           "network", "context", "secrets", "capabilities", "warm"});
  (void)r.finish({.known = true});
  Pack p;
  p.dir = dir;
  p.source_dir = shown;
  read_identity(r, p);
  check_entrypoint_files(dir, p, c);
  load_schema(dir, m, "input_schema", p.input_schema_path, p.input_schema, c, p.warnings, strict);
  load_schema(dir, m, "output_schema", p.output_schema_path, p.output_schema, c, p.warnings, strict);
  json layer = read_run_layer(r, problems);
  read_warm(r, p, c);
  read_entries(r, "context", "{name, path, required}", p, read_context);
  read_entries(r, "secrets", "{name, required, delivery}", p, read_secret);
  if (problems.size() > before) {
    // The warnings too, after the problems (failed() names the first problem): every finding in
    // the pack is listed at once.
    Error e = failed();
    for (auto& w : p.warnings) problems.push_back({w.file, w.pointer, w.message, true});
    return e;
  }
  p.spec_patch = std::move(layer);
  p.spec_patch["argv"] = p.entrypoint;
  p.spec_patch["image"] = p.image;
  return p;
}
}  // namespace

Result<Pack> parse_pack_manifest(const std::string& dir, const std::string& text, std::vector<PackProblem>& problems,
                                 bool strict, PackIdentity* read) {
  return parse_manifest_in(dir, dir, text, problems, strict, read);
}

const char* const kPackBoundsHint =
    "packs and contexts are read whole and copied before a run, so they are kept small: put large data in an image "
    "(the manifest's \"image\")";

namespace {
// load_pack and load_pack_copy: the manifest and schemas read from `dir` (the pack, or sbx's
// private copy of it), named as `shown`; `digest` computed by the caller.
Result<Pack> load_from(const std::string& dir, const std::string& shown, const std::string& digest,
                       std::vector<PackProblem>& problems, bool strict, PackIdentity* read = nullptr) {
  auto text = read_pack_file(dir, kPackManifest, kMaxManifestBytes);
  if (!text) {
    problems.push_back({kPackManifest, "", text.error().describe()});
    return make_error("pack", shown + ": " + problems.back().describe());
  }
  auto pack = parse_manifest_in(dir, shown, *text, problems, strict, read);
  if (!pack) return pack;
  pack->digest = digest;
  return pack;
}

Result<std::string> canonical_pack_dir(const std::string& dir_in) {
  std::error_code ec;
  fs::path canon = fs::canonical(dir_in, ec);
  if (ec) return make_error("pack", "pack directory " + dir_in + ": " + ec.message(), ec.value());
  if (!fs::is_directory(canon, ec)) return make_error("pack", dir_in + " is not a directory", ENOTDIR);
  return canon.string();
}
}  // namespace

Result<Pack> load_pack(const std::string& dir_in, std::vector<PackProblem>& problems, bool strict, PackIdentity* read) {
  auto dir = canonical_pack_dir(dir_in);
  if (!dir) return dir.error();
  // The tree first: within the bounds of a pack, links and special files refused, before any of
  // it is parsed.
  auto digest = pack_digest(*dir);
  if (!digest) {
    problems.push_back({"", "", digest.error().message});
    return make_error("pack", *dir + ": " + digest.error().describe());
  }
  return load_from(*dir, *dir, *digest, problems, strict, read);
}

Result<Pack> load_pack_copy(const std::string& dir_in, const std::string& state_dir,
                            std::vector<PackProblem>& problems) {
  auto dir = canonical_pack_dir(dir_in);
  if (!dir) return dir.error();
  auto priv = PrivateDir::make(state_dir, "pack");
  if (!priv) return priv.error();
  std::string copy = (*priv)->path() + "/pack";
  // The digest is taken of the bytes as they are copied: the copy is what was hashed, and
  // nobody but sbx can change it (PrivateDir).
  auto digest = hash_tree(*dir, copy, "pack " + *dir, kPackBoundsHint);
  if (!digest) {
    problems.push_back({"", "", digest.error().message});
    return make_error("pack", *dir + ": " + digest.error().describe());
  }
  auto pack = load_from(copy, *dir, *digest, problems, false);
  if (!pack) return pack;
  pack->copy = std::move(*priv);
  return pack;
}

Result<std::string> pack_digest(const std::string& dir) { return hash_tree(dir, "", "pack " + dir, kPackBoundsHint); }

Status init_pack(const std::string& dir, const std::string& name) {
  if (!valid_pack_name(name))
    return make_error(
        "usage", "'" + name + "' is not a valid pack name (1-64 of a-z 0-9 . _ -, starting with a letter or digit)");
  if (::mkdir(dir.c_str(), 0755) != 0) return sys_error("pack", "create " + dir);
  if (::mkdir((dir + "/schemas").c_str(), 0755) != 0) return sys_error("pack", "create " + dir + "/schemas");
  json manifest = {{"name", name},
                   {"version", "0.1.0"},
                   {"description", "Counts its input records (a skeleton made by sbx pack init)"},
                   {"entrypoint", {"/bin/sh", "/pack/run.sh"}},
                   {"image", "host"},
                   {"input_schema", "schemas/input.json"},
                   {"output_schema", "schemas/output.json"},
                   {"limits", {{"timeout", "10s"}, {"memory", "256M"}, {"pids", 64}}},
                   {"network", {{"mode", "none"}}},
                   {"context", json::array()},
                   {"secrets", json::array()}};
  // input_schema describes one record; records.json is an array of them.
  json input = {{"$schema", "http://json-schema.org/draft-07/schema#"},
                {"type", "object"},
                {"required", {"id"}},
                {"properties", {{"id", {{"type", "string"}, {"minLength", 1}}}}}};
  json output = {{"$schema", "http://json-schema.org/draft-07/schema#"},
                 {"type", "object"},
                 {"required", {"records"}},
                 {"additionalProperties", false},
                 {"properties", {{"records", {{"type", "integer"}, {"minimum", 0}}}}}};
  const std::string run_sh =
      "#!/bin/sh\n"
      "# Reads the validated records from /in/records.json and writes the result to /out/result.json;\n"
      "# sbx checks the result against schemas/output.json before anyone sees it.\n"
      "set -eu\n"
      "n=$(grep -o '\"id\"[[:space:]]*:' /in/records.json | wc -l)\n"
      "printf '{\"records\": %d}\\n' \"$n\" > /out/result.json\n";
  const std::string records = "[{\"id\": \"a-1\"}, {\"id\": \"a-2\"}]\n";
  const std::string readme =
      "# " + name +
      "\n\nA pack made by `sbx pack init`. Run it with\n\n"
      "    sbx pack run . --input records.json\n\n"
      "Edit `run.sh`, `schemas/input.json` and `schemas/output.json`; check with `sbx pack validate .`.\n";
  for (auto& [file, content, mode] :
       std::vector<std::tuple<std::string, std::string, mode_t>>{{"pack.json", manifest.dump(2) + "\n", 0644},
                                                                 {"schemas/input.json", input.dump(2) + "\n", 0644},
                                                                 {"schemas/output.json", output.dump(2) + "\n", 0644},
                                                                 {"run.sh", run_sh, 0755},
                                                                 {"records.json", records, 0644},
                                                                 {"README.md", readme, 0644}}) {
    SBX_TRY(write_file_durable(dir + "/" + file, content, mode));
  }
  return {};
}

}  // namespace sbx
