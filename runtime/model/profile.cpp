#include "runtime/model/profile.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <type_traits>

#include "runtime/model/embedded_profiles.hpp"
#include "runtime/model/gpu_request.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/model/limits_table.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/suggest.hpp"
#include "runtime/base/units.hpp"

namespace sbx {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::vector<std::string> search_dirs() {
  std::vector<std::string> dirs;
  if (const char* p = std::getenv("SBX_PROFILE_PATH")) {
    std::string s = p;
    std::size_t start = 0;
    while (start <= s.size()) {
      auto pos = s.find(':', start);
      std::string d = s.substr(start, pos == std::string::npos ? std::string::npos : pos - start);
      if (!d.empty()) dirs.push_back(d);
      if (pos == std::string::npos) break;
      start = pos + 1;
    }
  }
  for (auto& d : config_search_dirs("profiles")) dirs.push_back(std::move(d));
  return dirs;
}

bool looks_like_file(const std::string& s) {
  return s.find('/') != std::string::npos || (s.size() > 5 && s.ends_with(".json"));
}

// Bounded, and a regular file only (json_io.hpp): a profile path may name a device, a FIFO or a
// huge file by mistake or by design, and loading a profile must never wait on one.
Result<std::string> read_text(const std::string& path) {
  return read_regular_bounded(path, kMaxProfileBytes, "profile", "profile " + path);
}

// Every key of `patch` that the RunSpec does not have (`known`: its JSON with the defaults), each
// with the closest known key of its object: a profile with two typos has both named at once.
void unknown_keys(const json& patch, const json& known, const std::string& path, std::vector<std::string>& out) {
  std::vector<std::string> names;
  for (auto& [k, v] : known.items()) names.push_back(k);
  if (path.empty()) names.insert(names.end(), {"description", "extends"});
  for (auto& [k, v] : patch.items()) {
    std::string at = path + "/" + pointer_token(k);
    auto it = known.find(k);
    if (it == known.end() && !(path.empty() && (k == "description" || k == "extends")))
      out.push_back(at + ": unknown key" + did_you_mean(k, names));
    else if (it != known.end() && it->is_object() && !it->empty() && v.is_object())  // env is a free map
      unknown_keys(v, *it, at, out);
  }
}

// How deep a chain of "extends" may go: a profile of a profile of ... a built-in. Deeper is a
// mistake sooner than a design, and a bound keeps a cycle through many files cheap to refuse.
constexpr std::size_t kMaxExtendsDepth = 8;

// The limits of the built-in default profile, under RunSpec keys: what a profile that extends
// nothing gets for each limit it leaves out. The built-in one, not an installed file of that
// name: the floor of every hand-written profile must not move with a file on the host.
const json& default_profile_limits() {
  static const json limits = [] {
    for (auto& e : embedded_profiles()) {
      if (e.name != kDefaultProfile) continue;
      auto parsed = parse_json_doc(std::string(e.json), {kMaxProfileBytes}, "profile", "built-in");
      json l = parsed && parsed->contains("limits") ? (*parsed)["limits"] : json::object();
      (void)canonical_limit_keys(l, "built-in");
      return l;
    }
    return json::object();
  }();
  return limits;
}

// A profile's own content over its parent's: members replace the parent's, objects merge (RFC
// 7386), except that a limit set to null stays null: "no limit" overrides the parent's limit
// and is not taken for "unset" (which the parent's value would fill).
void layer_over(json& base, const json& own) {
  for (auto& [k, v] : own.items()) {
    if (k == "limits") {  // an object (parse_profile refuses any other)
      if (!base[k].is_object()) base[k] = json::object();
      for (auto& [lk, lv] : v.items()) base[k][lk] = lv;
    } else if (v.is_null()) {
      base.erase(k);
    } else {
      merge_patch(base[k], v);
    }
  }
}

// Identifies a profile in a chain of extends: its file (made absolute, so that "a.json" and
// "/dir/a.json" are one profile of a cycle), or its built-in name.
std::string profile_identity(const ProfileSource& s) {
  if (s.origin == "built-in") return "built-in '" + s.name + "'";
  std::error_code ec;
  fs::path abs = fs::weakly_canonical(s.origin, ec);
  return ec ? s.origin : abs.string();
}

Result<LoadedProfile> parse_profile(ProfileSource src, std::vector<std::string> chain = {});

// `extends`: the parent. A file (as --profile tells one: a slash or .json) is read beside the
// profile that names it, never from the current directory: an installed profile's "base.json"
// must not become whatever base.json the directory sbx starts in holds (a checkout could lift its
// limits). A name is looked up as --profile looks it up (the search directories, then the
// built-ins; never the current directory), and an installed profile named like the child itself
// means the built-in one: /etc/sbx/profiles/untrusted.json may extend "untrusted".
Result<ProfileSource> find_parent(const ProfileSource& child, const std::string& parent) {
  const bool built_in = child.origin == "built-in";
  if (looks_like_file(parent)) {
    if (built_in) return make_error("profile", "a built-in profile extends a name, not the file " + parent);
    if (parent.starts_with('/')) return find_profile(parent);
    return find_profile((fs::path(child.origin).parent_path() / parent).string());
  }
  if (parent == child.name && !built_in)
    for (auto& e : embedded_profiles())
      if (e.name == parent) return ProfileSource{std::string(e.name), "built-in", std::string(e.json)};
  return find_profile(parent);
}

Result<LoadedProfile> load_parent(const ProfileSource& child, const std::string& where, const std::string& parent,
                                  std::vector<std::string> chain) {
  chain.push_back(profile_identity(child));
  auto found = find_parent(child, parent);
  if (!found) {  // errno kept: "cannot read profile DIR/base.json: No such file or directory"
    Error e = found.error();
    e.stage = "profile";
    e.message = where + ": /extends: " + e.message;
    return e;
  }
  std::string path;
  for (auto& c : chain) path += c + " -> ";
  if (std::find(chain.begin(), chain.end(), profile_identity(*found)) != chain.end())
    return make_error("profile", where + ": /extends: a cycle (" + path + profile_identity(*found) +
                                     "): a profile cannot extend itself");
  if (chain.size() >= kMaxExtendsDepth)
    return make_error("profile", where + ": /extends: more than " + std::to_string(kMaxExtendsDepth) +
                                     " levels of extends (" + path + profile_identity(*found) + ")");
  return parse_profile(std::move(*found), std::move(chain));
}

Result<LoadedProfile> parse_profile(ProfileSource src, std::vector<std::string> chain) {
  std::string where = src.origin == "built-in" ? "built-in profile '" + src.name + "'" : "profile " + src.origin;
  auto parsed = parse_json_doc(src.text, {kMaxProfileBytes}, "profile", where);
  if (!parsed) return parsed.error();
  json j = std::move(*parsed);
  if (!j.is_object()) return make_error("profile", where + ": must be a JSON object");
  // "timeout" and "timeout_ms" are one limit (spec.hpp, limit_keys): layered as RunSpec keys,
  // reported as written.
  std::map<std::string, std::string> written;
  json as_written_doc = j;
  // A limits that is not an object would replace the parent's whole object (every inherited
  // limit gone at once) or, extending nothing, be taken for "no limits written": refused.
  if (j.contains("limits") && !j["limits"].is_object())
    return make_error("profile", where + ": /limits: must be an object of limits (e.g. {\"timeout\": \"5s\"}); " +
                                     "to lift one limit set it to null inside it ({\"memory\": null})");
  if (j.contains("limits"))
    if (auto st = canonical_limit_keys(j["limits"], where, &written); !st)
      return make_error("profile", st.error().message);
  std::string parent;
  if (j.contains("extends")) {
    if (!j["extends"].is_string() || j["extends"].get<std::string>().empty())
      return make_error("profile", where + ": /extends: must be the name of a profile (e.g. \"untrusted\")");
    parent = j["extends"].get<std::string>();
    j.erase("extends");
  }
  json probe = default_spec_json();
  std::vector<std::string> unknown;
  unknown_keys(j, probe, "", unknown);
  if (!unknown.empty()) {
    std::string list;
    for (std::size_t i = 0; i < unknown.size() && i < 10; ++i) list += (i ? "; " : "") + unknown[i];
    if (unknown.size() > 10) list += "; and " + std::to_string(unknown.size() - 10) + " more unknown keys";
    return make_error("profile", where + ": " + list);
  }
  // Validate as a partial RunSpec layered over the defaults: this names bad values.
  merge_patch(probe, j);
  auto spec = spec_from_json(probe, where);
  if (!spec) return make_error("profile", as_written(spec.error().message, written));
  LoadedProfile lp;
  lp.description = j.contains("description") && j["description"].is_string() ? j["description"].get<std::string>() : "";
  if (!parent.empty()) {
    auto base = load_parent(src, where, parent, std::move(chain));
    if (!base) return base.error();
    if (lp.description.empty()) lp.description = "extends " + parent + ": " + base->description;
    lp.extends = {base->source.name};
    lp.extends.insert(lp.extends.end(), base->extends.begin(), base->extends.end());
    lp.limits_defaulted = base->limits_defaulted;
    for (auto& k : limit_kinds())
      if (j.contains("limits") && j["limits"].contains(k.spec_key))
        std::erase(lp.limits_defaulted, std::string(k.name));
    json own = std::move(j);
    j = base->patch;
    layer_over(j, own);
  } else {
    // A profile that extends nothing still has every limit of the default profile it leaves
    // out: a hand-written {"limits": {"timeout": "5s"}} must not mean "no memory limit". An
    // explicit null is how a profile says "no limit".
    json& limits = j["limits"];
    if (limits.is_null()) limits = json::object();  // absent: j["limits"] made it null
    for (auto& k : limit_kinds())
      if (default_profile_limits().contains(k.spec_key) && !limits.contains(k.spec_key)) {
        limits[k.spec_key] = default_profile_limits()[k.spec_key];
        lp.limits_defaulted.emplace_back(k.name);
      }
  }
  lp.patch = std::move(j);
  lp.as_written = std::move(as_written_doc);
  lp.source = std::move(src);
  // The merged patch (keys sorted, compact): what every layer of the chain made of the profile.
  lp.source.resolved_sha256 = sha256_hex(dump_json(lp.patch, -1));
  return lp;
}

}  // namespace

