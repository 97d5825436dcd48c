#pragma once
// Each subcommand lives in its own file under cli/ and registers itself here: parsing and printing
// only, the work is done by runtime/. A command's run function returns the process exit status.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/model/profile.hpp"
#include "runtime/launch/sandbox.hpp"
#include "runtime/model/limits_table.hpp"
#include "runtime/model/spec.hpp"
#include "runtime/linux/hostcheck.hpp"
#include "runtime/record/trace_summary.hpp"

namespace sbx::cli {

struct GlobalOptions {
  std::string state_dir;          // --state-dir (else SBX_STATE_DIR, else XDG / root defaults)
  std::string log_level;          // --log-level
  int verbose = 0;                // -v, repeatable
  std::vector<std::string> argv;  // sbx's own argv, recorded in the trace
  // Everything after the first "--", kept away from CLI11 (which would treat it as positionals
  // of the top-level app); `run` takes it as the command.
  std::optional<std::vector<std::string>> after_dashdash;
};

// What `sbx ARGV...` runs (cli/main.cpp): main() itself, and each worker that `sbx
// mcp-fork-server` forks runs it on the worker's argv (runtime/server/fork_server.hpp).
int sbx_main(int argc, char** argv);

struct Command {
  CLI::App* app;
  std::function<int()> run;
  // Runs a sandbox (run, exec, pack run): the forwarded signals stay blocked from main()'s first
  // line on, so that a signal at any moment is forwarded or recorded (runtime/base/signals.hpp).
  // Every other command gets the caller's signal mask back before it runs.
  bool supervises = false;
};

// The flags of `sbx run` that turn into a RunSpec; `sbx pack run` shares the limit ones.
struct RunFlags {
  std::string profile = kDefaultProfile;
  // --tenant NAME (runtime/launch/tenant.hpp): a ceiling over every other layer. Optional, not
  // empty-means-unset: `--tenant ''` is a bad name, never "no tenant".
  std::optional<std::string> tenant;
  std::optional<std::uint32_t> uid, gid;
  std::vector<std::string> binds, tmpfs, env, env_pass, allow_hosts;
  std::vector<std::string> cap_add;  // --cap-add NAME: capabilities kept beyond the profile's
  // Optional, not empty-means-unset: `--timeout ''` is a bad duration, not "no timeout".
  std::optional<std::string> workdir, timeout, output_limit, memory, pids, cpus, cpu_time;
  std::optional<std::string> image, output_max_bytes, output_max_files;
  std::optional<std::string> entrypoint;  // run --entrypoint CMD ('' clears the image's)
  std::vector<std::string> inputs;
  // run --secret NAME=@FILE|env:VAR: /run/secrets/NAME for this run only (runtime/linux/mounts.hpp).
  std::vector<std::string> secrets;
  std::string output_dir;  // run --output DIR
  std::string trace_file;
  std::string events;    // --events FILE|fd:N (runtime/linux/events.hpp)
  std::string trace_db;  // --trace-db URL: replaces the profile's trace_db (runtime/record/trace_mirror.hpp)
  std::string seccomp;
  std::optional<std::string> gpu;  // --gpu all|N[,N]|UUID (gpu.hpp)
  bool dry_run = false;
  bool interactive = false;       // run -i: relay stdin through a pipe even from a terminal
  bool tty = false;               // run -t: a pty of the sandbox's own (stdin_relay.hpp)
  bool systemd_scope = false;     // run: re-exec under a delegated systemd scope, or fail (125)
  bool no_systemd_scope = false;  // run: never re-exec (the default does where it helps)
  bool require_limits = false;
  bool require_record = false;
  bool workspace = false;    // run --workspace: the current directory read-write, cwd there (workspace.hpp)
  bool as_json = false;      // run --json: the program's stdout to stderr, one object on stdout
  bool keep_inputs = false;  // run --keep-inputs: --input files and the profile into the blob store
  std::vector<std::string> command;
};

// Flags override the merged spec (the last layer of profile.hpp's merge order); list flags add to its lists.
// spec.argv becomes f.command.
Result<RunSpec> apply_flags(RunSpec spec, const RunFlags& f);
// --profile, --image, --timeout, --output-limit, --memory, --pids, --cpus, --cpu-time,
// --require-limits, --seccomp, --trace-file.
void add_limit_options(CLI::App* app, RunFlags& f);
// Every option of `sbx run` (add_limit_options and the rest); `sbx probe` takes the same.
void add_run_options(CLI::App* app, RunFlags& f);
// The text of a limit's flag (limits_table.hpp) as given, unset when not; nullptr for a limit
// without a flag.
const std::optional<std::string>* limit_flag_text(const RunFlags& f, const sbx::LimitKind& k);
// The limits given by flag (warned about when they cannot be enforced as asked).
std::vector<std::string> explicit_limits(const RunFlags& f);
// The same, as a set (limits_plan.hpp's names: "memory", ..., "timeout", "output"), for
// limit_layers (profile.hpp).
std::set<std::string> limits_given(const RunFlags& f);
// --dry-run: the checks and plan of dry_run.hpp's dry_run, printed as JSON (0), or its error as
// one line (125).
int print_dry_run(const sbx::RunRequest& req);

void add_pack_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_exec_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_run_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_profile_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_trace_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_doctor_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_image_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_key_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_probe_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_classify_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_mcp_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_mcp_worker_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_mcp_fork_server_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_cgroup_init_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_scope_keeper_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_replay_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_gc_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_session_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);
void add_kernel_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out);  // session_cmd.cpp

