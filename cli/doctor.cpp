// sbx doctor [--json]: what sbx needs on this host, what is missing, and how to fix it.
// Exit 0 when sbx can run here (every required check ok), 1 otherwise. The probes live in
// runtime/hostcheck; this file only prints.
#include <cstdio>

#include "cli/commands.hpp"
#include "runtime/hostcheck.hpp"
#include "runtime/json_io.hpp"

namespace sbx::cli {

void add_doctor_command(CLI::App& app, GlobalOptions&, std::vector<Command>& out) {
  auto* doctor = app.add_subcommand("doctor", "Check what sbx needs on this host, with a fix for each missing piece");
  static bool json = false;
  doctor->add_flag("--json", json, "Print a JSON object {ok, checks: [{name, status, required, detail, hint}]}");
  out.push_back({doctor, [] {
    auto checks = run_host_checks();
    nlohmann::json doc = json ? checks_to_json(checks) : nlohmann::json();
    // Host paths and messages may be any bytes: dump_json escapes them (json_io.hpp).
    std::string text = json ? dump_json(doc, 2) + "\n" : render_table(checks);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return host_can_run(checks) ? 0 : 1;
  }});
}

}  // namespace sbx::cli
