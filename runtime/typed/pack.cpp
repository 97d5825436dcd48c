#include "runtime/typed/pack.hpp"

#include "runtime/image/image_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/model/spec.hpp"

namespace sbx {
namespace {
using nlohmann::json;
namespace fs = std::filesystem;

// Mount points sbx itself owns inside a pack run; a context declared there would shadow them.
const char* const kReservedPaths[] = {"/pack", "/in", "/out", "/run/secrets", "/proc", "/dev", "/tmp",
                                      "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"};

std::string json_type(const json& j) {
  return j.is_object() ? "object" : j.is_array() ? "array" : j.is_string() ? "string" : j.is_boolean() ? "boolean"
         : j.is_number() ? "number" : "null";
}

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

// Reads and compiles one of the pack's schema files; problems name the schema file itself.
// Unknown keywords are warnings, or problems when `strict`.
void load_schema(const std::string& dir, const json& m, const char* key, std::string& path_out, json& schema_out,
                 Checker& c, std::vector<PackProblem>& warnings, bool strict) {
  if (!m.contains(key)) return c.add(std::string("/") + key, "required: the path of a draft-07 JSON Schema file in the pack");
  if (!m[key].is_string()) return c.add(std::string("/") + key, "must be a string (a path inside the pack), not " + json_type(m[key]));
  std::string rel = m[key].get<std::string>();
  if (!pack_relative_ok(rel)) return c.add(std::string("/") + key, "'" + rel + "' must be a relative path inside the pack, without '..'");
  struct stat st;
  std::string full = dir + "/" + rel;
  if (::lstat(full.c_str(), &st) != 0) return c.add(std::string("/") + key, "'" + rel + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return c.add(std::string("/") + key, "'" + rel + "' is not a regular file");
  auto text = read_bounded(full, kMaxSchemaFileBytes, "pack", rel);
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
    problems.push_back({file, "/limits", "must be an object, not " + json_type(in)});
  } else {
    const auto& keys = limit_keys();
    for (auto& [k, v] : in.items()) {
      const std::string& key = k;  // clang before 16 cannot capture a structured binding
      // The public spelling (timeout) or the RunSpec's (timeout_ms): spec.hpp, limit_keys.
      auto it = std::find_if(keys.begin(), keys.end(), [&](auto& lk) { return key == lk.name || key == lk.spec_key; });
      if (it == keys.end()) {
        problems.push_back({file, "/limits/" + k, "unknown limit (known: timeout, memory, pids, cpus, cpu_time, output_limit, tmp_size)"});
        continue;
      }
      if (limits.contains(it->spec_key)) {
        problems.push_back({file, "/limits/" + k, std::string("a second spelling of '") + it->name + "'; keep one"});
        continue;
      }
      // Checked on its own through the RunSpec parser, so a bad value is reported at its key,
      // with the RunSpec's own name for it replaced by the key as written.
      json probe = defaults;
      probe["limits"][it->spec_key] = v;
      if (auto r = spec_from_json(probe, "limits"); !r) {
        std::string why = r.error().message, prefix = std::string("limits: /limits/") + it->spec_key + ": ";
        if (why.starts_with(prefix)) why = why.substr(prefix.size());  // the place is named already
        problems.push_back({file, "/limits/" + k, "bad value " + json_excerpt(v) + ": " + as_written(why, {{it->spec_key, k}})});
      }
      else limits[it->spec_key] = v;
    }
  }
  if (problems.size() > before) return make_error("pack", problems[before].describe());
  return limits;
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

Result<Pack> parse_pack_manifest(const std::string& dir, const std::string& text, std::vector<PackProblem>& problems,
                                 bool strict) {
  Checker c{problems};
  std::size_t before = problems.size();
  auto failed = [&]() -> Error {
    return make_error("pack", dir + ": " + std::to_string(problems.size() - before) + " problem(s) in the pack, first: " +
                                  problems[before].describe());
  };
  ParsedJson parsed = parse_json(text, {kMaxManifestBytes});
  if (!parsed.ok()) {
    c.add(parsed.pointer, parsed.problem);
    return failed();
  }
  json m = std::move(parsed.value);
  if (!m.is_object()) {
    c.add("", "must be a JSON object, not " + json_type(m));
    return failed();
  }
  static const std::set<std::string> known = {"name",   "version", "description", "entrypoint", "image",  "input_schema",
                                              "output_schema", "limits", "network", "context", "secrets",
                                              "capabilities"};
  for (auto& [k, v] : m.items())
    if (!known.count(k)) c.add("/" + k, "unknown key (known: name, version, description, entrypoint, image, input_schema, "
                                        "output_schema, limits, network, context, secrets, capabilities)");
  Pack p;
  p.dir = dir;
  auto req_string = [&](const char* key, std::string& out, bool required) {
    if (!m.contains(key)) {
      if (required) c.add(std::string("/") + key, "required");
      return;
    }
    if (!m[key].is_string()) return c.add(std::string("/") + key, "must be a string, not " + json_type(m[key]));
    out = m[key].get<std::string>();
  };
  req_string("name", p.name, true);
  if (m.contains("name") && m["name"].is_string() && !valid_pack_name(p.name))
    c.add("/name", "'" + p.name + "' is not a valid pack name (1-64 of a-z 0-9 . _ -, starting with a letter or digit)");
  req_string("version", p.version, true);
  if (m.contains("version") && m["version"].is_string() && p.version.empty()) c.add("/version", "must not be empty");
  req_string("description", p.description, false);
  if (!m.contains("entrypoint")) {
    c.add("/entrypoint", "required: the program's argv, e.g. [\"/bin/sh\", \"/pack/run.sh\"]");
  } else if (!m["entrypoint"].is_array() || m["entrypoint"].empty()) {
    c.add("/entrypoint", "must be a non-empty array of strings (the program's argv)");
  } else {
    for (std::size_t i = 0; i < m["entrypoint"].size(); ++i) {
      if (!m["entrypoint"][i].is_string()) c.add("/entrypoint/" + std::to_string(i), "must be a string");
      else p.entrypoint.push_back(m["entrypoint"][i].get<std::string>());
    }
    if (!p.entrypoint.empty() && p.entrypoint[0].empty()) c.add("/entrypoint/0", "must not be empty");
  }
  req_string("image", p.image, false);
  if (p.image.empty()) p.image = "host";
  if (p.image != "host" && !p.image.starts_with("sha256:"))
    if (auto n = canonical_image_name(p.image); !n) c.add("/image", n.error().message + " (or \"host\", or sha256:<hex>)");
  load_schema(dir, m, "input_schema", p.input_schema_path, p.input_schema, c, p.warnings, strict);
  load_schema(dir, m, "output_schema", p.output_schema_path, p.output_schema, c, p.warnings, strict);

  json limits = json::object();
  if (m.contains("limits")) {
    auto l = limits_to_spec_patch(m["limits"], kPackManifest, problems);
    if (l) limits = *l;
  }
  std::string net_mode = "none";
  if (m.contains("network")) {
    const json& n = m["network"];
    if (!n.is_object()) c.add("/network", "must be an object like {\"mode\": \"none\"}");
    else {
      for (auto& [k, v] : n.items())
        if (k != "mode") c.add("/network/" + k, "unknown key (known: mode)");
      if (n.contains("mode") && n["mode"] != "none")
        c.add("/network/mode", json_excerpt(n["mode"]) + ": only \"none\" (loopback only) is supported for packs");
    }
  }
  // {"keep": ["CAP_CHOWN", ...]}: names are checked with the rest of the spec, and the profile's
  // ceiling when the pack runs (profile.hpp keeps_at_most).
  json caps;
  if (m.contains("capabilities")) {
    const json& cp = m["capabilities"];
    if (!cp.is_object()) c.add("/capabilities", "must be an object like {\"keep\": [\"CAP_CHOWN\"]}");
    else {
      for (auto& [k, v] : cp.items())
        if (k != "keep") c.add("/capabilities/" + k, "unknown key (known: keep)");
      if (cp.contains("keep")) {
        json probe = spec_to_json(RunSpec{});
        probe["capabilities"] = {{"keep", cp["keep"]}};
        if (auto r = spec_from_json(probe, ""); !r) {
          std::string msg = r.error().message;
          auto at = msg.find("/capabilities");
          auto colon = at == std::string::npos ? at : msg.find(": ", at);
          if (colon == std::string::npos) c.add("/capabilities/keep", msg);
          else c.add(msg.substr(at, colon - at), msg.substr(colon + 2));
        } else {
          caps = {{"keep", r->capabilities.keep}};
        }
      }
    }
  }
  std::set<std::string> names;
  if (m.contains("context")) {
    if (!m["context"].is_array()) c.add("/context", "must be an array of {name, path, required}");
    else
      for (std::size_t i = 0; i < m["context"].size(); ++i) {
        const json& e = m["context"][i];
        std::string at = "/context/" + std::to_string(i);
        if (!e.is_object()) { c.add(at, "must be an object {name, path, required}"); continue; }
        for (auto& [k, v] : e.items())
          if (k != "name" && k != "path" && k != "required") c.add(at + "/" + k, "unknown key (known: name, path, required)");
        PackContext ctx;
        if (!e.contains("name") || !e["name"].is_string() || !ident_ok(e["name"].get<std::string>(), true))
          c.add(at + "/name", "required: a name of letters, digits, '_', '-', '.' starting with a letter");
        else ctx.name = e["name"];
        if (!ctx.name.empty() && !names.insert(ctx.name).second) c.add(at + "/name", "duplicate context name '" + ctx.name + "'");
        if (!e.contains("path") || !e["path"].is_string()) c.add(at + "/path", "required: an absolute path inside the sandbox");
        else {
          ctx.path = e["path"];
          bool ok = ctx.path.size() > 1 && ctx.path[0] == '/' && pack_relative_ok(ctx.path.substr(1));
          if (!ok) c.add(at + "/path", "'" + ctx.path + "' must be an absolute, normalised path other than /");
          for (const char* r : kReservedPaths) {
            std::string rs = r;
            if (ok && (ctx.path == rs || ctx.path.starts_with(rs + "/") || rs.starts_with(ctx.path + "/")))
              c.add(at + "/path", "'" + ctx.path + "' collides with " + rs + ", which sbx mounts itself"), ok = false;
          }
        }
        if (e.contains("required") && !e["required"].is_boolean()) c.add(at + "/required", "must be true or false");
        else ctx.required = e.value("required", false);
        p.contexts.push_back(ctx);
      }
  }
  std::set<std::string> secret_names;
  if (m.contains("secrets")) {
    if (!m["secrets"].is_array()) c.add("/secrets", "must be an array of {name, required, delivery}");
    else
      for (std::size_t i = 0; i < m["secrets"].size(); ++i) {
        const json& e = m["secrets"][i];
        std::string at = "/secrets/" + std::to_string(i);
        if (!e.is_object()) { c.add(at, "must be an object {name, required, delivery}"); continue; }
        for (auto& [k, v] : e.items())
          if (k != "name" && k != "required" && k != "delivery") c.add(at + "/" + k, "unknown key (known: name, required, delivery)");
        PackSecret s;
        // Also a file name under /run/secrets and possibly an environment variable name.
        if (!e.contains("name") || !e["name"].is_string() || !ident_ok(e["name"].get<std::string>(), false))
          c.add(at + "/name", "required: letters, digits and '_', starting with a letter or '_'");
        else s.name = e["name"];
        if (!s.name.empty() && !secret_names.insert(s.name).second) c.add(at + "/name", "duplicate secret name '" + s.name + "'");
        if (e.contains("required") && !e["required"].is_boolean()) c.add(at + "/required", "must be true or false");
        else s.required = e.value("required", false);
        if (e.contains("delivery")) {
          if (e["delivery"] != "file" && e["delivery"] != "env") c.add(at + "/delivery", "must be \"file\" or \"env\"");
          else s.delivery = e["delivery"];
        }
        p.secrets.push_back(s);
      }
  }
  if (problems.size() > before) {
    // The warnings too, after the problems (failed() names the first problem): every finding in
    // the pack is listed at once.
    Error e = failed();
    for (auto& w : p.warnings) problems.push_back({w.file, w.pointer, w.message, true});
    return e;
  }
  p.spec_patch = {{"argv", p.entrypoint}, {"image", p.image}, {"network", {{"mode", net_mode}}}, {"limits", limits}};
  if (!caps.is_null()) p.spec_patch["capabilities"] = caps;
  return p;
}

Result<Pack> load_pack(const std::string& dir_in, std::vector<PackProblem>& problems, bool strict) {
  std::error_code ec;
  fs::path canon = fs::canonical(dir_in, ec);
  if (ec) return make_error("pack", "pack directory " + dir_in + ": " + ec.message(), ec.value());
  if (!fs::is_directory(canon)) return make_error("pack", dir_in + " is not a directory", ENOTDIR);
  std::string dir = canon.string();
  auto text = read_bounded(dir + "/" + kPackManifest, kMaxManifestBytes, "pack", kPackManifest);
  if (!text) {
    problems.push_back({kPackManifest, "", text.error().describe()});
    return make_error("pack", dir + ": " + problems.back().describe());
  }
  auto pack = parse_pack_manifest(dir, *text, problems, strict);
  if (!pack) return pack;
  auto digest = pack_digest(dir);
  if (!digest) {
    problems.push_back({"", "", digest.error().message});
    return make_error("pack", dir + ": " + digest.error().describe());
  }
  pack->digest = *digest;
  return pack;
}

Result<std::string> pack_digest(const std::string& dir) {
  std::vector<std::string> lines;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  if (ec) return make_error("pack", "list " + dir + ": " + ec.message(), ec.value());
  for (; it != end; it.increment(ec)) {
    if (ec) return make_error("pack", "list " + dir + ": " + ec.message(), ec.value());
    std::string full = it->path().string();
    std::string rel = full.substr(dir.size() + 1);
    struct stat st;
    if (::lstat(full.c_str(), &st) != 0) return sys_error("pack", "stat " + full);
    char mode[16];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    if (S_ISDIR(st.st_mode)) {
      lines.push_back(rel + "/\t" + mode + "\t0\t-\n");
    } else if (S_ISREG(st.st_mode)) {
      auto data = read_file(full);
      if (!data) return data.error();
      lines.push_back(rel + "\t" + mode + "\t" + std::to_string(data->size()) + "\t" + sha256_hex(*data) + "\n");
    } else {
      return make_error("pack", rel + ": only regular files and directories may be in a pack (a symlink or device could "
                                      "expose host files once the pack is mounted)");
    }
  }
  if (ec) return make_error("pack", "list " + dir + ": " + ec.message(), ec.value());
  std::sort(lines.begin(), lines.end());
  Sha256 h;
  for (auto& l : lines) h.update(l);
  return "sha256:" + h.final_hex();
}

Status init_pack(const std::string& dir, const std::string& name) {
  if (!valid_pack_name(name))
    return make_error("usage", "'" + name + "' is not a valid pack name (1-64 of a-z 0-9 . _ -, starting with a letter or digit)");
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
  const std::string readme = "# " + name +
                             "\n\nA pack made by `sbx pack init`. Run it with\n\n"
                             "    sbx pack run . --input records.json\n\n"
                             "Edit `run.sh`, `schemas/input.json` and `schemas/output.json`; check with `sbx pack validate .`.\n";
  for (auto& [file, content, mode] : std::vector<std::tuple<std::string, std::string, mode_t>>{
           {"pack.json", manifest.dump(2) + "\n", 0644},
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