Result<ProfileSource> find_profile(const std::string& name_or_file) {
  if (name_or_file.empty()) return make_error("usage", "empty profile name");
  if (looks_like_file(name_or_file)) {
    auto text = read_text(name_or_file);
    if (!text) return text.error();
    std::string name = fs::path(name_or_file).stem().string();
    return ProfileSource{name, name_or_file, std::move(*text)};
  }
  for (auto& dir : search_dirs()) {
    std::string path = dir + "/" + name_or_file + ".json";
    if (::access(path.c_str(), F_OK) == 0) {
      auto text = read_text(path);
      if (!text) return text.error();
      return ProfileSource{name_or_file, path, std::move(*text)};
    }
  }
  for (auto& e : embedded_profiles())
    if (e.name == name_or_file) return ProfileSource{std::string(e.name), "built-in", std::string(e.json)};
  std::string known;
  for (auto& p : list_profiles()) known += (known.empty() ? "" : ", ") + p.name;
  return make_error("usage", "unknown profile '" + name_or_file + "' (known: " + known + ")");
}

Result<LoadedProfile> load_profile(const std::string& name_or_file) {
  auto src = find_profile(name_or_file);
  if (!src) return src.error();
  return parse_profile(std::move(*src));
}

Result<std::string> profile_changed(const LoadedProfile& built, const std::string& name) {
  auto now = find_profile(name);
  if (!now) return now.error();
  if (now->origin != built.source.origin || now->text != built.source.text)
    return "the profile changed since the pooled sandbox was built (" + now->origin + ")";
  if (built.extends.empty()) return std::string();
  auto merged = parse_profile(std::move(*now));
  if (!merged) return merged.error();
  if (merged->source.resolved_sha256 != built.source.resolved_sha256)
    return "a profile that " + built.source.name + " extends (" + built.extends.front() +
           ") changed since the pooled sandbox was built";
  return std::string();
}

