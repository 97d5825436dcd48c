#include "runtime/launch/tenant.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/egress/egress_policy.hpp"
#include "runtime/linux/gpu.hpp"
#include "runtime/image/image_store.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/base/trace_field.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/launch/sandbox.hpp"
#include "runtime/base/suggest.hpp"
#include "runtime/base/units.hpp"
#include "runtime/model/limits_table.hpp"
#include "runtime/linux/userns.hpp"
#include "runtime/base/bytes.hpp"
#include "runtime/base/strings.hpp"

namespace sbx {
using json = nlohmann::json;

namespace {

Result<std::vector<std::string>> string_list(const json& v, const std::string& where, const std::string& key,
                                             std::size_t max_items) {
  if (!v.is_array()) return make_error("usage", where + ": /" + key + ": must be an array of strings");
  if (v.size() > max_items)
    return make_error("usage", where + ": /" + key + ": at most " + std::to_string(max_items) + " entries");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string() || v[i].get<std::string>().empty() || v[i].get<std::string>().size() > 512)
      return make_error(
          "usage", where + ": /" + key + "/" + std::to_string(i) + ": must be a non-empty string (at most 512 bytes)");
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

// Whether the tenant's rule `t` admits every destination the run's rule `r` admits.
bool port_covers(const AllowRule& t, const AllowRule& r) {
  if (t.any_port) return true;
  if (r.any_port) return false;
  if (t.port == r.port) return true;
  if (!t.port && r.port) return *r.port == 80 || *r.port == 443;  // t: 80 and 443
  return false;
}

bool addr_in(const AllowRule& net, const AllowRule& r) {
  if (net.v6 != r.v6 || r.prefix < net.prefix) return false;
  int bits = net.prefix;
  for (std::size_t i = 0; i < 16 && bits > 0; ++i, bits -= 8) {
    const auto mask = static_cast<std::uint8_t>(bits >= 8 ? 0xff : 0xff << (8 - bits));
    if ((net.addr[i] & mask) != (r.addr[i] & mask)) return false;
  }
  return true;
}

bool rule_covers(const AllowRule& t, const AllowRule& r) {
  if (!port_covers(t, r)) return false;
  using K = AllowRule::Kind;
  switch (t.kind) {
    case K::name: return r.kind == K::name && ascii_lower(r.name) == ascii_lower(t.name);
    case K::wildcard: {
      if (r.kind != K::name && r.kind != K::wildcard) return false;
      std::string n = ascii_lower(r.name), s = ascii_lower(t.name);
      if (r.kind == K::wildcard && n == s) return true;
      return n.size() > s.size() + 1 && n.ends_with("." + s);
    }
    case K::address:
    case K::cidr: return (r.kind == K::address || r.kind == K::cidr) && addr_in(t, r);
  }
  return false;
}

std::string layer_of(const std::map<std::string, std::string>& layers, const std::string& name) {
  auto it = layers.find(name);
  return it == layers.end() ? std::string("the run") : it->second;
}

// One limit. A value the caller asked for (a flag, a pack's manifest, an exec request) above the
// ceiling is refused: the tenant is the operator's own higher policy, so a flag passes it no more
// than a manifest does. A value that only the profile or sbx's defaults set (nobody asked for it
// in this run) is lowered to the ceiling, as is "unlimited" from those layers: a tenant whose
// ceiling is below the profile's default can still run with the default profile.
bool sets_ceiling(const Tenant& t, const char* spec_key) {
  return std::find(t.limit_keys_set.begin(), t.limit_keys_set.end(), spec_key) != t.limit_keys_set.end();
}

// One limit whose rule is TenantCeiling::refuse_raise. A value the caller asked for (a flag, a
// pack's manifest, an exec request) above the ceiling is refused: the tenant is the operator's own
// higher policy, so a flag passes it no more than a manifest does. A value that only the profile
// or sbx's defaults set (nobody asked for it in this run) is lowered to the ceiling, as is
// "unlimited" from those layers: a tenant whose ceiling is below the profile's default can still
// run with the default profile.
template <typename T>
Status cap(const Tenant& t, const LimitKind& k, const std::optional<T>& ceiling, std::optional<T>& asked,
           const std::map<std::string, std::string>& layers) {
  if (!sets_ceiling(t, k.spec_key)) return {};
  const std::string name = k.name;
  LimitFormat fmt = limit_format(k.unit);
  std::string layer = layer_of(layers, k.plan_name ? k.plan_name : k.name);
  const bool from_below = layer.starts_with("profile ") || layer.starts_with("sbx's defaults") || layer == "the run";
  if (from_below) {
    if (!asked || *asked > *ceiling) asked = ceiling;
    return {};
  }
  if (!asked) {
    if (layer.starts_with("flag "))
      return make_error("usage", "tenant '" + t.name + "': " + name + ": unlimited (" + layer +
                                     ") is above the tenant's ceiling (" + shown_limit(ceiling, fmt) +
                                     "): a tenant's ceiling binds the operator's flags too");
    asked = ceiling;
    return {};
  }
  if (*asked > *ceiling)
    return make_error("usage", "tenant '" + t.name + "': " + name + ": " + shown_limit(asked, fmt) + " (" + layer +
                                   ") is above the tenant's ceiling (" + shown_limit(ceiling, fmt) +
                                   "): nothing below a tenant may raise its limits, the operator's flags included");
  return {};
}

// TenantCeiling::lower: these have no layer record (limit_layers names the limits of the plan):
// lowered, never raised, whoever set them.
Status cap_plain(const Tenant& t, const char* spec_key, std::int64_t ceiling, std::int64_t& asked) {
  if (sets_ceiling(t, spec_key) && asked > ceiling) asked = ceiling;
  return {};
}
template <typename T>
Status cap_lower(const Tenant& t, const char* spec_key, const std::optional<T>& ceiling, std::optional<T>& asked) {
  if (sets_ceiling(t, spec_key) && (!asked || *asked > *ceiling)) asked = ceiling;
  return {};
}

std::string default_store(const Dirs& base, const std::string& name) { return base.state + "/tenants/" + name; }
}  // namespace

Status check_tenant_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxTenantNameLength) {
    // Appended, not `"literal" + std::to_string(n) + ...`: GCC 12 warns falsely (-Warray-bounds)
    // on that rvalue chain, and the build treats warnings as errors.
    std::string msg = "--tenant: a tenant name is 1 to ";
    msg += std::to_string(kMaxTenantNameLength);
    msg += " bytes";
    return make_error("usage", msg);
  }
  if (name[0] == '.' || name[0] == '-')
    return make_error("usage", "--tenant: a tenant name may not start with '.' or '-'");
  for (unsigned char c : bytes_of(name))
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '-'))
      return make_error(
          "usage", "--tenant: a tenant name holds only letters, digits, '.', '_' and '-' (no '/', no control bytes)");
  if (name.find("..") != std::string::npos) return make_error("usage", "--tenant: a tenant name may not contain '..'");
  return {};
}

