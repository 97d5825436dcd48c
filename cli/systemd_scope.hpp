#pragma once
// Rootless, without a delegated cgroup v2 subtree, sbx cannot apply memory, pids or cpu limits
// through cgroups. A systemd user manager can delegate one: sbx re-executes itself under
// `systemd-run --user --scope -p Delegate=yes`, whose scope is a cgroup the user owns.
//
// Automatic by default: a rootless `sbx run` on a pure cgroup v2 host whose own cgroup is not
// usable (a login session's scope is root's, not the user's) re-executes itself so when a user
// manager answers on $XDG_RUNTIME_DIR/systemd/private (the socket systemd-run --scope uses first)
// or the user bus. --systemd-scope insists (exit 125 when it cannot), --no-systemd-scope never
// re-executes. The re-executed sbx learns how its cgroup was obtained from kInScopeEnv and says
// so in the trace (host.cgroup.obtained_by).
#include <optional>
#include <string>
#include <vector>

#include "runtime/linux/cgroup.hpp"
#include "runtime/model/scope_decision.hpp"
#include "runtime/model/spec.hpp"

namespace sbx::cli {

// Set for the re-executed sbx: "auto" or "flag" (how the scope came about).
inline constexpr const char* kInScopeEnv = "SBX_IN_SYSTEMD_SCOPE";

// Reads the facts: euid, kInScopeEnv, $XDG_RUNTIME_DIR/systemd/private and .../bus (connect()ed,
// so that a stale socket file of a manager that is gone does not count), systemd-run on PATH.
ScopeFacts gather_scope_facts(const RunSpec& spec, const CgroupInfo& info);

// Re-executes sbx (argv without --systemd-scope/--no-systemd-scope) inside a delegated systemd
// scope when `decide_systemd_scope` says so. Returns nullopt when no re-exec is needed (with
// `why` filled for the trace); otherwise it only returns on failure, with the exit status (125).
//
// Automatic mode first tries to join the long-lived scope sbx-runs-<uid>.scope over D-Bus
// (runtime/linux/scope_reuse.hpp): no re-exec, no systemd-run per run. When that works it returns
// nullopt with `reused_unit` set to the unit's name; when it fails it re-executes as before.
std::optional<int> maybe_reexec_in_systemd_scope(const std::vector<std::string>& argv, const RunSpec& spec,
                                                 ScopeMode mode, std::string& why, std::string* reused_unit = nullptr);

// In the re-executed sbx: "auto" or "flag" when kInScopeEnv is set and sbx's cgroup is indeed a
// systemd scope (a variable alone proves nothing), else "". Clears kInScopeEnv either way, so
// that nothing sbx starts inherits it.
// `unit` (optional) gets the scope's unit name (the own cgroup's last component) when it is one.
std::string scope_origin(std::string* unit = nullptr);

// The systemd-run command line for `self_exe` and sbx's own arguments (exposed for tests).
std::vector<std::string> systemd_scope_argv(const std::string& self_exe, const std::vector<std::string>& argv);

}  // namespace sbx::cli
