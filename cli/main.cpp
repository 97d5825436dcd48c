// sbx: run untrusted work in a fresh, ephemeral sandbox and leave a record of exactly what ran.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "runtime/session/session_agent.hpp"
#include "runtime/base/log.hpp"
#include "runtime/base/proc_title.hpp"
#include "runtime/base/suggest.hpp"
#include "runtime/model/foreign_flags.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/base/signals.hpp"
#include "runtime/launch/template_pid1.hpp"
#include "runtime/linux/limits_plan.hpp"

namespace sbx::cli {
void add_global_options(CLI::App& app, GlobalOptions& g) {
  app.add_option("--state-dir", g.state_dir,
                 "Directory for traces and images (default: XDG dirs, /var/lib/sbx as root; env SBX_STATE_DIR)");
  app.add_option("--log-level", g.log_level, "Log level: trace, debug, info, warn, error, off (default warn)");
  app.add_flag("-v,--verbose", g.verbose, "More log output (repeat for debug)");
}

// The first word after the subcommands `path` (in order), skipping global options and their
// values: the word CLI11 did not take as a subcommand. With an empty path, the subcommand's name
// when the command line is well formed ("" if there is none).
std::string word_after(int argc, char** argv, const std::vector<std::string>& path) {
  std::size_t matched = 0;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") break;
    if (a == "--state-dir" || a == "--log-level") {
      ++i;
      continue;
    }
    if (!a.empty() && a[0] == '-') continue;
    if (matched < path.size() && a == path[matched]) {
      ++matched;
      continue;
    }
    if (matched == path.size()) return std::string(a);
  }
  return {};
}

// The first option on the command line that neither `cur` nor the top level knows but docker,
// podman or bwrap does, as the line that maps it to sbx's form ("" when there is none).
static std::string foreign_option_hint_of(CLI::App& app, CLI::App& cur, int argc, char** argv) {
  for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i) {
    std::string_view a = argv[i];
    std::string name(a.substr(0, a.find('=')));
    if (a.size() > 1 && a[0] == '-' && !cur.get_option_no_throw(name) && !app.get_option_no_throw(name))
      if (std::string hint = sbx::foreign_option_hint(a); !hint.empty()) return hint;
  }
  return {};
}

// A parse error as one line that names the subcommand whose help to read: "sbx pack rn" is an
// unknown command of `sbx pack` (with the closest one), "sbx run --timeout" a missing value of
// `sbx run`. The chain is the subcommands CLI11 had parsed when it gave up.
std::string parse_error_text(CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  std::string chain = "sbx";
  std::vector<std::string> words;
  CLI::App* cur = &app;
  for (auto subs = cur->get_subcommands(); !subs.empty(); subs = cur->get_subcommands()) {
    cur = subs.front();
    words.push_back(cur->get_name());
    chain += " " + cur->get_name();
  }
  std::string see = "see '" + chain + " --help'";
  if (cur->get_require_subcommand_min() > 0 && cur->get_subcommands().empty()) {
    std::vector<std::string> names;
    for (auto* sub : cur->get_subcommands(std::function<bool(CLI::App*)>{})) names.push_back(sub->get_name());
    std::string word = word_after(argc, argv, words);
    if (word.empty()) {
      // No command word: an option CLI11 did not know stood where the command should be.
      for (int i = 1; i < argc; ++i)
        if (std::string_view a = argv[i]; a == "--") break;
        else if (a.size() > 1 && a[0] == '-' && !cur->get_option_no_throw(std::string(a.substr(0, a.find('=')))) &&
                 !app.get_option_no_throw(std::string(a.substr(0, a.find('=')))))
          return "unknown option '" + std::string(a) + "'; " + see;
      return (words.empty() ? std::string("a command is required") : "'" + chain + "' needs a command") + "; " + see;
    }
    return "unknown command '" + word + "'" + sbx::did_you_mean(word, names) + "; " + see;
  }
  // Only where sbx's forms it names exist: the commands that take run options (run, probe).
  if (std::string hint = cur->get_option_no_throw("--bind") ? foreign_option_hint_of(app, *cur, argc, argv) : "";
      !hint.empty())
    return (words.empty() ? "" : chain.substr(4) + ": ") + hint + " (" + see + ")";
  std::string msg = e.what();
  if (msg.empty()) msg = e.get_name();
  // CLI11's "--timeout: 1 required TEXT missing": an option given without its value.
  if (auto at = msg.find(": 1 required "); at != std::string::npos && msg.ends_with(" missing"))
    msg = msg.substr(0, at) + " needs a value";
  return (words.empty() ? "" : chain.substr(4) + ": ") + msg + " (" + see + ")";
}

namespace {
// Every option takes one value per occurrence (`--bind A --bind B`, never `--bind A B`): CLI11's
// default for a list lets `sbx run --bind ./d:/d ls /d` take `ls` and `/d` as more binds and
// leave no command. Positionals (a command's words, `trace show ID...`) keep their lists.
void one_value_per_occurrence(CLI::App& app) {
  for (CLI::Option* opt : app.get_options())
    if (opt->nonpositional() && opt->get_allow_extra_args()) opt->allow_extra_args(false);
  for (CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>{})) one_value_per_occurrence(*sub);
}

