// PLACEHOLDER: replaced by the doctor work (sbx doctor [--json]).
#include "cli/commands.hpp"

namespace sbx::cli {
void add_doctor_command(CLI::App& app, GlobalOptions&, std::vector<Command>& out) {
  auto* doctor = app.add_subcommand("doctor", "Check what sbx needs on this host");
  out.push_back({doctor, [] { return usage_error("doctor: not implemented yet"); }});
}
}  // namespace sbx::cli