std::vector<ProfileSource> list_profiles() {
  std::vector<ProfileSource> out;
  std::set<std::string> seen;
  for (auto& dir : search_dirs()) {
    std::error_code ec;
    std::vector<fs::path> files;
    for (auto& ent : fs::directory_iterator(dir, ec))
      if (ent.path().extension() == ".json") files.push_back(ent.path());
    std::sort(files.begin(), files.end());
    for (auto& f : files) {
      std::string name = f.stem().string();
      if (!seen.insert(name).second) continue;
      auto text = read_text(f.string());
      out.push_back({name, f.string(), text ? *text : std::string()});
    }
  }
  for (auto& e : embedded_profiles())
    if (seen.insert(std::string(e.name)).second) out.push_back({std::string(e.name), "built-in", std::string(e.json)});
  return out;
}

Result<RunSpec> spec_from_layers(const LoadedProfile& profile, const json* manifest_patch,
                                 const std::string& manifest_source, const std::set<std::string>& set_by_operator,
                                 CeilingRaise how) {
  json merged = default_spec_json();
  merge_patch(merged, profile.patch);
  merged["profile"] = profile.source.name;
  auto ceiling = spec_from_json(merged, "profile " + profile.source.origin);
  if (!ceiling || !manifest_patch) return ceiling;
  merge_patch(merged, *manifest_patch);
  auto asked = spec_from_json(merged, manifest_source);
  if (!asked) return asked;
  SBX_TRY(check_ceilings(*ceiling, *asked, manifest_source, profile.source.name, set_by_operator, how));
  return asked;
}