// CLI11's usage line, plus the command words of a subcommand that takes a program's command
// (prefix_command: `run`): "Usage: sbx run [OPTIONS] [--] CMD [ARGS...]".
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string usage = CLI::Formatter::make_usage(app, std::move(name));
    if (app->get_prefix_command() && !usage.empty() && usage.back() == '\n')
      usage.insert(usage.size() - 1, " [--] CMD [ARGS...]");
    return usage;
  }
};

}  // namespace

int usage_error(const std::string& message) {
  std::fprintf(stderr, "sbx: %s\n", printable(message).c_str());
  return 125;
}
}  // namespace sbx::cli

namespace {
// A static executable calls .preinit_array before any static constructor (C++ globals of the
// libraries linked in, stdio, CLI11, spdlog): blocking the forwarded signals there leaves only
// the kernel's exec and the C library's own start-up as the window in which a signal ends sbx
// without a record. main() does it again (once is enough: the second call keeps the first's
// saved mask), for a build where this entry would not run.
void block_signals_before_constructors(int, char**, char**) { sbx::block_forwarded_signals_at_start(); }
[[gnu::section(".preinit_array"),
  gnu::used]] void (*const kBlockSignalsEarly)(int, char**, char**) = block_signals_before_constructors;
}  // namespace

// "sbx pack run", "sbx run -- CMD ARGS...": the parsed command words, never an option or its value.
static std::string process_title(const CLI::App& app, const sbx::cli::GlobalOptions& g) {
  std::string title = "sbx";
  for (const CLI::App* a = &app; a != nullptr;) {
    auto subs = a->get_subcommands();
    a = subs.empty() ? nullptr : subs.front();
    if (a) title += " " + a->get_name();
  }
  if (g.after_dashdash) {
    title += " --";
    for (auto& w : *g.after_dashdash) title += " " + w;
  }
  return title;
}

// The commands main() may run: only the subcommand named on the command line is built (all of
// them when none is, for `sbx --help` and for the error on an unknown one): CLI11 builds every
// option with its validators and std::functions on the heap, and start-up is part of every run's
// cost.
static std::vector<sbx::cli::Command> add_commands(CLI::App& app, sbx::cli::GlobalOptions& g, int argc, char** argv) {
  using namespace sbx::cli;
  using Adder = void (*)(CLI::App&, GlobalOptions&, std::vector<Command>&);
  static constexpr std::pair<std::string_view, Adder> kCommands[] = {{"run", add_run_command},
                                                                     {"profile", add_profile_command},
                                                                     {"trace", add_trace_command},
                                                                     {"doctor", add_doctor_command},
                                                                     {"pack", add_pack_command},
                                                                     {"exec", add_exec_command},
                                                                     {"image", add_image_command},
                                                                     {"key", add_key_command},
                                                                     {"classify", add_classify_command},
                                                                     {"probe", add_probe_command},
                                                                     {"mcp", add_mcp_command},
                                                                     {"mcp-worker", add_mcp_worker_command},
                                                                     {"mcp-fork-server", add_mcp_fork_server_command},
                                                                     {"cgroup-init", add_cgroup_init_command},
                                                                     {"replay", add_replay_command},
                                                                     {"gc", add_gc_command},
                                                                     {"session", add_session_command},
                                                                     {"kernel", add_kernel_command},
                                                                     {"scope-keeper", add_scope_keeper_command}};
  std::vector<sbx::cli::Command> commands;
  const std::string named = word_after(argc, argv, {});
  bool known = false;
  for (auto& [name, add] : kCommands)
    if (name == named) {
      add(app, g, commands);
      known = true;
    }
  if (!known)
    for (auto& [name, add] : kCommands) add(app, g, commands);

  return commands;
}

// `sbx help [COMMAND...]` is `sbx [COMMAND...] --help` and `sbx version` is `sbx --version`: the
// words git and podman users type first. argv as main() then reads it (null-terminated).
static std::vector<char*> help_words_as_flags(int argc, char** argv, bool& help_word) {
  static char help[] = "--help", version[] = "--version";
  std::vector<char*> args(argv, argv + argc);
  help_word = argc >= 2 && std::string_view(argv[1]) == "help";
  if (help_word) {
    args.erase(args.begin() + 1);
    args.push_back(help);
  } else if (argc == 2 && std::string_view(argv[1]) == "version") {
    args[1] = version;
  }
  args.push_back(nullptr);
  return args;
}

// `sbx help WORD` where WORD is no command: the error `sbx WORD` gets, not the overview (CLI11
// would answer --help before it looks at the word).
static std::optional<int> check_help_topic(CLI::App& app, int argc, char** argv) {
  std::string word = sbx::cli::word_after(argc, argv, {});
  if (word.empty()) return std::nullopt;
  std::vector<std::string> names;
  for (auto* sub : app.get_subcommands(std::function<bool(CLI::App*)>{})) names.push_back(sub->get_name());
  if (std::find(names.begin(), names.end(), word) != names.end()) return std::nullopt;
  return sbx::cli::usage_error("unknown command '" + word + "'" + sbx::did_you_mean(word, names) +
                               "; see 'sbx --help'");
}