bool is_full_digest(const std::string& s) {
  if (s.size() != 7 + 64 || !s.starts_with("sha256:")) return false;
  for (std::size_t i = 7; i < s.size(); ++i)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

std::vector<std::string> tenant_dirs() {
  std::vector<std::string> dirs;
  if (const char* p = std::getenv("SBX_TENANTS_DIR"); p && *p) {
    dirs.emplace_back(p);
    return dirs;  // an explicit directory is the only one (tests, and operators who want one place)
  }
  // As root only the operator's directory: a per-user directory searched first would let whoever
  // controls HOME or XDG_CONFIG_HOME (a service's environment, `sudo -E`) replace a tenant's policy.
  if (::geteuid() == 0) {
    dirs.emplace_back("/etc/sbx/tenants");
    return dirs;
  }
  return config_search_dirs("tenants");
}

namespace {

Status tenant_images(const json& v, const std::string& where, Tenant& t) {
  auto l = string_list(v, where, "images", 1024);
  if (!l) return l.error();
  // A digest is whole: a prefix is only 48 bits or so, which a tenant supplying its own
  // image could search for a collision.
  for (std::size_t i = 0; i < l->size(); ++i)
    if ((*l)[i].starts_with("sha256:") && !is_full_digest((*l)[i]))
      return make_error("usage", where + ": /images/" + std::to_string(i) +
                                     ": a digest is sha256: and all 64 lowercase hex digits (no prefixes)");
  t.images = std::move(*l);
  return {};
}

Status tenant_packs(const json& v, const std::string& where, Tenant& t) {
  auto l = string_list(v, where, "packs", 1024);
  if (!l) return l.error();
  // By digest only: a pack's name is what its own pack.json claims, and a tenant hands in
  // its packs, so a name would admit any pack that calls itself that.
  for (std::size_t i = 0; i < l->size(); ++i)
    if (!is_full_digest((*l)[i]))
      return make_error("usage", where + ": /packs/" + std::to_string(i) +
                                     ": a pack is allowed by its full digest (sha256: and 64 hex digits, as "
                                     "'sbx pack validate' prints it), not by the name its manifest claims");
  t.packs = std::move(*l);
  return {};
}

Status tenant_id_slot(const json& v, const std::string& where, Tenant& t) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > kMaxTenantSlot)
    return make_error("usage", where + ": /id_slot: must be an integer from 1 to " + std::to_string(kMaxTenantSlot) +
                                   " (slice N of sbx's subordinate id range; 0 is untenanted runs')");
  t.id_slot = static_cast<std::uint32_t>(v.get<std::int64_t>());
  return {};
}