std::map<std::string, std::string> limit_layers(const LoadedProfile& profile, const json* manifest_patch,
                                                const std::string& manifest_source,
                                                const std::set<std::string>& by_flag) {
  auto sets = [](const json* patch, const char* key) {
    return patch && patch->is_object() && patch->contains("limits") && (*patch)["limits"].is_object() &&
           (*patch)["limits"].contains(key) && !(*patch)["limits"][key].is_null();
  };
  std::map<std::string, std::string> out;
  for (const LimitKind* k : limit_kinds_by(&LimitOrder::plan)) {
    const std::string limit = k->plan_name;
    if (by_flag.count(limit)) out[limit] = std::string("flag ") + k->flag;
    else if (sets(manifest_patch, k->spec_key)) out[limit] = manifest_source;
    else if (std::find(profile.limits_defaulted.begin(), profile.limits_defaulted.end(), k->name) !=
             profile.limits_defaulted.end())
      out[limit] = std::string("the default profile '") + kDefaultProfile + "' (profile '" + profile.source.name +
                   "' leaves it unset)";
    else if (sets(&profile.patch, k->spec_key)) out[limit] = "profile '" + profile.source.name + "'";
    else out[limit] = "sbx's defaults";
  }
  // GPUs (gpu.hpp): who asked for them, and who set the ceiling.
  auto sets_gpu = [](const json* patch, const char* key) {
    return patch && patch->is_object() && patch->contains("gpu") && (*patch)["gpu"].is_object() &&
           (*patch)["gpu"].contains(key) && !(*patch)["gpu"][key].is_null();
  };
  std::string profile_layer = "profile '" + profile.source.name + "'";
  out["gpu"] = by_flag.count("gpu")                  ? std::string("flag --gpu")
               : sets_gpu(manifest_patch, "devices") ? manifest_source
               : sets_gpu(&profile.patch, "devices") ? profile_layer
                                                     : std::string("sbx's defaults");
  out["gpu.max"] = sets_gpu(manifest_patch, "max") ? manifest_source
                   : sets_gpu(&profile.patch, "max")
                       ? profile_layer
                       : std::string("sbx's defaults (profile '" + profile.source.name + "' sets no gpu.max)");
  return out;
}

