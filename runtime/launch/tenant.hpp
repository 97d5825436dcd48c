#pragma once
// Tenants: one customer's policy, applied as a ceiling over everything a run is built from.
//
// A tenant is a JSON file NAME.json in the tenants directory ($SBX_TENANTS_DIR, else
// $XDG_CONFIG_HOME/sbx/tenants, else /etc/sbx/tenants: the first that holds NAME.json). It names
// the images and packs the tenant may use, ceilings for the limits (the keys and spellings of a
// profile's `limits`), the network allowlist, a GPU quota, its slot in sbx's subordinate id
// range and (optionally) where its store lives. `--tenant NAME` applies it after every other layer
// (profile < manifest or request < flags), so nothing below can raise it: not the profile, not the
// manifest, not the operator's flags; an attempt is refused (exit 125) naming the key and tenant.
//
// Separation by construction: each tenant's sandboxes map to a host uid/gid slice of its own
// (userns.hpp, plan_identity with the tenant's id_slot), so a file one tenant wrote (0600 by
// default, see man/sbx.1 TENANTS) is another host uid's to the next tenant; its records, ledger
// and blobs live in a store of its own (<state>/tenants/NAME unless the file names one).
// Rootless there is no range to slice: the tenant's ceilings and store still hold, its ids do not
// (every sandbox is the caller's uid); a tenant whose file says "separate_ids": "required" (the
// default) is refused then.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/egress/egress_policy.hpp"
#include "runtime/model/spec.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx {

struct RunRequest;

inline constexpr std::size_t kMaxTenantBytes = 256u << 10;
inline constexpr std::size_t kMaxTenantNameLength = 64;
inline constexpr std::uint32_t kMaxTenantSlot = 4095;

struct Tenant {
  std::string name;
  std::string file;                         // where it was read
  std::vector<std::string> images;          // names (NAME[:TAG], "host") or digests (sha256:<hex>)
  std::vector<std::string> packs;           // pack names or digests (sha256:<hex>)
  Limits limits;                            // only the keys in `limit_keys_set` are ceilings
  std::vector<std::string> limit_keys_set;  // RunSpec keys ("memory_bytes") the file sets
  std::vector<std::string> allow;           // network allowlist ceiling (egress_policy.hpp rules)
  std::optional<int> gpu_max;               // most GPUs a run may get; nullopt: the profile decides
  std::uint32_t id_slot = 0;                // 1..kMaxTenantSlot: which slice of sbx's id range
  bool require_separate_ids = true;         // "separate_ids": "required" (default) or "preferred"
  std::string store;                        // absolute; "" for <state>/tenants/NAME
  // Set by load_tenant, from its walk of every tenant file: {name, /store} of each other tenant
  // whose file names a store (the others live in <state>/tenants/NAME, inside the untenanted state
  // dir); apply_tenant keeps this run's read-write binds out of them.
  std::vector<std::pair<std::string, std::string>> other_stores;
};

// Name rules: 1..64 bytes of [A-Za-z0-9._-], not starting with '.' or '-' (no '/', no "..",
// no control bytes: the name becomes a file and a directory name).
Status check_tenant_name(const std::string& name);

// The directories searched, in order.
std::vector<std::string> tenant_dirs();

// Parses a tenant document (bounded, json_io.hpp); unknown keys are errors with a did-you-mean.
Result<Tenant> parse_tenant(const std::string& text, const std::string& name, const std::string& where);

// Finds NAME.json in tenant_dirs(), parses it, and refuses an id_slot that another tenant file of
// the same directory also claims (two tenants on one slice would share host ids).
Result<Tenant> load_tenant(const std::string& name);

// The tenant's store: `dirs` with state/traces moved to the tenant's own directory (images stay
// shared: a tenant may use only those it is allowed, by name or digest).
Dirs tenant_store(const Tenant& t, const Dirs& base);

// Refuses (stage "usage", naming the tenant file and its /store key) a store that is, holds or
// lies inside sbx's untenanted state or data directory of `base` (the tenant's own default,
// <state>/tenants/NAME, excepted), or another tenant's store (same, inside or above). Paths are
// compared after resolving symlinks of the parts that exist: a store given through a symlink to
// the state directory is the state directory. Without this, `gc --tenant` would delete the
// untenanted runs' blobs and `trace ls --tenant` list their records.
Status check_tenant_store(const Tenant& t, const Dirs& base);

// load_tenant + check_tenant_store + tenant_store: the store of `--tenant NAME` for the commands
// that only read or tidy it (trace, gc, replay).
Result<Dirs> tenant_store_of(const std::string& name, const Dirs& base);

// Applies the tenant to a fully layered run (after profile, manifest/request and flags): refuses
// any limit above the tenant's ceiling (naming the key, the layer that asked and the tenant),
// fills limits the run leaves unlimited with the tenant's, refuses an image, an allow rule or a
// GPU request the tenant does not allow, moves the run's store to the tenant's (and adds the
// untenanted state dir and the stores other tenant files name to
// RunRequest::tenant.guarded_dirs, which no read-write bind may reach), picks its id slice
// (RunRequest::tenant) and adds `tenant` to the record. Rootless with separate ids required:
// refused.
// `pack` is the pack's {name, digest} when a pack runs (checked against `packs`), else null.
Status apply_tenant(const Tenant& t, RunRequest& req, const nlohmann::json& pack);
// `--tenant NAME` on a fully built request: load_tenant, then apply_tenant; no name: no-op. The
// one way every caller (run, pack run, exec, the MCP worker) applies a tenant by name.
Status apply_named_tenant(const std::optional<std::string>& name, RunRequest& req, const nlohmann::json& pack);
Status apply_named_tenant(const std::optional<std::string>& name, RunRequest& req);  // no pack

// The id slice a tenant's sandboxes map to as root (apply_tenant): its own slot's plan, or, for
// "separate_ids": "preferred" in a user namespace with no room for that slot, the namespace's
// own range (slot 0) with why. `planner` is plan_identity for the run's spec (unit-tested with
// others).
struct TenantIdentity {
  std::uint32_t slot = 0;
  Result<IdentityPlan> plan;
  std::string shared_why;  // "" : the tenant's own slice
};
TenantIdentity plan_tenant_identity(const Tenant& t,
                                    const std::function<Result<IdentityPlan>(std::uint32_t slot)>& planner);

// Just the ceiling checks of apply_tenant on a spec (unit-tested on their own).
// `layers`: limit name -> who set it (RunRequest::limit_layers), for the message.
Status check_tenant_ceilings(const Tenant& t, RunSpec& spec, const std::map<std::string, std::string>& layers);

// Whether `image` (as the run names it) or `digest` is on the list.
bool tenant_allows_image(const Tenant& t, const std::string& image, const std::string& digest);

// Whether `ceiling` (a tenant's or a profile's --allow-host rule) covers every host and port of
// `rule`: the same name, a name under a wildcard, an address inside a CIDR, a port inside a range.
bool allow_rule_covers(const AllowRule& ceiling, const AllowRule& rule);

// What `sbx probe --tenant` checks from inside: every other tenant of the same tenants directory
// (at most 64), with its store (absolute host path) and id slot.
struct OtherTenant {
  std::string name, store;
  std::uint32_t id_slot = 0;
  std::string file;        // its tenant file
  bool store_set = false;  // its file names /store (else the default <state>/tenants/NAME)
};
std::vector<OtherTenant> other_tenants(const Tenant& t, const Dirs& base);

}  // namespace sbx