Status tenant_separate_ids(const json& v, const std::string& where, Tenant& t) {
  if (!v.is_string() || (v != "required" && v != "preferred"))
    return make_error("usage", where + ": /separate_ids: must be \"required\" or \"preferred\"");
  t.require_separate_ids = v == "required";
  return {};
}

Status tenant_store(const json& v, const std::string& where, Tenant& t) {
  if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>()[0] != '/' ||
      v.get<std::string>().find("/../") != std::string::npos || v.get<std::string>().ends_with("/.."))
    return make_error("usage", where + ": /store: must be an absolute path without '..'");
  t.store = v.get<std::string>();
  return {};
}

Status tenant_gpu(const json& v, const std::string& where, Tenant& t) {
  if (!v.is_object()) return make_error("usage", where + ": /gpu: must be an object {\"max\": N}");
  for (auto& [gk, gv] : v.items()) {
    if (gk != "max")
      return make_error("usage", where + ": /gpu/" + pointer_token(gk) + ": unknown key" + did_you_mean(gk, {"max"}));
    if (!gv.is_number_integer() || gv.get<std::int64_t>() < 0 || gv.get<std::int64_t>() > 1024)
      return make_error("usage", where + ": /gpu/max: must be an integer from 0 to 1024");
    t.gpu_max = static_cast<int>(gv.get<std::int64_t>());
  }
  return {};
}

Status tenant_network(const json& v, const std::string& where, Tenant& t) {
  if (!v.is_object()) return make_error("usage", where + ": /network: must be an object {\"allow\": [...]}");
  for (auto& [nk, nv] : v.items()) {
    if (nk != "allow")
      return make_error("usage",
                        where + ": /network/" + pointer_token(nk) + ": unknown key" + did_you_mean(nk, {"allow"}));
    auto l = string_list(nv, where, "network/allow", 1024);
    if (!l) return l.error();
    for (std::size_t i = 0; i < l->size(); ++i)
      if (auto r = parse_allow_rule((*l)[i]); !r)
        return make_error("usage", where + ": /network/allow/" + std::to_string(i) + ": " + r.error().message);
    t.allow = std::move(*l);
  }
  return {};
}

// The ceilings: the keys a profile's "limits" takes (any spelling), read by the RunSpec's own
// reader over its defaults; a null would be no ceiling, which is refused.
Status tenant_limits(const json& v, const std::string& where, Tenant& t) {
  if (!v.is_object()) return make_error("usage", where + ": /limits: must be an object");
  json limits = v;
  std::map<std::string, std::string> written;
  if (auto st = canonical_limit_keys(limits, where, &written); !st) return st.error();
  static const RunSpec kDefaults;  // named: GCC 12 misreports a temporary here (-Wmaybe-uninitialized)
  json probe = spec_to_json(kDefaults);
  std::vector<std::string> known;
  for (auto& [lk, lv] : probe["limits"].items()) known.push_back(lk);
  for (auto& l : limit_keys()) known.push_back(l.name);
  for (auto& [lk, lv] : limits.items()) {
    if (!probe["limits"].contains(lk))
      return make_error("usage", where + ": /limits/" + pointer_token(written.count(lk) ? written[lk] : lk) +
                                     ": unknown key" + did_you_mean(lk, known));
    if (lv.is_null())
      return make_error("usage",
                        where + ": /limits/" + written[lk] + ": a tenant's ceiling cannot be null (leave the key out)");
    t.limit_keys_set.push_back(lk);
  }
  merge_patch(probe, json{{"limits", limits}});
  auto spec = spec_from_json(probe, where);
  if (!spec) return make_error("usage", as_written(spec.error().message, written));
  t.limits = spec->limits;
  return {};
}

