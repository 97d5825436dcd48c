// sbx replay RUN: rebuild a recorded run from its record and the blob store, run it again and
// compare (runtime/typed/replay.hpp). Exit 0 identical, 1 different, 125 cannot replay.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/typed/replay.hpp"

namespace sbx::cli {

void add_replay_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  static std::string run;
  static bool as_json = false;
  static std::optional<std::string> tenant;  // --tenant '' is a bad name, not "none"
  auto* rp = app.add_subcommand("replay", "Re-run a recorded run from its record and kept inputs; compare its outputs");
  rp->add_option("run", run, "Run id, a unique prefix of one, 'last' or -N")->required();
  rp->add_flag("--json", as_json, "Print the comparison as one JSON object");
  rp->add_option("--tenant", tenant,
                 "A run of tenant NAME: read from its store, replayed under its ceilings and ids again")
      ->check(tenant_option_check, "NAME");
  out.push_back(
      {rp,
       [&g]() -> int {
         ReplayRequest req;
         req.dirs = resolve_dirs(g.state_dir);
         std::optional<Tenant> t;
         if (tenant) {
           auto loaded = load_tenant(*tenant);
           if (!loaded) return usage_error("replay: " + loaded.error().message);
           if (auto st = check_tenant_store(*loaded, req.dirs); !st)
             return usage_error("replay: " + st.error().message);
           t = std::move(*loaded);
           req.base_dirs = req.dirs;
           req.dirs = tenant_store(*t, req.dirs);
           req.tenant = &*t;
         }
         req.run = run;
         req.invocation_argv = g.argv;
         auto rep = replay_run(req);
         if (!rep) {
           std::fprintf(stderr, "sbx: replay: cannot replay: %s\n", printable(rep.error().describe()).c_str());
           return 125;
         }
         if (!rep->followed_replay.empty())
           std::fprintf(stderr, "sbx: replay: run %s is itself a replay: replaying the run it re-ran, %s\n",
                        printable(rep->followed_replay).c_str(), printable(rep->original_run).c_str());
         if (as_json) {
           nlohmann::json diffs = nlohmann::json::array();
           for (auto& d : rep->differences)
             diffs.push_back({{"what", d.what}, {"where", d.where}, {"original", d.original}, {"replay", d.replay}});
           nlohmann::json j = {
               {"identical", rep->identical()},
               {"original",
                {{"run_id", rep->original_run}, {"seq", rep->original_seq}, {"record_hash", rep->original_hash}}},
               {"replay", {{"run_id", rep->replay_run}, {"exit_status", rep->replay_exit}}},
               {"differences", diffs},
               {"differences_omitted", rep->differences_omitted}};
           // ASCII: the differences quote the record and the replay's output (file names, values).
           std::printf("%s\n", dump_json(j, 2, {}, true).c_str());
         } else if (rep->identical()) {
           std::printf("identical\n");
         } else {
           std::printf("different: %zu difference(s)\n", rep->differences.size() + rep->differences_omitted);
           for (auto& d : rep->differences) std::printf("  %s\n", describe_difference(d).c_str());
           if (rep->differences_omitted) std::printf("  ... and %zu more (not listed)\n", rep->differences_omitted);
         }
         std::fprintf(stderr, "sbx: replay: run %s (seq %llu, record %s) replayed as run %s\n",
                      printable(rep->original_run).c_str(), static_cast<unsigned long long>(rep->original_seq),
                      printable(rep->original_hash).c_str(), printable(rep->replay_run).c_str());
         return rep->identical() ? 0 : 1;
       },
       true});
}

}  // namespace sbx::cli
