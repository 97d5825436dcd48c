// sbx scope-keeper --idle N (hidden): the process that keeps the long-lived delegated scope
// sbx-runs-<uid>.scope alive for rootless runs to join (runtime/linux/scope_reuse.hpp); `sbx run`
// starts it with systemd-run when the scope is missing. Not for people to run by hand: outside
// that scope it refuses (125).
#include "cli/commands.hpp"
#include "runtime/linux/scope_reuse.hpp"

namespace sbx::cli {

void add_scope_keeper_command(CLI::App& app, GlobalOptions&, std::vector<Command>& out) {
  auto* cmd = app.add_subcommand("scope-keeper", "")->group("");
  static std::string idle = std::to_string(kDefaultKeeperIdle);
  cmd->add_option("--idle", idle, "Exit after this many seconds without a run in the scope");
  out.push_back({cmd, [] {
                   auto s = parse_keeper_idle(idle, "scope-keeper --idle");
                   if (!s) return usage_error(s.error().message);
                   return run_scope_keeper(*s);
                 }});
}

}  // namespace sbx::cli