Status tenant_description(const json& v, const std::string& where, Tenant&) {
  if (!v.is_string()) return make_error("usage", where + ": /description: must be a string");
  return {};
}

// The tenant file's keys, each with its reader.
using TenantKeyReader = Status (*)(const json&, const std::string&, Tenant&);
const std::vector<std::pair<std::string, TenantKeyReader>> kTenantKeys = {{"description", tenant_description},
                                                                          {"images", tenant_images},
                                                                          {"packs", tenant_packs},
                                                                          {"limits", tenant_limits},
                                                                          {"network", tenant_network},
                                                                          {"gpu", tenant_gpu},
                                                                          {"id_slot", tenant_id_slot},
                                                                          {"separate_ids", tenant_separate_ids},
                                                                          {"store", tenant_store}};

}  // namespace

Result<Tenant> parse_tenant(const std::string& text, const std::string& name, const std::string& where) {
  auto parsed = parse_json_doc(text, {kMaxTenantBytes, 16, 1u << 14}, "usage", where);
  if (!parsed) return parsed.error();
  json& j = *parsed;
  if (!j.is_object()) return make_error("usage", where + ": must be a JSON object");
  Tenant t;
  t.name = name;
  t.file = where;
  t.images = {"host"};
  for (auto& item : j.items()) {
    const std::string& k = item.key();
    auto reader = std::find_if(kTenantKeys.begin(), kTenantKeys.end(), [&](auto& e) { return e.first == k; });
    if (reader == kTenantKeys.end()) {
      std::vector<std::string> keys;
      for (auto& e : kTenantKeys) keys.push_back(e.first);
      return make_error("usage", where + ": /" + pointer_token(k) + ": unknown key" + did_you_mean(k, keys));
    }
    SBX_TRY(reader->second(item.value(), where, t));
  }
  if (t.id_slot == 0)
    return make_error("usage", where + ": /id_slot: required (1 to " + std::to_string(kMaxTenantSlot) +
                                   "): the slice of sbx's subordinate id range this tenant's sandboxes run under");
  return t;
}

Result<Tenant> load_tenant(const std::string& name) {
  SBX_TRY(check_tenant_name(name));
  auto dirs = tenant_dirs();
  for (auto& d : dirs) {
    std::string path = d + "/" + name + ".json";
    if (::access(path.c_str(), F_OK) != 0) continue;
    auto text = read_bounded(path, kMaxTenantBytes, "usage", "tenant file " + path);
    if (!text) return text.error();
    auto t = parse_tenant(*text, name, path);
    if (!t) return t.error();
    // One slice and one store per tenant: another tenant file (in any directory searched) on the
    // same slot would share host ids, and one naming the same store would read this one's records.
    std::size_t seen = 0;
    for (auto& od : dirs) {
      std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(od.c_str()), ::closedir);
      if (!dir) {
        if (errno == ENOENT) continue;
        return sys_error("usage", "cannot list the tenants directory " + od);
      }
      while (auto* e = ::readdir(dir.get())) {
        std::string f = e->d_name;
        if (!f.ends_with(".json") || (od == d && f == name + ".json")) continue;
        std::string other = f.substr(0, f.size() - 5);
        if (!check_tenant_name(other)) continue;
        if (++seen > 4096) return make_error("usage", "tenants directory " + od + ": more than 4096 tenant files");
        auto ot = read_bounded(od + "/" + f, kMaxTenantBytes, "usage", "tenant file " + od + "/" + f);
        if (!ot) continue;
        auto o = parse_tenant(*ot, other, od + "/" + f);
        if (!o) continue;
        if (o->id_slot == t->id_slot)
          return make_error("usage", "tenant '" + name + "': id_slot " + std::to_string(t->id_slot) +
                                         " is also tenant '" + other + "''s (" + od + "/" + f +
                                         "): two tenants on one slice would share host ids");
        if (!t->store.empty() && (t->store == o->store || t->store.ends_with("/tenants/" + other)))
          return make_error("usage", "tenant '" + name + "' (" + path + "): /store " + t->store + " is also tenant '" +
                                         other + "''s store (" + od + "/" + f +
                                         "): two tenants on one store would read each other's records");
        if (!o->store.empty()) t->other_stores.push_back({other, o->store});
      }
    }
    return t;
  }
  std::string where;
  for (auto& d : dirs) where += (where.empty() ? "" : ", ") + d;
  return make_error("usage", "--tenant " + name + ": no tenant file " + name + ".json in " + where +
                                 " (SBX_TENANTS_DIR names another directory)");
}