// The RunRequest of `sbx run`'s options (add_run_options) as `f` holds them: the profile, image,
// flags, stdin, tenant and secrets. The exit status of the usage error when they are refused.
std::optional<int> build_run_request(RunFlags& f, GlobalOptions& g, sbx::RunRequest& req);

// A subcommand of `trace` kept in its own file: its app and what runs it when it was parsed.
struct TraceSubcommand {
  CLI::App* app;
  std::function<int()> run;
};
// `store` is the trace store to read: the caller's, or a tenant's (--tenant, set by `trace`).
TraceSubcommand add_trace_export_command(CLI::App* trace, std::function<Dirs()> store);  // trace_export_cmd.cpp

// The trace database's side of `trace` (trace_db_cmd.cpp): --db, --node and their flags on ls,
// show and verify, and `trace ship`. `tenant` picks the schema (trace_mirror.hpp).
struct TraceDbOptions {
  std::string db, node;
  bool limit_events = false, against_ledger = false;
};
struct TraceDbCommands {
  std::shared_ptr<TraceDbOptions> opts;
  CLI::App* ship = nullptr;
  std::function<int(const GlobalOptions&, const std::string& tenant, const Dirs& store)> run_ship;
};
TraceDbCommands add_trace_db_commands(CLI::App* trace, CLI::App* ls, CLI::App* show, CLI::App* verify);
// One run of `trace ls --json` (and, with node and seq, of `trace ls --db --json`).
nlohmann::json ls_row_json(const TraceSummary& t);
int trace_ls_db(const TraceDbOptions& o, const std::string& tenant, const TraceFilter& f, bool as_json);
int trace_show_db(const TraceDbOptions& o, const std::string& tenant, const std::string& id, bool text,
                  const std::function<std::string(const nlohmann::json&)>& pretty);
int trace_verify_db(const TraceDbOptions& o, const std::string& tenant, const std::string& pubkey, bool as_json,
                    const std::function<Dirs()>& store);

// --trace-db's help, one wording for run, pack run, exec and mcp.
inline constexpr const char* kTraceDbHelp =
    "Mirror the run's trace record to this PostgreSQL database after it is stored (a libpq URL without a password: "
    "PGPASSWORD or a password file); replaces the profile's trace_db";

// The check every --tenant option carries: an empty value is an error, never "no tenant".
std::string tenant_option_check(const std::string& value);

// --state-dir, --log-level, -v: on the top level and on subcommands that do not fall through.
void add_global_options(CLI::App& app, GlobalOptions& g);

// One line on stderr, "sbx: <message>", and the usage-error exit status (125).
int usage_error(const std::string& message);

// sbx itself run with `args` (probe_cmd.cpp): its exit status and output (bounded), killed after `limit`.
struct Captured {
  int status = -1;  // exit status of the re-run sbx
  std::string out, err;
};
// `env_extra` is set in the child only; `pass_own_pid` replaces an "@HOSTPID@" word with the child's pid.
Captured run_self(const std::vector<std::string>& args,
                  const std::vector<std::pair<std::string, std::string>>& env_extra, std::chrono::seconds limit,
                  bool pass_own_pid);

// A throwaway `sbx run [--profile P] -- /bin/true` (doctor_cmd.cpp) in `state_dir`, or ("") in a
// private one removed after: the doctor's "sandbox" row, and `sbx mcp --listen`'s readiness check.
CheckResult throwaway_sandbox_check(const std::string& profile, const std::string& state_dir);

}  // namespace sbx::cli
