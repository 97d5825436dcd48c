#pragma once
// Each subcommand lives in its own file under cli/ and registers itself here: parsing and printing
// only, the work is done by runtime/. A command's run function returns the process exit status.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace sbx::cli {

struct GlobalOptions {
  std::string state_dir;  // --state-dir (else SBX_STATE_DIR, else XDG / root defaults)
  std::string log_level;  // --log-level
  int verbose = 0;        // -v, repeatable
  std::vector<std::string> argv;  // sbx's own argv, recorded in the trace
  // Everything after the first "--", kept away from CLI11 (which would treat it as positionals
  // of the top-level app); `run` takes it as the command.
  std::optional<std::vector<std::string>> after_dashdash;
};

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

void add_run_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_profile_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_trace_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_doctor_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);

// --state-dir, --log-level, -v: on the top level and on subcommands that do not fall through.
void add_global_options(CLI::App& app, GlobalOptions& g);

// One line on stderr, "sbx: <message>", and the usage-error exit status (125).
int usage_error(const std::string& message);

}  // namespace sbx::cli