Dirs tenant_store(const Tenant& t, const Dirs& base) {
  Dirs d = base;
  d.state = t.store.empty() ? default_store(base, t.name) : t.store;
  d.traces = d.state + "/traces";
  return d;
}

Status check_tenant_store(const Tenant& t, const Dirs& base) {
  const std::string own = resolved_path(tenant_store(t, base).state);
  const std::string key = "tenant '" + t.name + "' (" + t.file + "): /store " + t.store;
  // A store the tenant's own host uid (or anyone else) can write is a store whose seccomp cache,
  // ledger and blobs the tenant's programs could rewrite for its later runs.
  SBX_TRY(check_private_dir(tenant_store(t, base).state, "tenant '" + t.name + "' (" + t.file + ") store"));
  if (!t.store.empty() && own != resolved_path(default_store(base, t.name))) {
    for (auto [dir, what] : {std::pair{base.state, "state"}, std::pair{base.data, "data"}}) {
      if (dir.empty()) continue;
      std::string rel = path_relation(own, resolved_path(dir));
      if (!rel.empty())
        return make_error("usage", key + " " + rel + " sbx's untenanted " + what + " directory " + dir +
                                       ": the tenant's records, ledger and blobs would mix with the untenanted runs' "
                                       "(leave /store out for " +
                                       default_store(base, t.name) + ")");
    }
  }
  for (auto& o : other_tenants(t, base)) {
    std::string rel = path_relation(own, resolved_path(o.store));
    if (rel.empty()) continue;
    if (!t.store.empty())
      return make_error("usage", key + " " + rel + " tenant '" + o.name + "''s store " + o.store +
                                     ": two tenants on one store would read each other's records");
    return make_error("usage", "tenant '" + o.name + "' (" + o.file + "): /store " + o.store + " " +
                                   path_relation(resolved_path(o.store), own) + " tenant '" + t.name + "''s store " +
                                   own + ": two tenants on one store would read each other's records");
  }
  return {};
}

Result<Dirs> tenant_store_of(const std::string& name, const Dirs& base) {
  auto t = load_tenant(name);
  if (!t) return t.error();
  SBX_TRY(check_tenant_store(*t, base));
  return tenant_store(*t, base);
}

bool allow_rule_covers(const AllowRule& ceiling, const AllowRule& rule) { return rule_covers(ceiling, rule); }

bool tenant_allows_image(const Tenant& t, const std::string& image, const std::string& digest) {
  for (auto& a : t.images) {
    // "host" admits the host's own root and nothing else: never a stored image that was given
    // that name (or "host:TAG") before the name was reserved (image_store.hpp, kHostImage).
    if (a == kHostImage || image == kHostImage) {
      if (a == image) return true;
      continue;
    }
    if (a == image) return true;
    if (!digest.empty() && a.starts_with("sha256:") && digest == a) return true;
    // NAME without a tag means NAME:latest, as image references do.
    if (a.find(':') == std::string::npos && image == a + ":latest") return true;
    if (image.find(':') == std::string::npos && a == image + ":latest") return true;
  }
  return false;
}

