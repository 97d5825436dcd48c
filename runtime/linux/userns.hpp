#pragma once
// Identity. Rootless: the caller's uid/gid map to the sandbox's uid/gid (a
// single-id map, the only one an unprivileged process may write; setgroups is denied first).
// As host root: the sandbox's ids 0-65535 map to an unprivileged host range (an `sbx` entry in
// /etc/subuid and /etc/subgid, else a built-in default), never to host uid 0. A breakout then
// lands as an unmapped, unprivileged host uid, and files owned by host root (the sbx binary behind
// /proc/PID/exe included, runc CVE-2019-5736) stay unwritable from inside.
// As root of a user namespace (a pod with `hostUsers: false`, a podman container with --uidmap) only
// the ids that namespace maps can be mapped further: when that range is not among them, the
// sandbox gets the largest run of them that leaves out our own uid/gid (the container's root is
// never the sandbox's), and where there is none, a single-id map as rootless, and the record says so.
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/model/spec.hpp"

namespace sbx {

struct IdMapping {
  std::uint32_t inside = 0, outside = 0, count = 1;
};

struct IdentityPlan {
  bool rootless = true;
  std::vector<IdMapping> uid_map, gid_map;
  std::uint32_t uid = 0, gid = 0;  // the program's identity inside
  std::string range_source;        // "/etc/subuid (sbx)", "built-in default", "caller", "own user namespace (N ids)"
  // Root of a user namespace that maps no id besides our own: the single-id map of a rootless
  // run (the sandbox's root is the container's), warned about on stderr and said in the record.
  bool single_id_fallback = false;
  // The caller's supplementary groups stay with the program: the sandbox's namespace denies
  // setgroups(2). Rootless, the kernel demands it of an unprivileged writer of gid_map (they are the
  // caller's own groups); in the single-id fallback, only where our own namespace denies it already
  // (unshare -r) or we lack CAP_SETGID to drop them. Everywhere else they are dropped before the
  // program runs.
  bool keep_groups = false;
  // sbx runs in the host's user namespace (in_initial_user_namespace, from the maps the plan was
  // made of): only there can a host file system be idmapped (binds, the image's tree).
  bool initial_namespace = true;
};

// The maps of the initial user namespace (every id but 4294967295, the kernel's "no id").
inline constexpr const char* kInitialIdMap = "         0          0 4294967295\n";
// Our own namespace's /proc/self/uid_map and gid_map, as text.
struct OwnIdMaps {
  std::string uid_map = kInitialIdMap, gid_map = kInitialIdMap;
  bool setgroups_denied = false;  // /proc/self/setgroups says "deny" (unshare -r; rootless sbx)
  bool has_setgid = true;         // CAP_SETGID is in our effective set (a container may drop it)
};
// Reads them (bounded; an unreadable file is taken as the initial namespace's: no /proc, as in a
// chroot, where the maps cannot be written either, which fails later with its own message).
OwnIdMaps read_own_id_maps();
// Whether our uid_map is the initial namespace's (every id, unshifted): outside it, the kernel
// refuses what only the host's namespace may do (idmapping a host file system, open_tree of a
// mount the host's namespace owns), and messages should say so.
bool in_initial_user_namespace();

// /proc/PID/uid_map text: lines of three decimal numbers (INSIDE OUTSIDE COUNT), at most 340 of
// them (the kernel's limit), none overflowing. nullopt: anything else.
std::optional<std::vector<IdMapping>> parse_id_map(std::string_view text);

inline constexpr std::uint32_t kDefaultHostBase = 1879048192;  // 0x70000000, far above normal users
inline constexpr std::uint32_t kMappedRange = 65536;

// Parent side, before clone: decides the maps. `subid_text` is the content of /etc/subuid-like
// files (empty when absent); exposed for tests. `slot` (tenant.hpp) picks slice N of sbx's range:
// host ids start + N*65536 .. start + (N+1)*65536 - 1, disjoint from every other slot's; 0 is the
// untenanted runs' slice. A range too small for the slot is an error (never an overlap).
// The built-in default range holds kDefaultSlices slices. Rootless, the slot changes nothing.
inline constexpr std::uint32_t kDefaultSlices = 4096;
Result<IdentityPlan> plan_identity(const RunSpec& spec, uid_t caller_uid, gid_t caller_gid,
                                   const std::string& subuid_text, const std::string& subgid_text,
                                   std::uint32_t slot = 0, const OwnIdMaps& own = {});
// Reads /etc/subuid and /etc/subgid, our own namespace's maps, and the caller's ids.
Result<IdentityPlan> plan_identity(const RunSpec& spec, std::uint32_t slot = 0);

// Parent side, after clone and before "go": writes /proc/PID/{setgroups,uid_map,gid_map}.
Status write_id_maps(pid_t child, const IdentityPlan& plan);

// Child side (init), after "go": become root of the new user namespace where the maps allow it
// (as host root the child still has host uid 0, which is unmapped inside).
Status become_namespace_root(const IdentityPlan& plan);

// Child side (program): switch to the program's uid/gid, dropping supplementary groups unless the
// plan keeps them (keep_groups: setgroups is denied there).
Status switch_to_program_identity(const IdentityPlan& plan);

nlohmann::json identity_to_json(const IdentityPlan& plan);

// The host id that `inside` maps to (nullopt: unmapped), and whether host id `outside` is mapped.
std::optional<std::uint32_t> host_id(const std::vector<IdMapping>& map, std::uint32_t inside);
bool maps_host_id(const std::vector<IdMapping>& map, std::uint32_t outside);

// Host root only: a user namespace of its own (no process left in it) whose maps are exactly
// `uid_map` and `gid_map`, as an fd: the idmapping of an idmapped mount (mount_setattr(2),
// MOUNT_ATTR_IDMAP), which shows a file of on-disk id `inside` as host id `outside`.
Result<UniqueFd> make_idmap_userns(const std::vector<IdMapping>& uid_map, const std::vector<IdMapping>& gid_map);

// "NAME:START:COUNT" lines; returns {start, count} of the first entry for `name` with count >= need.
bool find_subid_range(const std::string& text, const std::string& name, std::uint32_t need, std::uint32_t& start,
                      std::uint32_t& count);

}  // namespace sbx