std::string ceiling_raise_hint(const LimitKind& k, CeilingRaise how) {
  if (how == CeilingRaise::by_profile)
    return std::string("; the operator may pass --profile with a profile whose limits.") + k.name + " is higher";
  return k.flag[0] ? std::string("; the operator may raise it with ") + k.flag : std::string();
}

namespace {
template <typename T>
Status at_most(const std::optional<T>& ceiling, const std::optional<T>& asked, const LimitKind& k,
               const std::string& source, const std::string& profile, const std::set<std::string>& by_operator,
               CeilingRaise how) {
  if (!ceiling || (asked && *asked <= *ceiling) || by_operator.count(k.name)) return {};
  std::string raise = ceiling_raise_hint(k, how);
  LimitFormat fmt = limit_format(k.unit);
  return make_error("usage", source + ": /limits/" + k.name + ": " + shown_limit(asked, fmt) +
                                 " is above the ceiling of profile '" + profile + "' (" + shown_limit(ceiling, fmt) +
                                 "): a manifest or request may lower a limit, never raise it" + raise);
}

template <typename M>
auto as_optional(const Limits& l, M m) {
  if constexpr (std::is_same_v<M, std::int64_t Limits::*>) return std::optional<std::int64_t>(l.*m);
  else return l.*m;
}
}  // namespace

Status check_ceilings(const RunSpec& ceiling, const RunSpec& asked, const std::string& source,
                      const std::string& profile, const std::set<std::string>& op, CeilingRaise how) {
  // Every limit of limits_table.hpp, one rule: at most the profile's; its flag is the operator's.
  for (const LimitKind* k : limit_kinds_by(&LimitOrder::ceiling))
    SBX_TRY(std::visit(
        [&](auto m) {
      return at_most(as_optional(ceiling.limits, m), as_optional(asked.limits, m), *k, source, profile, op, how);
        },
        k->member));
  // gpu.max: a ceiling of the profile's that no layer raises (--gpu included: plan_gpu checks the
  // request against the merged max, gpu.hpp).
  if (ceiling.gpu.max != kGpuMaxAll && (asked.gpu.max == kGpuMaxAll || asked.gpu.max > ceiling.gpu.max))
    return make_error(
        "usage",
        source + ": /gpu/max: " + (asked.gpu.max == kGpuMaxAll ? std::string("all") : std::to_string(asked.gpu.max)) +
            " is above the ceiling of profile '" + profile + "' (" + std::to_string(ceiling.gpu.max) +
            "): a manifest or request may lower it, never raise it");
  return keeps_at_most(ceiling.capabilities.keep, asked.capabilities.keep, source, profile, op);
}

Status keeps_at_most(const std::vector<std::string>& ceiling, const std::vector<std::string>& asked,
                     const std::string& source, const std::string& profile, const std::set<std::string>& op) {
  for (std::size_t i = 0; i < asked.size(); ++i) {
    const std::string& cap = asked[i];
    if (std::find(ceiling.begin(), ceiling.end(), cap) != ceiling.end() || op.count(kCapabilityByOperator + cap))
      continue;
    std::string has;
    for (auto& c : ceiling) has += (has.empty() ? "" : ", ") + c;
    return make_error("usage", source + ": /capabilities/keep: " + cap + " is not kept by profile '" + profile + "' (" +
                                   (has.empty() ? "it keeps none" : "it keeps " + has) +
                                   "): a manifest or request may keep fewer capabilities, never more; the operator "
                                   "may add it with --cap-add " +
                                   cap);
  }
  return {};
}

}  // namespace sbx