Status check_tenant_ceilings(const Tenant& t, RunSpec& spec, const std::map<std::string, std::string>& layers) {
  // Every limit of limits_table.hpp, by its tenant rule.
  for (const LimitKind* k : limit_kinds_by(&LimitOrder::ceiling))
    SBX_TRY(std::visit(
        [&](auto m) -> Status {
          if constexpr (std::is_same_v<decltype(m), std::int64_t Limits::*>)
            return cap_plain(t, k->spec_key, t.limits.*m, spec.limits.*m);
          else if (k->tenant == TenantCeiling::lower) return cap_lower(t, k->spec_key, t.limits.*m, spec.limits.*m);
          else return cap(t, *k, t.limits.*m, spec.limits.*m, layers);
        },
        k->member));

  // Network: every rule of the run must fall inside one of the tenant's.
  std::vector<AllowRule> ceiling;
  for (auto& s : t.allow)
    if (auto r = parse_allow_rule(s)) ceiling.push_back(*r);
  for (auto& s : spec.network.allow) {
    auto r = parse_allow_rule(s);
    if (!r) return r.error();
    bool ok = std::any_of(ceiling.begin(), ceiling.end(), [&](const AllowRule& c) { return rule_covers(c, *r); });
    if (!ok) {
      std::string list;
      for (auto& x : t.allow) list += (list.empty() ? "" : ", ") + x;
      return make_error("usage", "tenant '" + t.name + "': network.allow: '" + s +
                                     "' is outside the tenant's allowlist (" +
                                     (list.empty() ? std::string("none: no egress") : list) + ")");
    }
  }

  // GPUs: the tenant's quota lowers gpu.max, and a request past it is refused here, naming the tenant.
  if (t.gpu_max) {
    if (spec.gpu.max == kGpuMaxAll || spec.gpu.max > *t.gpu_max) spec.gpu.max = *t.gpu_max;
    if (!spec.gpu.devices.empty()) {
      auto g = parse_gpu_request(spec.gpu.devices);
      if (!g) return g.error();
      if (g->all && *t.gpu_max > 0)
        return make_error("usage", "tenant '" + t.name + "': gpu: 'all' is above the tenant's quota of " +
                                       std::to_string(*t.gpu_max) + " GPU(s): name them (--gpu 0 or --gpu 0,1)");
      std::size_t n = g->all ? 1 : g->items.size();
      if (static_cast<int>(n) > *t.gpu_max)
        return make_error("usage", "tenant '" + t.name + "': gpu: " + std::to_string(n) + " GPU(s) (" +
                                       layer_of(layers, "gpu") + ") is above the tenant's quota (" +
                                       std::to_string(*t.gpu_max) + ")");
    }
  }
  return {};
}

Status apply_named_tenant(const std::optional<std::string>& name, RunRequest& req, const json& pack) {
  if (!name) return {};
  auto t = load_tenant(*name);
  if (!t) return t.error();
  return apply_tenant(*t, req, pack);
}

Status apply_named_tenant(const std::optional<std::string>& name, RunRequest& req) {
  return apply_named_tenant(name, req, nullptr);
}

TenantIdentity plan_tenant_identity(const Tenant& t,
                                    const std::function<Result<IdentityPlan>(std::uint32_t slot)>& planner) {
  TenantIdentity id{t.id_slot, planner(t.id_slot), ""};
  // Root of a user namespace too small for the tenant's slice (a Kubernetes pod with hostUsers:
  // false maps 65536 ids, one slice): "preferred" runs in the namespace's own range, shared with
  // every other tenant's sandboxes there, as rootless does (deploy/README.md). Only there: not on
  // a host whose /etc/subuid range is too narrow (widen it), and never onto a single-id map (the
  // tenant's program would run as sbx's own uid, which owns every store).
  if (id.plan || t.require_separate_ids || id.plan.error().stage != "identity") return id;
  auto shared = planner(0);
  if (!shared || shared->single_id_fallback || !shared->range_source.starts_with("own user namespace (")) return id;
  id.shared_why = "this user namespace has no room for the tenant's slice (" + id.plan.error().message +
                  "); its sandboxes share the namespace's range with every other tenant's";
  id.slot = 0;
  id.plan = std::move(shared);
  return id;
}

namespace {

// Identity: the tenant's slice of sbx's range (userns.hpp). Rootless there is none to slice.
Status apply_tenant_identity(const Tenant& t, RunRequest& req, json& tenant) {
  bool rootless = ::geteuid() != 0;
  if (rootless) {
    if (t.require_separate_ids)
      return make_error(
          "usage", "tenant '" + t.name +
                       "': its file requires separate host ids (\"separate_ids\": \"required\"), "
                       "and rootless sbx has none to give: every sandbox runs as the caller's uid. Run sbx as root "
                       "(with an 'sbx' range in /etc/subuid and /etc/subgid), or set \"separate_ids\": \"preferred\"");
    put(tenant, "tenant/uid_range", nullptr);
    put(tenant, "tenant/gid_range", nullptr);
    put(tenant, "tenant/separation",
        trace_object(
            {{"tenant/separation/ids", false},
             {"tenant/separation/why",
              "rootless: every sandbox runs as the caller's uid; ceilings and the store are the tenant's, host ids are not"}}));
  } else {
    TenantIdentity id = plan_tenant_identity(t, [&req](std::uint32_t slot) { return plan_identity(req.spec, slot); });
    auto& plan = id.plan;
    const std::string& shared_why = id.shared_why;
    req.tenant.id_slot = id.slot;
    if (!plan) return make_error("usage", "tenant '" + t.name + "': " + plan.error().message);
    put(tenant, "tenant/uid_range", json::array({plan->uid_map.at(0).outside, plan->uid_map.at(0).count}));
    put(tenant, "tenant/gid_range", json::array({plan->gid_map.at(0).outside, plan->gid_map.at(0).count}));
    if (shared_why.empty()) put(tenant, "tenant/separation", trace_object({{"tenant/separation/ids", true}}));
    else
      put(tenant, "tenant/separation",
          trace_object({{"tenant/separation/ids", false}, {"tenant/separation/why", shared_why}}));
  }
  return {};
}

}  // namespace

