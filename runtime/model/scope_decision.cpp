#include "runtime/model/scope_decision.hpp"

#include <utility>

namespace sbx {

ScopeDecision decide_systemd_scope(ScopeMode mode, const ScopeFacts& f) {
  const bool flag = mode == ScopeMode::always;
  auto no = [](std::string why) { return ScopeDecision{false, false, std::move(why)}; };
  auto refuse = [](std::string why) { return ScopeDecision{false, true, std::move(why)}; };
  if (mode == ScopeMode::never) return no("--no-systemd-scope");
  if (f.in_scope) return no("already re-executed in a delegated systemd scope");
  if (!f.rootless) return no("root needs no delegation");
  if (f.cgroup_usable) return no("a delegated cgroup v2 is already usable here");
  if (!flag) {
    // Only where a scope can help: a pure cgroup v2 host. On a hybrid host the v2 hierarchy
    // carries no controllers, and a scope there would not either.
    if (f.layout != "v2") return no("cgroup layout " + f.layout + ": a systemd scope would offer no controllers");
    if (!f.wants_cgroup) return no("no memory, pids, cpus or cpu-time limit to enforce");
  }
  if (f.user_manager.empty()) {
    std::string why = "no systemd user manager answers (" + f.user_manager_probe + ")";
    return flag ? refuse("--systemd-scope: " + why +
                         "; log in through systemd (or loginctl enable-linger), or drop --systemd-scope")
                : no(why);
  }
  if (!f.have_systemd_run) {
    std::string why = "systemd-run is not on PATH";
    return flag ? refuse("--systemd-scope: " + why + " (install systemd, or drop --systemd-scope)") : no(why);
  }
  return {true, false,
          std::string(f.own_cgroup_busy ? "own cgroup holds other processes" : "own cgroup not delegated") +
              "; user manager at " + f.user_manager};
}

}  // namespace sbx
