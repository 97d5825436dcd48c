#include "runtime/model/classify.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "runtime/egress/egress_policy.hpp"
#include "runtime/model/embedded_profiles.hpp"
#include "runtime/model/limits_table.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/model/spec.hpp"
#include "runtime/base/suggest.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/base/units.hpp"

namespace sbx {
using nlohmann::json;

namespace {
bool surface(const Workload& w) { return w.shell || w.browser || w.package_install || w.writable_fs || w.gpu; }
bool declares_limits(const Workload& w) { return w.cpus || w.memory_bytes || w.processes; }
}  // namespace

// THE TABLE. A rule forces at least its tier; the answer is the highest tier that fired.
// `when` is written so that it reads as "a tier up if ..." for the rules of the next tier.
const std::vector<ClassifyRule>& classify_rules() {
  static const std::vector<ClassifyRule> rules = {
      {"no-code", 0, "no code of the workload runs (a call to an API)",
       "nothing executes, so there is nothing to isolate: call the API with a credential scoped to this one task",
       [](const Workload& w) { return w.code == "none"; }},
      {"trusted-in-request", 1, "trusted code runs and is done within the request",
       "code you wrote and reviewed that returns before the request does runs as a function in the calling process",
       [](const Workload& w) { return w.trusted_code() && w.lifetime == "request"; }},
      {"trusted-outlives-request", 2, "trusted code outlives its request (a task, or long-lived)",
       "work that outlives the request belongs in a background job (a queue worker), still among your own processes",
       [](const Workload& w) { return w.trusted_code() && w.lifetime != "request"; }},
      {"trusted-needs-process", 3,
       "trusted code needs a shell, a browser, package installs, a writable file system or a GPU",
       "child processes, installs and a writable root can damage the worker that hosts them: give them a process, "
       "root file system and limits of their own (sbx profile 'trusted')",
       [](const Workload& w) { return w.trusted_code() && surface(w); }},
      {"trusted-needs-limits", 3, "trusted code must be held to CPU, memory or process limits",
       "limits a kernel enforces (cgroups, rlimits) apply to a process of its own; a function or a job shares its host's",
       [](const Workload& w) { return w.trusted_code() && declares_limits(w); }},
      {"untrusted-code", 4, "the code is untrusted or model-written",
       "code nobody reviewed may do anything the kernel lets it: an ephemeral read-only root, no capabilities, seccomp, "
       "strict limits, an egress allowlist and only this task's secrets (sbx profile 'untrusted')",
       [](const Workload& w) { return w.untrusted(); }},
      {"kernel-features", 5, "it needs kernel features (mounts, modules, namespaces of its own, raw devices)",
       "privileged kernel operations are what a shared-kernel sandbox exists to refuse: they need a kernel of their own",
       [](const Workload& w) { return w.kernel_features; }},
      {"untrusted-long-lived", 5, "untrusted code is long-lived or keeps persistent state",
       "an sbx sandbox is thrown away after one run; isolation that lasts, with state carried between sessions, needs "
       "a VM's own kernel and disk",
       [](const Workload& w) { return w.untrusted() && (w.lifetime == "long-lived" || w.state == "persistent"); }},
      {"untrusted-open-egress", 5,
       "untrusted code reaches the public web, or private services not named in an allowlist",
       "sbx's egress is a named allowlist; open egress from untrusted code needs a VM behind network controls of its "
       "own (or name the hosts: network allowlist stays in tier 4)",
       [](const Workload&
              w) { return w.untrusted() && (w.network == "public" || (w.network == "private" && w.allow.empty())); }},
      {"untrusted-gpu", 5, "untrusted code needs a GPU",
       "a GPU driver is a large ioctl surface of shared kernel code: untrusted code gets a VM with the device passed "
       "through",
       [](const Workload& w) { return w.untrusted() && w.gpu; }},
  };
  return rules;
}

std::vector<const ClassifyRule*> Classification::reasons() const {
  std::vector<const ClassifyRule*> v;
  for (auto* r : fired)
    if (r->tier == tier) v.push_back(r);
  return v;
}

std::vector<const ClassifyRule*> Classification::also() const {
  std::vector<const ClassifyRule*> v;
  for (auto* r : fired)
    if (r->tier != tier) v.push_back(r);
  return v;
}

const char* tier_name(int tier) {
  switch (tier) {
    case 0: return "scoped API call (no code runs)";
    case 1: return "in-process function";
    case 2: return "background job";
    case 3: return "isolated process or container (trusted code, its own limits)";
    case 4:
      return "hardened sandbox (untrusted or model-written code: ephemeral root, strict limits, egress allowlist, "
             "task-scoped secrets)";
    default: return "dedicated VM (own kernel, privileged operations, long-lived isolation)";
  }
}

std::string tier_advice(int tier) {
  switch (tier) {
    case 0: return "no sandbox needed: no code runs; give the call a credential scoped to exactly what it reads";
    case 1: return "no sandbox needed: trusted code that finishes within the request runs in the calling process";
    case 2: return "no sandbox needed: trusted code in a background job (queue worker) with its own retry and timeout";
    case 3: return "sbx with a profile built on 'trusted' (below): own namespaces, limits, read-only root";
    case 4:
      return "sbx with a profile built on 'untrusted' (below): ephemeral root, strict limits, egress allowlist, "
             "secrets passed by name for this run only";
    default:
      return "sbx is not enough: use a dedicated VM (a microVM such as Firecracker or Cloud Hypervisor, or a "
             "full VM under KVM/QEMU) with its own kernel and disk, network controls outside the guest, and "
             "credentials scoped to that VM";
  }
}

namespace {

// Strict reading with one error format: "<source>: <pointer>: <problem>".
struct Reader {
  const std::string& source;
  Error fail(const std::string& at, const std::string& problem) const {
    return make_error("usage", source + ": " + at + ": " + problem);
  }
  Status keys(const json& obj, const std::string& at, const std::vector<std::string>& known) const {
    for (auto& [k, v] : obj.items())
      if (std::find(known.begin(), known.end(), k) == known.end())
        return fail(at + "/" + pointer_token(k), "unknown key" + did_you_mean(k, known));
    return {};
  }
  Result<std::string> one_of(const json& obj, const std::string& key, const std::string& at,
                             const std::vector<std::string>& choices, bool required) const {
    std::string where = at + "/" + key;
    std::string list;
    for (auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    if (!obj.contains(key)) {
      if (required) return fail(where, "missing (one of " + list + ")");
      return std::string();
    }
    const json& v = obj[key];
    if (!v.is_string()) return fail(where, "must be a string, one of " + list);
    auto s = v.get<std::string>();
    if (std::find(choices.begin(), choices.end(), s) == choices.end())
      return fail(where, "'" + printable(s.substr(0, 40)) + "' is not one of " + list + did_you_mean(s, choices));
    return s;
  }
  Result<std::vector<std::string>> strings(const json& obj, const std::string& key, std::size_t max_n) const {
    std::vector<std::string> out;
    if (!obj.contains(key)) return out;
    const json& v = obj[key];
    if (!v.is_array()) return fail("/" + key, "must be an array of strings");
    if (v.size() > max_n) return fail("/" + key, "more than " + std::to_string(max_n) + " entries");
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) return fail("/" + key + "/" + std::to_string(i), "must be a string");
      out.push_back(v[i].get<std::string>());
    }
    return out;
  }
};

bool env_name(const std::string& s) {
  if (s.empty() || s.size() > 128 || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace

namespace {

// The six answers' scalar part: name, code, credentials, network and its allowlist, lifetime, state.
Status workload_answers(const json& j, const Reader& r, Workload& w) {
  for (const char* k : {"name", "description"})
    if (j.contains(k) && (!j[k].is_string() || j[k].get<std::string>().size() > 1000))
      return r.fail(std::string("/") + k, "must be a string of at most 1000 bytes");
  if (j.contains("name")) w.name = j["name"].get<std::string>();
  auto code = r.one_of(j, "code", "", {"none", "trusted", "untrusted", "model-written"}, true);
  if (!code) return code.error();
  w.code = *code;
  auto creds = r.strings(j, "credentials", 64);
  if (!creds) return creds.error();
  for (std::size_t i = 0; i < creds->size(); ++i)
    if (!env_name((*creds)[i]))
      return r.fail("/credentials/" + std::to_string(i),
                    "'" + printable((*creds)[i].substr(0, 40)) +
                        "' is not an environment variable name (letters, digits, _; the run is handed it by name)");
  w.credentials = *creds;
  auto net = r.one_of(j, "network", "", {"none", "allowlist", "public", "private"}, true);
  if (!net) return net.error();
  w.network = *net;
  auto allow = r.strings(j, "allow", 256);
  if (!allow) return allow.error();
  for (std::size_t i = 0; i < allow->size(); ++i)
    if (auto rule = parse_allow_rule((*allow)[i]); !rule)
      return r.fail("/allow/" + std::to_string(i), rule.error().message);
  w.allow = *allow;
  if (w.network == "none" && !w.allow.empty()) return r.fail("/allow", "network is none: it reaches no host");
  if (w.network == "allowlist" && w.allow.empty())
    return r.fail("/allow", "network allowlist needs the hosts it may reach (sbx --allow-host rules)");
  auto life = r.one_of(j, "lifetime", "", {"request", "task", "long-lived"}, true);
  if (!life) return life.error();
  w.lifetime = *life;
  auto state = r.one_of(j, "state", "", {"none", "scratch", "persistent"}, false);
  if (!state) return state.error();
  if (!state->empty()) w.state = *state;
  return {};
}

// "runtime": which surfaces the code needs, each a boolean.
Status workload_runtime(const json& rt, const Reader& r, Workload& w) {
  if (!rt.is_object()) return r.fail("/runtime", "must be an object of booleans");
  static const std::vector<std::string> known = {"shell",       "browser",         "package_install",
                                                 "writable_fs", "kernel_features", "gpu"};
  SBX_TRY(r.keys(rt, "/runtime", known));
  bool* slots[] = {&w.shell, &w.browser, &w.package_install, &w.writable_fs, &w.kernel_features, &w.gpu};
  for (std::size_t i = 0; i < known.size(); ++i) {
    if (!rt.contains(known[i])) continue;
    if (!rt[known[i]].is_boolean()) return r.fail("/runtime/" + known[i], "must be true or false");
    *slots[i] = rt[known[i]].get<bool>();
    if (*slots[i] && w.code == "none")
      return r.fail("/runtime/" + known[i], "code is none: a workload that runs no code has no runtime surface");
  }
  return {};
}

// "limits": what the workload expects to need, in sbx's units.
Status workload_limits(const json& l, const Reader& r, Workload& w) {
  if (!l.is_object()) return r.fail("/limits", "must be an object");
  SBX_TRY(r.keys(l, "/limits", {"cpus", "memory", "processes", "output", "timeout", "spend"}));
  if (l.contains("cpus")) {
    // The bounds of the run's own limits (limits_table.hpp): a workload past them could never run.
    if (!l["cpus"].is_number() || !(l["cpus"].get<double>() > 0) || l["cpus"].get<double>() > kMaxCpus)
      return r.fail("/limits/cpus", "must be a number of CPUs above 0 (e.g. 0.5), at most " + std::to_string(kMaxCpus));
    w.cpus = l["cpus"].get<double>();
  }
  if (l.contains("processes")) {
    if (!l["processes"].is_number_integer() || l["processes"].get<std::int64_t>() <= 0 ||
        l["processes"].get<std::int64_t>() > kMaxPids)
      return r.fail("/limits/processes", "must be a positive integer");
    w.processes = l["processes"].get<std::int64_t>();
  }
  auto sized = [&](const char* key, std::optional<std::int64_t>& slot, bool duration) -> Status {
    if (!l.contains(key)) return {};
    const json& v = l[key];
    std::string at = std::string("/limits/") + key;
    Result<std::int64_t> n = 0;
    // One rule with every other document (units.hpp): a bare number has no unit to go by.
    if (v.is_number())
      return r.fail(at, bare_number_refusal(v.get<double>(), duration ? QuantityUnit::duration : QuantityUnit::size));
    if (v.is_string()) n = duration ? parse_duration_ms(v.get<std::string>()) : parse_size_bytes(v.get<std::string>());
    else return r.fail(at, duration ? "must be a duration (\"30s\")" : "must be a size (\"512M\")");
    if (!n) return r.fail(at, n.error().message);
    if (*n <= 0) return r.fail(at, "must be greater than zero");
    slot = *n;
    return {};
  };
  SBX_TRY(sized("memory", w.memory_bytes, false));
  SBX_TRY(sized("output", w.output_bytes, false));
  SBX_TRY(sized("timeout", w.timeout_ms, true));
  if (l.contains("spend")) {
    if (!l["spend"].is_string() || l["spend"].get<std::string>().size() > 100)
      return r.fail("/limits/spend", "must be a string of at most 100 bytes (e.g. \"$5 per run\")");
    w.spend = l["spend"].get<std::string>();
  }
  return {};
}

}  // namespace

Result<Workload> workload_from_json(const json& j, const std::string& source) {
  Reader r{source};
  if (!j.is_object()) return make_error("usage", source + ": must be a JSON object (the six answers)");
  SBX_TRY(r.keys(
      j, "",
      {"name", "description", "code", "credentials", "network", "allow", "lifetime", "state", "runtime", "limits"}));
  Workload w;
  SBX_TRY(workload_answers(j, r, w));
  if (j.contains("runtime")) SBX_TRY(workload_runtime(j["runtime"], r, w));
  if (j.contains("limits")) SBX_TRY(workload_limits(j["limits"], r, w));
  return w;
}

namespace {

// Tiers 3-4: the shipped profile the tier stands for, with the workload's answers filled in.
Result<json> build_profile(const Workload& w, int tier, const std::vector<const ClassifyRule*>& fired) {
  std::string base = tier == 3 ? "trusted" : (w.browser ? "browser" : "untrusted");
  json p;
  // The compiled-in text, not the search path: the answer must not depend on what a local
  // profile of the same name says.
  for (auto& e : embedded_profiles())
    if (e.name == base) p = json::parse(e.json);
  if (!p.is_object()) return make_error("classify", "built-in profile '" + base + "' is missing");
  std::string why;
  for (auto* r : fired) why += (why.empty() ? "" : ", ") + std::string(r->id);
  p["description"] = "Written by sbx classify for " +
                     (w.name.empty() ? std::string("a workload") : "'" + w.name + "'") + ": tier " +
                     std::to_string(tier) + " (" + why + "), built on the '" + base + "' profile.";
  p["tier"] = tier;
  json& l = p["limits"];
  if (w.timeout_ms) l["timeout"] = format_duration_ms(*w.timeout_ms);
  if (w.memory_bytes) l["memory"] = format_size(*w.memory_bytes);
  if (w.processes) l["pids"] = *w.processes;
  if (w.cpus) l["cpus"] = *w.cpus;
  if (w.output_bytes) l["output_limit"] = format_size(*w.output_bytes);
  p["network"]["allow"] = w.allow;
  p["network"]["mode"] = w.allow.empty() ? "none" : "proxy";
  // Credentials are passed by name from the caller's environment, for this run only; the
  // record keeps the names, never the values (spec.hpp).
  if (!w.credentials.empty()) p["env_pass"] = w.credentials;

  // The profile must load as `sbx run --profile FILE` would load it (profile.cpp parse_profile):
  // layered over the defaults and read back strictly.
  const RunSpec defaults;
  json spec = spec_to_json(defaults);
  json patch = p;
  patch.erase("description");
  if (auto st = canonical_limit_keys(patch["limits"], "classify"); !st) return st.error();
  merge_patch(spec, patch);
  if (auto rs = spec_from_json(spec, "profile written by classify"); !rs) return rs.error();
  return p;
}

}  // namespace

Result<Classification> classify(const Workload& w) {
  Classification c;
  for (auto& rule : classify_rules())
    if (rule.fires(w)) {
      c.fired.push_back(&rule);
      c.tier = std::max(c.tier, rule.tier);
    }
  int next = 6;
  for (auto& rule : classify_rules())
    if (rule.tier > c.tier) next = std::min(next, rule.tier);
  for (auto& rule : classify_rules())
    if (rule.tier == next && !rule.fires(w)) c.up.push_back(&rule);

  if (!w.spend.empty())
    c.notes.push_back("spend (" + w.spend +
                      ") is not something sbx meters: cap it where the money is spent (the API "
                      "key's budget, the provider's quota)");
  if (c.tier >= 3 && c.tier <= 4) {
    if (w.network == "private" || w.network == "allowlist")
      for (auto& a : w.allow)
        if (auto rule = parse_allow_rule(a); rule && rule->kind != AllowRule::Kind::address &&
                                             rule->kind != AllowRule::Kind::cidr && w.network == "private") {
          c.notes.push_back("'" + a +
                            "' is a name: sbx's proxy never lets a name rule reach a private address; "
                            "name private services by address or range");
          break;
        }
    if (w.network == "public")
      c.notes.push_back(
          "sbx reaches only the hosts its allowlist names: list them under \"allow\" (the profile "
          "below has " +
          std::to_string(w.allow.size()) + ")");
    if (w.package_install && c.tier == 4)
      c.notes.push_back(
          "package installs need the mirror in the allowlist and write access to the root: prefer an "
          "image with the packages already in it (sbx image import)");
    if (w.state == "persistent" && c.tier == 3)
      c.notes.push_back(
          "persistent state: bind its directory read-write (--bind DIR:/data:rw); the rest of the root "
          "stays read-only");
    auto p = build_profile(w, c.tier, c.reasons());
    if (!p) return p.error();
    c.profile = std::move(*p);
  }
  return c;
}

json classification_to_json(const Workload& w, const Classification& c) {
  auto rules = [](const std::vector<const ClassifyRule*>& v) {
    json a = json::array();
    for (auto* r : v) a.push_back({{"rule", r->id}, {"tier", r->tier}, {"when", r->when}, {"because", r->because}});
    return a;
  };
  json j = {{"workload", w.name},
            {"tier", c.tier},
            {"tier_name", tier_name(c.tier)},
            {"sandbox", c.tier <= 2   ? "none"
                        : c.tier <= 4 ? "sbx"
                                      : "vm"},
            {"advice", tier_advice(c.tier)},
            {"reasons", rules(c.reasons())},
            {"also", rules(c.also())},
            {"up", rules(c.up)},
            {"notes", c.notes},
            {"profile", c.profile}};
  return j;
}

std::string classification_to_text(const Workload& w, const Classification& c) {
  std::string out = "tier " + std::to_string(c.tier) + ": " + tier_name(c.tier) + "\n";
  if (!w.name.empty()) out += "workload: " + printable(w.name) + "\n";
  out += c.tier <= 2 ? "no sandbox: " : c.tier <= 4 ? "use: " : "instead: ";
  std::string advice = tier_advice(c.tier);
  if (advice.starts_with("no sandbox needed: ")) advice = advice.substr(19);
  out += advice + "\n";
  out += "why:\n";
  for (auto* r : c.reasons()) out += "  [" + std::string(r->id) + "] " + r->when + ": " + r->because + "\n";
  for (auto* r : c.also())
    out += "  (also true, tier " + std::to_string(r->tier) + ": [" + std::string(r->id) + "] " + r->when + ")\n";
  if (c.up.empty()) {
    out += "a tier up: none (5 is the top tier)\n";
  } else {
    out += "a tier up (" + std::to_string(c.up.front()->tier) + ") if:\n";
    for (auto* r : c.up) out += "  [" + std::string(r->id) + "] " + r->when + "\n";
  }
  for (auto& n : c.notes) out += "note: " + printable(n) + "\n";
  if (!c.profile.is_null()) {
    json p = c.profile;
    out += "profile (save as FILE; run with: sbx run --profile FILE -- CMD):\n" + dump_json(p, 2, {}, true) + "\n";
  }
  return out;
}

}  // namespace sbx
