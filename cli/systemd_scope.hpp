#pragma once
// --systemd-scope: rootless, without a delegated cgroup v2 subtree, sbx cannot apply memory, pids
// or cpu limits through cgroups. systemd can delegate one: sbx re-executes itself under
// `systemd-run --user --scope -p Delegate=yes`, whose scope is a cgroup the user owns.
#include <optional>
#include <string>
#include <vector>

#include "runtime/spec.hpp"

namespace sbx::cli {

inline constexpr const char* kInScopeEnv = "SBX_IN_SYSTEMD_SCOPE";

// Re-executes sbx (argv without --systemd-scope) inside a delegated systemd scope when that is
// what the run needs: rootless, not already in such a scope, and no usable cgroup v2 here. Returns
// nullopt when no re-exec is needed; otherwise it only returns on failure, with the exit status.
std::optional<int> reexec_in_systemd_scope(const std::vector<std::string>& argv, const RunSpec& spec);

// The systemd-run command line for `self_exe` and sbx's own arguments (exposed for tests).
std::vector<std::string> systemd_scope_argv(const std::string& self_exe, const std::vector<std::string>& argv);

}  // namespace sbx::cli
