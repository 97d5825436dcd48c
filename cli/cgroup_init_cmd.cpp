// sbx cgroup-init [--leaf NAME] [--json]: inside a container, once, from its entrypoint: move the
// container's processes out of its cgroup namespace root into a leaf and enable memory/pids/cpu
// there, so that sbx's run cgroups get real limits (runtime/linux/cgroup_ns.hpp says why this is needed
// and why a run never does it by itself).
#include <cstdio>

#include "cli/commands.hpp"
#include "runtime/linux/cgroup_ns.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/text_escape.hpp"

namespace sbx::cli {

void add_cgroup_init_command(CLI::App& app, GlobalOptions&, std::vector<Command>& out) {
  auto* cmd = app.add_subcommand("cgroup-init",
                                 "In a container: move its processes from the cgroup namespace root into a leaf "
                                 "and enable memory/pids/cpu there, so run cgroups get limits (run once, as root)");
  static std::string leaf = "init";
  static bool json = false;
  cmd->add_option("--leaf", leaf, "Name of the leaf cgroup under the namespace root for the container's processes")
      ->default_val("init");
  cmd->add_flag("--json", json, "Print {root, leaf, moved, enabled, already_enabled, nothing_to_do} as JSON");
  out.push_back({cmd,
                 [] {
    auto rep = cgroup_init(detect_cgroup(), leaf);
    if (!rep) {
      if (rep.error().err == EINVAL && rep.error().message.rfind("invalid leaf", 0) == 0)
        return usage_error(rep.error().describe());
      std::string line = "sbx: cgroup-init: " + printable(rep.error().describe()) + "\n";
      std::fwrite(line.data(), 1, line.size(), stderr);
      return 1;
    }
    if (json) {
      nlohmann::json doc = {
          {"root", rep->root},
          {"leaf", rep->leaf},
          {"moved", rep->moved},
          {"enabled", rep->enabled},
          {"already_enabled", rep->already},
          {"nothing_to_do", rep->nothing_to_do.empty() ? nlohmann::json(nullptr) : nlohmann::json(rep->nothing_to_do)}};
      std::string text = dump_json(doc, 2) + "\n";
      std::fwrite(text.data(), 1, text.size(), stdout);
      return 0;
    }
    if (!rep->nothing_to_do.empty()) {
      std::printf("nothing to do: %s\n", printable(rep->nothing_to_do).c_str());
      return 0;
    }
    std::string pids;
    for (pid_t p : rep->moved) pids += (pids.empty() ? "" : " ") + std::to_string(p);
    std::string en, al;
    for (auto& c : rep->enabled) en += (en.empty() ? "+" : " +") + c;
    for (auto& c : rep->already) al += (al.empty() ? "" : " ") + c;
    std::printf("moved %zu process(es) from %s into %s%s%s\n", rep->moved.size(), printable(rep->root).c_str(),
                printable(rep->leaf).c_str(), pids.empty() ? "" : ": ", pids.c_str());
    std::printf("enabled at %s: %s%s%s\n", printable(rep->root).c_str(), en.empty() ? "nothing new" : en.c_str(),
                al.empty() ? "" : "; already enabled: ", al.c_str());
    std::printf("run cgroups go under %s/sbx from now on\n", printable(rep->root).c_str());
    return 0;
                 }});
}

}  // namespace sbx::cli