Status apply_tenant(const Tenant& t, RunRequest& req, const json& pack) {
  SBX_TRY(check_tenant_store(t, req.dirs));
  SBX_TRY(check_tenant_ceilings(t, req.spec, req.limit_layers));
  // Images: by the name the run gives, or by the digest that name resolves to now.
  const std::string& image = req.spec.image;
  std::string digest;
  if (image != "host") {
    ImageStore store(req.dirs.images);
    if (auto rec = store.resolve(image)) digest = rec->digest;
    else if (image.starts_with("sha256:")) digest = image;
  }
  if (!tenant_allows_image(t, image, digest)) {
    std::string list;
    for (auto& x : t.images) list += (list.empty() ? "" : ", ") + x;
    return make_error("usage", "tenant '" + t.name + "': image '" + image + "'" +
                                   (digest.empty() ? "" : " (" + digest.substr(0, 19) + ")") +
                                   " is not among the tenant's images (" + list + ")");
  }
  if (pack.is_object()) {
    std::string pname = pack.value("name", ""), pdigest = pack.value("digest", "");
    bool ok = false;
    for (auto& p : t.packs) ok = ok || (!pdigest.empty() && p == pdigest);
    if (!ok) {
      std::string list;
      for (auto& x : t.packs) list += (list.empty() ? "" : ", ") + x;
      return make_error("usage", "tenant '" + t.name + "': pack '" + pname + "' (" + pdigest.substr(0, 19) +
                                     ") is not among the tenant's packs (" +
                                     (list.empty() ? std::string("none") : list) + ")");
    }
  }

  json tenant = trace_object({{"tenant/name", t.name}, {"tenant/file", t.file}, {"tenant/id_slot", t.id_slot}});
  SBX_TRY(apply_tenant_identity(t, req, tenant));
  // What the program writes into a shared bind is its own host uid's and nobody else's: 0600 and
  // 0700 whatever the caller's umask (a tenant's program may still chmod its files wider).
  req.tenant.umask = 077;
  req.tenant.name = t.name;
  put(tenant, "tenant/umask", "0077");
  // The run's state dir turns into the tenant's store, which its read-write binds are kept from
  // (check_binds_spare_state); the untenanted state and the other tenants' stores must stay out
  // of their reach too: a program that could write there would change what those runs trust.
  req.tenant.guarded_dirs.push_back({req.dirs.state, "sbx's untenanted state dir"});
  for (auto& [name, store] : t.other_stores)
    req.tenant.guarded_dirs.push_back({store, "tenant '" + name + "''s store"});
  req.dirs = tenant_store(t, req.dirs);
  put(tenant, "tenant/store", req.dirs.state);
  put(req.record_extra, "tenant", std::move(tenant));
  return {};
}

std::vector<OtherTenant> other_tenants(const Tenant& t, const Dirs& base) {
  std::vector<OtherTenant> out;
  auto slash = t.file.find_last_of('/');
  if (slash == std::string::npos) return out;
  std::string d = t.file.substr(0, slash);
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(d.c_str()), ::closedir);
  if (!dir) return out;
  while (auto* e = ::readdir(dir.get())) {
    std::string f = e->d_name;
    if (!f.ends_with(".json") || f == t.name + ".json" || out.size() >= 64) continue;
    std::string other = f.substr(0, f.size() - 5);
    if (!check_tenant_name(other)) continue;
    auto text = read_bounded(d + "/" + f, kMaxTenantBytes, "usage", f);
    if (!text) continue;
    auto o = parse_tenant(*text, other, d + "/" + f);
    if (!o) continue;
    out.push_back({other, tenant_store(*o, base).state, o->id_slot, d + "/" + f, !o->store.empty()});
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace sbx
