#pragma once
// Every limit of a run, defined once. Each entry says what the limit is called where (its public
// name, its RunSpec key, its name in the limit plan and the trace's enforcement section, its
// `sbx run` flag), how a value is read (parser, unit, bound), how it is enforced, and how a
// ceiling binds it (a profile's over a manifest or request, a tenant's over everything). The
// spec reader, the profile and tenant ceiling checks, limit_layers, the limit plan, the run
// cgroup, preflight, the trace's numbers, the pack/exec key list, the MCP tool schema and the
// CLI's limit flags all loop over this table; tests/unit/test_limits_table.cpp checks that it
// covers every member of Limits and that each ceiling refuses a raise of each limit.
// Adding a limit kind: docs/ARCHITECTURE.md, "Adding a limit kind".
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/base/error.hpp"
#include "runtime/model/limits.hpp"

namespace sbx {

// Upper bounds of the quantities a spec holds (DocReader::get_quantity); the string forms are
// bounded alike by parse_duration_ms and parse_size_bytes.
inline constexpr std::int64_t kMaxDurationMs = 1'000'000'000'000'000;  // ~31,700 years
inline constexpr std::int64_t kMaxSizeBytes = 1LL << 62;
inline constexpr std::int64_t kMaxCount = 1LL << 31;
inline constexpr std::int64_t kMaxPids = 1LL << 22;  // the kernel's PID_MAX_LIMIT
inline constexpr std::int64_t kMaxCpus = 4096;

enum class LimitUnit {
  duration_ms,  // "250ms", "2s" or a number of ms; shown by format_duration_ms
  size_bytes,   // "64M" or a number of bytes; shown by format_size
  count,        // a plain integer (processes, files)
  cpus,         // a number of CPUs, fractions allowed ("0.5")
};

enum class LimitEnforcement {
  plan,        // the limit plan (limits_plan.hpp): cgroup v2 or an rlimit fallback; wants a run cgroup
  supervisor,  // sbx's supervisor (timerfd, byte cap); in the limit plan too
  tmpfs,       // the size option of a tmpfs sbx mounts (/tmp, /out)
  export_cap,  // artifact export (--output DIR) stops there; the run's status becomes output_limit
};

// How a tenant's ceiling binds the limit (tenant.hpp). A profile's ceiling binds every limit
// alike: a manifest or request may lower it, never raise or remove it; the limit's flag, if any,
// is the operator's to raise (check_ceilings).
enum class TenantCeiling {
  refuse_raise,  // a value some layer asked for above it is refused, naming that layer (limit_layers)
  lower,         // lowered to the ceiling, whoever set it (no layer record)
};

// Where the limit's value lives in Limits. An optional member is unlimited when unset and can be
// cleared ("none"); the others always have a value.
using LimitMember =
    std::variant<std::optional<std::int64_t> Limits::*, std::optional<double> Limits::*, std::int64_t Limits::*>;

// The orders in which the lists that predate this table visited the limits, kept because each
// is observable: which error of several a document, a set of flags or a ceiling check reports
// first, and the order of the plan's decisions in the trace and --dry-run. Unique per column.
struct LimitOrder {
  int read;     // spec_from_json's reading of `limits`
  int ceiling;  // check_ceilings, check_tenant_ceilings
  int plan;     // plan_limits' decisions (only limits with a plan name)
  int flag;     // the CLI's limit flags (only clearable limits with a flag)
};

struct LimitKind {
  const char* name;       // public: manifest/request/profile/tenant key, ceiling messages ("output_limit")
  const char* spec_key;   // RunSpec key, trace record ("output_limit_bytes")
  const char* plan_name;  // limits_plan.hpp / trace enforcement / limit_layers name ("output"); nullptr: none
  const char* flag;       // the `sbx run` flag ("--output-limit"); "": none (only the profile sets it)
  LimitMember member;
  LimitUnit unit;
  // Parses a string form (units); for a count, every string is an error naming `noun`.
  Result<std::int64_t> (*parse)(std::string_view);
  const char* noun;   // "process count", ...: in "bad process count '12x'"
  bool positive;      // 0 is refused (else 0 is a limit: nothing passes)
  std::int64_t max;   // the largest value accepted
  bool in_manifests;  // a pack manifest or exec request may set it (limit_keys, MCP schema)
  LimitEnforcement enforced;
  const char* controller;  // the cgroup v2 controller RunCgroup::create requires for it; nullptr: none
  TenantCeiling tenant;
  const char* example;  // for the MCP tool schema's description ("10s"); nullptr: none
  LimitOrder order;
};

// The table, in the order of limit_keys (the public names a manifest takes, as its error lists them).
const std::vector<LimitKind>& limit_kinds();
// The same entries sorted by one column of LimitOrder; those without a plan name are left out for
// &LimitOrder::plan, those without a clearable flag for &LimitOrder::flag.
std::vector<const LimitKind*> limit_kinds_by(int LimitOrder::*column);
const LimitKind* limit_kind_by_plan_name(std::string_view plan_name);

// Whether `l` has a value for the limit (a member without optional always has).
bool limit_set(const Limits& l, const LimitKind& k);
// Its value as JSON: a number (bytes, ms, a count, CPUs), null when unset.
nlohmann::json limit_json(const Limits& l, const LimitKind& k);
// How a value of the unit is shown to a user ("64M", "2s"); nullptr: as a plain number.
using LimitFormat = std::string (*)(std::int64_t);
LimitFormat limit_format(LimitUnit unit);

// The limit's flag onto `limits` (only for a clearable limit with a flag): "none" or "unlimited"
// clears it ("0" too for cpus); else the value replaces the layers' one. Errors name the flag
// ("--memory: must be greater than zero (or none for no limit)").
Status apply_limit_flag(Limits& limits, const LimitKind& k, const std::string& text);
// Whether a limit's flag is one apply_limit_flag takes.
bool has_clearable_flag(const LimitKind& k);

}  // namespace sbx
