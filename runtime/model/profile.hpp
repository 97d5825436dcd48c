#pragma once
// Profiles: JSON files of RunSpec defaults. A name is looked up in the profile path
// ($SBX_PROFILE_PATH, $XDG_CONFIG_HOME/sbx/profiles, /etc/sbx/profiles) and then among the
// profiles compiled into the binary (share/sbx/profiles holds installed copies to read, not a
// search directory: the binary needs no data files); anything with a '/' or ending in .json is
// a file. Merge order: built-in defaults < profile < pack manifest < command-line flags.
//
// A profile may start from another: "extends": "untrusted" (a name or a file, at most 8 levels,
// no cycles) gives it that profile's content with its own over it. A profile that extends nothing
// gets, for each limit it leaves out, the built-in default profile's value for it ("untrusted":
// 30s, 512M, 64 processes, 1 CPU, 16M of output): a limit is only ever absent when a profile
// says so with null.
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/model/spec.hpp"

namespace sbx {

struct ProfileSource {
  std::string name;    // "untrusted"
  std::string origin;  // file path, or "built-in"
  std::string text;    // raw JSON text (hashed into the trace)
  // sha256 of the merged profile, every profile it extends resolved (load_profile fills it; ""
  // from find_profile, which reads only the file's own text). The text's digest alone misses an
  // edit of a parent: the record's invocation.profile.resolved_sha256, and what a warm pool
  // compares before it hands out a sandbox built under the profile (profile_changed).
  std::string resolved_sha256;
};

struct LoadedProfile {
  ProfileSource source;
  nlohmann::json patch;       // parsed, validated as a partial RunSpec (limits under RunSpec keys)
  nlohmann::json as_written;  // the profile's own content, keys spelled as in the file
  std::string description;
  // "extends": the profiles it inherits from, nearest first ({"child-of", "untrusted"}); its
  // patch is theirs with its own content over it.
  std::vector<std::string> extends;
  // The limits (public names: "memory", "pids") that the profile, and every profile it extends,
  // leaves unset, and so come from the built-in default profile (kDefaultProfile) rather than
  // meaning "no limit". Named by limit_layers, and so by --dry-run and the trace, and by
  // `sbx profile show`.
  std::vector<std::string> limits_defaulted;
};

inline constexpr const char* kDefaultProfile = "untrusted";

// Finds and parses a profile; bad JSON, unknown keys and bad values are errors naming the file
// and the key.
Result<LoadedProfile> load_profile(const std::string& name_or_file);
// Where a profile is found and its text, not yet parsed (load_profile's first half): a warm
// pool's hand-out compares it with what its sandbox was built under (parsing is most of a load).
Result<ProfileSource> find_profile(const std::string& name_or_file);

// Why a sandbox built under `built` (load_profile(name)'s result then) must not serve a call now
// ("" when it may): the file it was found in, its text, or, for a profile that extends another,
// the merged profile is not what it was (a parent edited since). Only a profile that extends
// another is parsed again; the others are compared by their text (parsing is most of a load).
Result<std::string> profile_changed(const LoadedProfile& built, const std::string& name);

// All profiles visible by name (search path first, then built-in), one per name.
std::vector<ProfileSource> list_profiles();

// defaults < profile < manifest: the merged spec before command-line flags are applied. The
// profile is a ceiling for the manifest (a pack's pack.json, an exec request): its limits may be
// lowered there, never raised or removed; an attempt is an error naming the manifest's key
// (check_ceilings). Command-line flags come later and are the operator's to raise: the limits in
// `set_by_operator` (manifest key names: "timeout", "memory", ...) are decided by a flag, so the
// manifest's value for them is not checked (the flag replaces it).
// Who may raise a profile's ceiling, and so the fix a refused limit names: `sbx run` and `sbx pack
// run` take a flag per limit (--timeout); `sbx exec` and `sbx mcp` take no limit flag, only
// --profile (a request may not raise what its operator chose).
enum class CeilingRaise { by_flag, by_profile };
struct LimitKind;  // limits_table.hpp
// The one wording of that fix, appended to a ceiling refusal: "; the operator may raise it with
// --timeout" (empty for a limit without a flag), or "; the operator may pass --profile with a
// profile whose limits.timeout is higher".
std::string ceiling_raise_hint(const LimitKind& k, CeilingRaise how);

Result<RunSpec> spec_from_layers(const LoadedProfile& profile, const nlohmann::json* manifest_patch,
                                 const std::string& manifest_source, const std::set<std::string>& set_by_operator = {},
                                 CeilingRaise how = CeilingRaise::by_flag);

// Which layer set each limit of the merged spec, by limits_plan.hpp's names ("memory", "pids",
// "cpus", "cpu_time", "timeout", "output"): "flag --cpus" for those in `by_flag` (same names),
// else `manifest_source` when the manifest's patch sets it, else "profile 'NAME'" when the
// profile does, else "sbx's defaults". --require-limits names it (preflight.hpp).
std::map<std::string, std::string> limit_layers(const LoadedProfile& profile, const nlohmann::json* manifest_patch,
                                                const std::string& manifest_source,
                                                const std::set<std::string>& by_flag);

// Every limit of `asked` that is above `ceiling`'s (or unlimited where the ceiling has one):
// "SOURCE: /limits/timeout: 100h is above the ceiling of profile 'untrusted' (30s) ...".
Status check_ceilings(const RunSpec& ceiling, const RunSpec& asked, const std::string& source,
                      const std::string& profile_name, const std::set<std::string>& set_by_operator = {},
                      CeilingRaise how = CeilingRaise::by_flag);

// Capabilities: `asked` keeps no capability that `ceiling` does not, except those the operator
// added by flag, which `set_by_operator` holds as kCapabilityByOperator + "CAP_NAME".
inline constexpr const char* kCapabilityByOperator = "capability ";
Status keeps_at_most(const std::vector<std::string>& ceiling, const std::vector<std::string>& asked,
                     const std::string& source, const std::string& profile,
                     const std::set<std::string>& set_by_operator);

}  // namespace sbx
