// sbx: run untrusted work in a fresh, ephemeral sandbox and leave a record of exactly what ran.
#include <cstdio>
#include <string_view>

#include "cli/commands.hpp"
#include "runtime/log.hpp"

namespace sbx::cli {
void add_global_options(CLI::App& app, GlobalOptions& g) {
  app.add_option("--state-dir", g.state_dir,
                 "Directory for traces and images (default: XDG dirs, /var/lib/sbx as root; env SBX_STATE_DIR)");
  app.add_option("--log-level", g.log_level, "Log level: trace, debug, info, warn, error, off (default warn)");
  app.add_flag("-v,--verbose", g.verbose, "More log output (repeat for debug)");
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "sbx: %s\n", message.c_str());
  return 125;
}
}  // namespace sbx::cli

int main(int argc, char** argv) {
  using namespace sbx::cli;
  CLI::App app{"sbx: run untrusted code in a fresh, ephemeral Linux sandbox and record what ran", "sbx"};
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version", std::string("sbx ") + SBX_VERSION);
  GlobalOptions g;
  g.argv.assign(argv, argv + argc);
  add_global_options(app, g);

  std::vector<Command> commands;
  add_run_command(app, g, commands);
  add_profile_command(app, g, commands);
  add_trace_command(app, g, commands);
  add_doctor_command(app, g, commands);
  add_pack_command(app, g, commands);
  add_exec_command(app, g, commands);
  add_image_command(app, g, commands);

  int parse_argc = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      g.after_dashdash.emplace(argv + i + 1, argv + argc);
      parse_argc = i;
      break;
    }
  }
  try {
    app.parse(parse_argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Never CLI11's own 100-114 codes: every usage error is 125 with one line.
    std::string msg = e.what();
    if (msg.empty()) msg = e.get_name();
    return usage_error(msg + " (see 'sbx --help')");
  }
  if (auto st = sbx::init_logging(g.log_level, g.verbose); !st) return usage_error(st.error().message);
  for (auto& c : commands)
    if (c.app->parsed()) return c.run();
  return usage_error("no command given (see 'sbx --help')");
}
