#pragma once
// A long-lived delegated systemd user scope that rootless runs join instead of each re-executing
// sbx under `systemd-run --user --scope` (cli/systemd_scope.hpp; bench/systemd_scope.sh measures
// both).
//
// Why D-Bus: a new sbx cannot move itself into an existing scope by writing cgroup.procs there.
// Moving a process needs write access to cgroup.procs of the common ancestor of its old and new
// cgroup, and for a login session (user-UID.slice/session-N.scope) that ancestor is root's. The
// user manager's AttachProcessesToUnit(unit, subcgroup, pids) (systemd >= 238) moves the caller
// into a subcgroup of a unit with Delegate=yes, asking PID 1 when it lacks the rights itself.
//
// The layout, for uid U (all of it owned by U through Delegate=yes):
//   .../user@U.service/app.slice/sbx-runs-U.scope/      the scope; memory/pids/cpu enabled below
//       keeper/                                           `sbx scope-keeper`, which keeps it alive
//       run-PID/                                          one per sbx run that joined (PID: its pid)
// The first run that finds no such unit starts it (systemd-run --scope running the keeper, in the
// background); two runs at once both try, systemd refuses the second ("already exists"), and both
// then attach to the one that exists. The keeper removes empty run-* cgroups, and exits once no
// run has been there for its idle period: the scope, empty, then goes away (systemd collects it),
// and the next run starts a new one.
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "runtime/base/error.hpp"

namespace sbx {

// "0" turns the reuse off (every run re-executes itself, as before): for measuring and debugging.
inline constexpr const char* kScopeReuseEnv = "SBX_SCOPE_REUSE";
// The keeper's idle period in seconds when a run starts it (default kDefaultKeeperIdle).
inline constexpr const char* kKeeperIdleEnv = "SBX_SCOPE_KEEPER_IDLE";
inline constexpr int kDefaultKeeperIdle = 600;
inline constexpr int kMaxKeeperIdle = 7 * 24 * 3600;

// "sbx-runs-<uid>.scope"
std::string reused_scope_unit(uid_t uid);

// An idle period: whole seconds, 1..kMaxKeeperIdle; an error naming `where` otherwise.
Result<int> parse_keeper_idle(const std::string& text, const std::string& where);

struct JoinedScope {
  std::string unit;      // sbx-runs-<uid>.scope
  std::string cgroup;    // sbx's own cgroup now (…/sbx-runs-<uid>.scope/run-<pid>), from /proc/self/cgroup
  bool started = false;  // this run started the scope (no keeper answered before)
  std::string manager;   // the socket the user manager answered on
};

// Moves this process into <unit>/run-<pid> through the user manager on `runtime_dir`'s
// systemd/private (peer-to-peer) or bus (message bus), starting the scope and its keeper with
// systemd-run first when the unit is not there. Every step is bounded; the whole call takes at
// most about `budget_ms`. On success /proc/self/cgroup says sbx is in the scope and the scope
// gives its children controllers; an error otherwise (the caller falls back to re-executing).
Result<JoinedScope> join_reused_scope(const std::string& runtime_dir, const std::string& self_exe, int keeper_idle_s,
                                      int budget_ms);

// `sbx scope-keeper --idle N`, run by systemd-run inside sbx-runs-<uid>.scope: moves itself into
// the scope's keeper/ leaf, enables memory/pids/cpu for the scope's children, then every second
// removes empty run-* cgroups and exits after `idle_s` seconds without any run. Returns the exit
// status (125 when it is not in such a scope: it refuses to touch any other cgroup).
int run_scope_keeper(int idle_s);

}  // namespace sbx
