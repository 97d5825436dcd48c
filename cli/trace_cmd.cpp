// PLACEHOLDER: replaced by the trace-store work (sbx trace ls | show RUN_ID).
#include "cli/commands.hpp"

namespace sbx::cli {
void add_trace_command(CLI::App& app, GlobalOptions&, std::vector<Command>& out) {
  auto* trace = app.add_subcommand("trace", "List and show trace records of past runs");
  out.push_back({trace, [] { return usage_error("trace: not implemented yet"); }});
}
}  // namespace sbx::cli