// The words before the first "--" parsed by CLI11 (those after it are g.after_dashdash). The exit
// status when main() must end here (help, version, a usage error), else nullopt.
static std::optional<int> parse_command_line(CLI::App& app, sbx::cli::GlobalOptions& g, int argc, char** argv) {
  using namespace sbx::cli;
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
  } catch (const CLI::CallForHelp& e) { return app.exit(e); } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) { return app.exit(e); } catch (const CLI::ParseError& e) {
    // Never CLI11's own 100-114 codes: every usage error is 125 with one line.
    return usage_error(parse_error_text(app, e, argc, argv));
  }
  return std::nullopt;
}

int sbx::cli::sbx_main(int argc, char** argv) {
  // Pid 1 of a template's call forked ahead of it (runtime/launch/template_pid1.hpp), exec'd by
  // the template's driver: before anything else, since its fds and signal mask are set already.
  if (argc >= 2 && std::string_view(argv[1]) == sbx::kTemplatePid1Command) sbx::template_pid1_main(argc, argv);
  // fds 0, 1 and 2 open before anything else: a caller that closed one would otherwise hand its
  // number to the first file sbx opens (a pipe to init, the seccomp listener's socket), and the
  // program's stdio, placed on 0-2 in init's shared fd table (child.cpp), would replace it.
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF && ::open("/dev/null", O_RDWR) != fd) return 125;
  // The agent inside a session's sandbox (runtime/session/session_agent.hpp): no CLI, and none
  // of the supervisor's signal handling, which its commands would inherit.
  if (argc == 2 && std::string_view(argv[1]) == "session-agent") return sbx::session_agent_main();
  // First of all: a SIGINT/SIGTERM/SIGHUP/SIGQUIT from here on waits for the supervisor to
  // forward it, or for the run to record it, instead of ending sbx with no record
  // (runtime/base/signals.hpp). Commands that run no sandbox get the caller's mask back below.
  sbx::block_forwarded_signals_at_start();
  // Before any user namespace is made: every sandbox of this host user together then holds at
  // most half of each kernel quota that namespaces do not separate (limits_plan.hpp).
  if (auto st = sbx::hold_kernel_quotas(); !st) {
    std::fprintf(stderr, "sbx: %s\n", st.error().describe().c_str());
    return 125;
  }
  using namespace sbx::cli;
  bool help_word = false;
  std::vector<char*> args = help_words_as_flags(argc, argv, help_word);
  argc = static_cast<int>(args.size()) - 1;
  argv = args.data();
  if (argc == 2 && std::string_view(argv[1]) == "--version") {
    // Answered before CLI11 is built: its CallForVersion is an exception, and a static binary's
    // first throw sorts every FDE of .eh_frame (dozens of page faults).
    std::printf("sbx %s\n", SBX_VERSION);
    return 0;
  }
  CLI::App app{"sbx: run untrusted code in a fresh, ephemeral Linux sandbox and record what ran", "sbx"};
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version", std::string("sbx ") + SBX_VERSION);
  app.formatter(std::make_shared<Formatter>());  // before the subcommands: they copy it
  app.footer(
      "'sbx help COMMAND' (or 'sbx COMMAND --help'): a command's options; 'sbx version'; "
      "man sbx-COMMAND (sbx-run, sbx-mcp, ...); man sbx: exit statuses, files, limits, security");
  GlobalOptions g;
  g.argv.assign(argv, argv + argc);
  add_global_options(app, g);

  std::vector<Command> commands = add_commands(app, g, argc, argv);
  // Each command's page (man/sbx-COMMAND.1), named where its options are printed.
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    sub->footer("man sbx-" + sub->get_name() + " (options and examples); man sbx (exit statuses, files)");
  one_value_per_occurrence(app);
  if (help_word)
    if (auto rc = check_help_topic(app, argc, argv)) return *rc;

  if (auto rc = parse_command_line(app, g, argc, argv)) return *rc;
  if (auto st = sbx::init_logging(g.log_level, g.verbose); !st) return usage_error(st.error().message);
  // argv is copied (g.argv, CLI11's results): from here on, what /proc shows is only the command
  // words and the program's argv (runtime/base/proc_title.hpp).
  sbx::set_proc_title(argc, argv, process_title(app, g));
  for (auto& c : commands)
    if (c.app->parsed()) {
      if (!c.supervises) sbx::restore_caller_signal_mask();
      int rc = c.run();
      // Everything is written and closed; what is left is freeing memory the kernel is about to
      // take back anyway. Skipping the destructors skips their work and the page faults it would
      // cost (free() writes into heap pages; a fault is ~15 us on the VMs this runs on).
      spdlog::shutdown();
      std::fflush(nullptr);
      ::_exit(rc);
    }
  return usage_error("no command given (see 'sbx --help')");
}

int main(int argc, char** argv) { return sbx::cli::sbx_main(argc, argv); }
