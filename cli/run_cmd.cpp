// sbx run [OPTIONS] -- CMD [ARGS...]: parse flags into a RunSpec (defaults < profile < flags),
// then hand it to the runtime. No logic beyond turning text into data.
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "runtime/linux/events.hpp"
#include "runtime/model/caps.hpp"
#include "runtime/model/foreign_flags.hpp"
#include "cli/systemd_scope.hpp"
#include "runtime/base/log.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/progress_line.hpp"
#include "runtime/base/trace_field.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/base/units.hpp"
#include "runtime/egress/egress_policy.hpp"
#include "runtime/image/artifact_export.hpp"
#include "runtime/image/image_store.hpp"
#include "runtime/launch/dry_run.hpp"
#include "runtime/launch/preflight.hpp"
#include "runtime/launch/sandbox.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/launch/workspace.hpp"
#include "runtime/linux/gpu.hpp"
#include "runtime/model/image_defaults.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/record/trace_ledger.hpp"
#include "runtime/record/trace_show.hpp"
#include "runtime/typed/pack_run.hpp"
#include "runtime/typed/replay.hpp"

namespace sbx::cli {

// --secret NAME=@FILE|env:VAR: read now (a bad source is the caller's error, 125, also under
// --dry-run), held in memory only and written by init onto the run's private /run/secrets tmpfs
// (mounts.cpp, write_secrets). Messages name the secret, never the text after '=' (it may be the
// value pasted by mistake). The record names it only through invocation.argv ("NAME=@FILE").
static Status read_run_secrets(const RunFlags& f, RunRequest& req) {
  for (auto& s : f.secrets) {
    auto eq = s.find('=');
    std::string name = s.substr(0, eq);
    bool ok = eq != std::string::npos && !name.empty() && name.size() <= 64 && !(name[0] >= '0' && name[0] <= '9');
    for (char c : name)
      ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
    if (!ok)
      return make_error("usage",
                        "run: --secret: expected NAME=@FILE or NAME=env:VAR, NAME of letters, digits and '_' "
                        "not starting with a digit (at most 64)");
    for (auto& [n, v] : req.secrets.files)
      if (n == name) return make_error("usage", "run: --secret " + name + " given twice");
    if (f.keep_inputs)
      return make_error("usage", "run: --secret " + name +
                                     " with --keep-inputs: secrets are never kept, so the run "
                                     "could not be replayed as it ran");
    auto value = read_secret_source(s.substr(eq + 1));
    if (!value) return make_error("usage", "run: --secret " + name + ": " + value.error().describe());
    req.secrets.files.push_back({name, std::move(*value)});
  }
  return {};
}

std::string tenant_option_check(const std::string& value) {
  auto st = check_tenant_name(value);
  return st ? std::string() : st.error().message;
}

Status apply_image_config(RunSpec& spec, RunFlags& f, const GlobalOptions& g) {
  const std::string ref = f.image ? *f.image : spec.image;
  if (ref == "host") {
    if (f.entrypoint)
      return make_error("usage",
                        "run: --entrypoint replaces an image's Entrypoint: it needs --image (without one, "
                        "give the program as the command)");
    return {};
  }
  ImageStore store(resolve_dirs(g.state_dir).images);
  auto image = store.resolve(ref);
  if (!image) return {};  // the run itself says what is wrong with the reference
  // A digest names a tree, not an import: several names (and origins) may share one, so a run by
  // digest gets no image's defaults, only what the caller says.
  const bool by_digest = ref.starts_with("sha256:");
  const nlohmann::json config = by_digest ? nlohmann::json(nullptr) : image->meta.value("config", nlohmann::json());
  CallerChoices caller{f.command, f.workdir.has_value(), f.uid.has_value(), f.gid.has_value(), f.env_pass};
  caller.uid_value = f.uid.value_or(0);
  // docker's --entrypoint: one program, not split; '' clears the image's.
  if (f.entrypoint)
    caller.entrypoint = f.entrypoint->empty() ? std::vector<std::string>{} : std::vector<std::string>{*f.entrypoint};
  SBX_TRY(apply_image_defaults(spec, config, image->rootfs, caller, ref));
  if (spec.argv.empty() && f.entrypoint)
    return make_error("usage", "run: no command: --entrypoint '' cleared image " + ref +
                                   "'s Entrypoint and Cmd; give the command after --");
  f.command = spec.argv;
  return {};
}

namespace {
Result<std::int64_t> size(const std::string& flag, const std::string& v, bool allow_zero) {
  auto r = parse_size_bytes(v);
  if (!r) return make_error("usage", flag + ": " + r.error().message);
  if (*r == 0 && !allow_zero) return make_error("usage", flag + ": must be greater than zero (or none for no limit)");
  return r;
}

// The limit flags onto the merged limits (limits_table.hpp's apply_limit_flag): a value replaces
// the profile's or manifest's, none clears it.
Status apply_limit_flags(Limits& limits, const RunFlags& f) {
  for (const LimitKind* k : limit_kinds_by(&LimitOrder::flag))
    if (auto* v = limit_flag_text(f, *k); v && *v) SBX_TRY(apply_limit_flag(limits, *k, **v));
  return {};
}
}  // namespace

const std::optional<std::string>* limit_flag_text(const RunFlags& f, const LimitKind& k) {
  // RunFlags' member for each limit flag of limits_table.hpp (CLI11 fills them by name).
  static const std::pair<const char*, std::optional<std::string> RunFlags::*> kMembers[] = {
      {"--timeout", &RunFlags::timeout},
      {"--memory", &RunFlags::memory},
      {"--pids", &RunFlags::pids},
      {"--cpus", &RunFlags::cpus},
      {"--cpu-time", &RunFlags::cpu_time},
      {"--output-limit", &RunFlags::output_limit},
      {"--output-max-bytes", &RunFlags::output_max_bytes},
      {"--output-max-files", &RunFlags::output_max_files}};
  for (auto& [flag, member] : kMembers)
    if (std::string_view(k.flag) == flag) return &(f.*member);
  return nullptr;
}

// Flags override the merged profile; list-valued flags add to the profile's lists.
Result<RunSpec> apply_flags(RunSpec spec, const RunFlags& f) {
  if (f.uid) spec.uid = *f.uid;
  if (f.gid) spec.gid = *f.gid;
  std::vector<BindMount> binds;
  for (auto& b : f.binds) {
    auto r = parse_bind(b);
    if (!r) return make_error("usage", "--bind: " + r.error().message);
    binds.push_back(*r);
  }
  anchor_relative_binds(binds, current_dir());  // --bind . : this directory at the same path
  spec.binds.insert(spec.binds.end(), binds.begin(), binds.end());
  if (f.workspace) SBX_TRY(add_workspace(spec, current_dir(), protected_homes(), f.workdir.has_value()));
  for (auto& t : f.tmpfs) {
    auto r = parse_tmpfs(t);
    if (!r) return make_error("usage", "--tmpfs: " + r.error().message);
    spec.tmpfs.push_back(*r);
  }
  for (auto& e : f.env) {
    auto eq = e.find('=');
    if (eq == std::string::npos || eq == 0) return make_error("usage", "--env: expected NAME=VALUE, got '" + e + "'");
    spec.env[e.substr(0, eq)] = e.substr(eq + 1);
  }
  for (auto& k : f.env_pass) spec.env_pass.push_back(k);
  if (f.workdir) spec.workdir = *f.workdir;
  SBX_TRY(apply_limit_flags(spec.limits, f));
  if (f.image) spec.image = *f.image;
  for (auto& i : f.inputs) {
    auto r = parse_input(i);
    if (!r) return make_error("usage", "--input: " + r.error().message);
    spec.inputs.push_back(*r);
  }
  if (f.output_max_bytes) {
    auto r = size("--output-max-bytes", *f.output_max_bytes, true);
    if (!r) return r.error();
    spec.limits.output_max_bytes = *r;
  }
  if (f.output_max_files) {
    char* end = nullptr;
    long long n = std::strtoll(f.output_max_files->c_str(), &end, 10);
    if (f.output_max_files->empty() || *end != '\0' || n < 0)
      return make_error("usage",
                        "--output-max-files: bad file count '" + *f.output_max_files + "' (a non-negative integer)");
    spec.limits.output_max_files = n;
  }
  SBX_TRY(add_allow_hosts(spec.network, f.allow_hosts));
  if (f.require_limits) spec.require_limits = true;
  if (f.require_record) spec.require_record = true;
  if (!f.events.empty()) {
    if (auto st = check_events_destination(f.events); !st) return st.error();
    spec.events = f.events;
  }
  if (!f.seccomp.empty()) spec.seccomp = f.seccomp;
  if (!f.trace_db.empty()) spec.trace_db = f.trace_db;
  if (f.gpu) {
    if (auto r = parse_gpu_request(*f.gpu); !r) return r.error();
    spec.gpu.devices = *f.gpu == "none" ? "" : *f.gpu;
  }
  if (!f.cap_add.empty()) {
    std::vector<std::string> keep = spec.capabilities.keep;
    for (auto& c : f.cap_add) {
      auto canon = canonical_capability(c);
      if (!canon) return make_error("usage", "--cap-add: " + canon.error().message);
      keep.push_back(*canon);
    }
    spec.capabilities.keep = capability_names(capability_mask(keep));
  }
  spec.argv = f.command;
  SBX_TRY(validate_spec(spec));
  return spec;
}

void add_limit_options(CLI::App* app, RunFlags& f) {
  app->add_option("--profile", f.profile, "Profile name or JSON file (default: untrusted)");
  app->add_option("--tenant", f.tenant,
                  "Run as tenant NAME (SBX_TENANTS_DIR, ~/.config/sbx/tenants or /etc/sbx/tenants/NAME.json): its "
                  "ceilings bind every layer, flags included; its own host ids and store")
      ->check(tenant_option_check, "NAME");
  app->add_option("--image", f.image, "Root file system: host (default) or a stored image, NAME[:TAG] or sha256:<hex>");
  app->add_option("--timeout", f.timeout, "Wall-time limit, e.g. 250ms, 2s, 1m (exit 124 when hit)");
  app->add_option("--output-limit", f.output_limit, "Bytes of stdout and of stderr passed through (rest dropped)");
  app->add_option("--memory", f.memory, "Memory limit, e.g. 256M");
  app->add_option("--pids", f.pids, "Maximum number of processes");
  app->add_option("--cpus", f.cpus, "CPU share, e.g. 0.5");
  app->add_option("--cpu-time", f.cpu_time, "CPU-time budget, e.g. 10s");
  app->add_flag("--require-limits", f.require_limits, "Fail (exit 125) unless every limit can be enforced");
  app->add_flag(
      "--require-record", f.require_record,
      "Fail (exit 125) when the run's trace record cannot be stored durably (always on for pack run and exec)");
  app->add_option("--seccomp", f.seccomp, "Seccomp policy: default, unconfined, or an OCI JSON file");
  app->add_option("--cap-add", f.cap_add,
                  "Keep this capability (CAP_CHOWN or chown) inside the sandbox's user namespace too; repeatable");
  app->add_option(
      "--gpu", f.gpu,
      "Give the sandbox GPUs: all, indices (0 or 0,1) or a UUID; at most the profile's gpu.max (untrusted: 1)");
  app->add_option("--trace-file", f.trace_file, "Also write the trace record to this file");
  app->add_option("--trace-db", f.trace_db, kTraceDbHelp);
  app->add_option("--events", f.events,
                  "Stream live events as JSON lines to FILE, a FIFO or fd:N (never blocks the run; drops are counted)");
}

std::vector<std::string> explicit_limits(const RunFlags& f) {
  // Limits the user asked for by flag get a warning when they cannot be enforced as asked;
  // a profile's defaults only get the trace record (and -v), so runs stay quiet by default.
  std::vector<std::string> v;
  for (const LimitKind* k : limit_kinds_by(&LimitOrder::plan))
    if (auto* t = limit_flag_text(f, *k); k->enforced == LimitEnforcement::plan && t && *t) v.push_back(k->plan_name);
  return v;
}

std::set<std::string> limits_given(const RunFlags& f) {
  std::set<std::string> v;
  for (const LimitKind* k : limit_kinds_by(&LimitOrder::plan))
    if (auto* t = limit_flag_text(f, *k); t && *t) v.insert(k->plan_name);
  if (f.gpu) v.insert("gpu");
  return v;
}

// After a program that failed as one does for a file it cannot find: the hint when the file is
// the caller's, on the host but not in the sandbox (missing_host_path_hint decides).
void print_project_dir_hint(const RunSpec& spec, int status) {
  auto exists = [](const std::string& p) { return ::access(p.c_str(), F_OK) == 0; };
  std::string hint = missing_host_path_hint(spec, status, current_dir(), exists);
  if (!hint.empty()) std::fprintf(stderr, "sbx: hint: %s\n", printable(hint).c_str());
}

int print_dry_run(const RunRequest& req) {
  auto plan = dry_run(req);
  if (!plan) {
    std::fprintf(stderr, "sbx: %s\n", printable(plan.error().describe_setup()).c_str());
    return 125;
  }
  std::printf("%s\n", dump_json(*plan, 2).c_str());  // argv and env may be any bytes (json_io.hpp)
  return 0;
}

void add_run_options(CLI::App* run, RunFlags& f) {
  add_limit_options(run, f);
  run->add_option("--uid", f.uid, "User id inside the sandbox (default 0: root of its own user namespace)");
  run->add_option("--gid", f.gid,
                  "Group id inside the sandbox (default 0; with --image and --uid N, N's group in the image's "
                  "/etc/passwd, else N)");
  run->add_option("--entrypoint", f.entrypoint,
                  "With --image: run CMD instead of the image's Entrypoint and Cmd, the command's words as its "
                  "arguments; '' clears the Entrypoint (the command then runs as given)");
  static const std::string bind_help = [] {
    std::string h = "Bind a host path: SRC[:DST][:OPT[,OPT]] (repeatable); OPT:";
    for (auto& o : kBindOptions) h += std::string(" ") + o.name + " (" + o.help + ")";
    return h;
  }();
  run->add_option("--bind", f.binds, bind_help);
  run->add_option("--tmpfs", f.tmpfs, "Mount a size-capped tmpfs: DST[:SIZE] (repeatable, default size 64M)");
  run->add_option("--workdir", f.workdir, "Working directory inside the sandbox (default /tmp)");
  run->add_flag("--workspace", f.workspace,
                "Bind the current directory read-write at the same path (its .git read-only) and start the "
                "command there; refused for / and the home directory");
  run->add_option(
      "--input", f.inputs,
      "Mount a host file or directory read-only and hash it into the trace: PATH[:DST] (default DST /in/NAME; repeatable)");
  run->add_flag(
      "--keep-inputs", f.keep_inputs,
      "Keep the --input files and the profile's text in the blob store, so that 'sbx replay' can re-run this run");
  run->add_option("--output", f.output_dir,
                  "After the run, export /out (regular files and directories only) to DIR: new or empty");
  run->add_option("--output-max-bytes", f.output_max_bytes,
                  "Most bytes --output exports (default 256M; past it: status output_limit)");
  run->add_option("--output-max-files", f.output_max_files,
                  "Most files and directories --output exports (default 10000)");
  run->add_option("--env", f.env, "Set an environment variable: NAME=VALUE (repeatable)");
  run->add_option("--env-pass", f.env_pass, "Pass a variable from sbx's environment (repeatable)");
  run->add_option("--secret", f.secrets,
                  "Deliver a secret for this run only, as the file /run/secrets/NAME (0400, a private tmpfs): "
                  "NAME=@FILE or NAME=env:VAR (repeatable; the value is never recorded)");
  run->add_option(
      "--allow-host", f.allow_hosts,
      "Allow egress to HOST[:PORT] through sbx's filtering proxy: a name, *.domain, an IP, [IPv6] or a CIDR; "
      "ports 80 and 443 unless given (repeatable)");
  run->add_flag(
      "-i,--interactive", f.interactive,
      "Relay stdin to the program even when it is a terminal (through a pipe; with -t, to the program's pty)");
  run->add_flag(
      "-t,--tty", f.tty,
      "Give the program a pseudo-terminal of its own (stdin must be a terminal; stderr is merged into stdout)");
  run->add_flag(
      "--dry-run", f.dry_run,
      "Make every check of a run and print the merged spec and what would enforce each limit as JSON; run nothing");
  run->add_flag("--systemd-scope", f.systemd_scope,
                "Rootless without a delegated cgroup: re-run sbx under systemd-run --user --scope -p Delegate=yes, "
                "or fail (125) when no user manager answers (the default does it only where it helps)");
  run->add_flag("--no-systemd-scope", f.no_systemd_scope,
                "Never re-run sbx under a systemd user scope (limits may then fall back to rlimits)")
      ->excludes("--systemd-scope");
}

namespace {
// The command's first word when it is an option after all. prefix_command() hands over an
// unknown option that precedes the command: a typo of ours or another tool's habit ("docker's -e
// is --env here"), not a program called "--foo". And `-v SRC:DST` is docker's volume, not sbx's
// verbose flag followed by a program named SRC:DST.
std::optional<int> check_command_start(const std::vector<std::string>& command, const GlobalOptions& g) {
  if (command.empty()) return std::nullopt;
  const std::string& first = command[0];
  if (first.size() > 1 && first[0] == '-') {
    std::string hint = foreign_option_hint(first);
    if (!hint.empty()) return usage_error("run: " + hint + " (see 'sbx run --help')");
    return usage_error("run: unknown option '" + first + "' (see 'sbx run --help'; put the command after --)");
  }
  // The command's words are the last ones before main()'s "--" (or the end): the word before
  // them is the option that stood right before the command.
  std::size_t end = g.argv.size();
  if (g.after_dashdash) end -= g.after_dashdash->size() + 1;
  std::size_t at = end >= command.size() ? end - command.size() : 0;
  if (at > 0 && (g.argv[at - 1] == "-v" || g.argv[at - 1] == "--verbose") && looks_like_volume(first))
    return usage_error("run: " + foreign_option_hint("-v") + " (see 'sbx run --help')");
  return std::nullopt;
}

// The run, then the lines that explain how it ended: what the sandbox refused (otherwise shown
// only with -v), and a project file the sandbox could not see (print_project_dir_hint).
int run_and_report(RunRequest& req, bool as_json) {
  RunReport report = run_sandbox(req);
  if (as_json) {
    RecordPlace place{report.recorded,    ledger_path(req.dirs), report.record_seq,
                      report.record_hash, report.record_error,   req.trace_file};
    std::printf("%s\n", dump_ascii_json(run_summary_json(report.trace, place, report.exit_status), 2).c_str());
    std::fflush(stdout);
  }
  if (std::string line = violations_line(report.trace); !line.empty()) {
    // After the run as during it, a stalled stderr must not hold sbx (log.hpp): dropped, counted.
    NonBlockingLogScope never_blocks;
    spdlog::warn("{}", line);
  }
  int status = report.exit_status;
  if (report.outcome.status == RunStatus::exit_nonzero) print_project_dir_hint(req.spec, status);
  for (auto& [name, value] : req.secrets.files) std::fill(value.begin(), value.end(), '\0');
  return status;
}

// `sbx run`'s flags, filled by CLI11 when the command line is parsed.
RunFlags& run_flags() {
  static RunFlags f;
  return f;
}

// Rootless without a delegated cgroup: sbx re-runs itself in a systemd user scope (systemd_scope.hpp);
// the exit status of that re-run when it happened.
std::optional<int> enter_systemd_scope(const std::vector<std::string>& argv, RunRequest& req) {
  ScopeMode mode = run_flags().systemd_scope      ? ScopeMode::always
                   : run_flags().no_systemd_scope ? ScopeMode::never
                                                  : ScopeMode::automatic;
  std::string reused_unit;
  if (auto rc = maybe_reexec_in_systemd_scope(argv, req.spec, mode, req.scope.systemd_scope, &reused_unit)) return rc;
  req.scope.cgroup_via_scope = scope_origin(&req.scope.scope_unit);
  if (!reused_unit.empty()) {
    req.scope.cgroup_via_scope = "reused";
    req.scope.scope_unit = reused_unit;
  }
  return std::nullopt;
}

// --keep-inputs, before the run: the supervisor's loop never waits on the blob store. A large
// tree takes a while to hash and store: a progress line after the first second (ProgressLine).
Status keep_inputs(RunRequest& req) {
  ProgressLine line("keeping the --input files for 'sbx replay'", stderr, ::isatty(STDERR_FILENO) == 1);
  auto kept = keep_run_inputs(req.dirs, req.spec, req.profile, req.blob_pin,
                              [&line](std::int64_t files, std::int64_t bytes) { line.update("stored", files, bytes); });
  line.finish();
  if (!kept) return kept.error();
  put(req.record_extra, "blobs", std::move(*kept));
  return {};
}
}  // namespace

// The RunRequest of `sbx run`'s flags (run options, see add_run_options): profile, image, flags,
// stdin, tenant, secrets. The exit status of the usage error when they are refused. `sbx session
// start` builds its session's request from the same (cli/session_cmd.cpp).
std::optional<int> build_run_request(RunFlags& f, GlobalOptions& g, RunRequest& req) {
  auto profile = load_profile(f.profile);
  if (!profile) return usage_error(profile.error().describe());
  auto merged = spec_from_layers(*profile, nullptr, "");
  if (!merged) return usage_error(merged.error().message);
  if (auto st = apply_image_config(*merged, f, g); !st) return usage_error(st.error().message);
  auto spec = apply_flags(std::move(*merged), f);
  if (!spec) return usage_error(spec.error().message);
  auto stdin_plan = plan_stdin(f.interactive, f.tty);
  if (!stdin_plan) return usage_error(stdin_plan.error().message);
  req.spec = std::move(*spec);
  req.profile = profile->source;
  req.dirs = resolve_dirs(g.state_dir);
  req.trace_file = f.trace_file;
  if (f.workspace) req.workspace = current_dir();
  req.explicit_limits = explicit_limits(f);
  req.limit_layers = limit_layers(*profile, nullptr, "", limits_given(f));
  req.invocation_argv = g.argv;
  if (f.entrypoint)
    req.image_entrypoint = f.entrypoint->empty() ? std::vector<std::string>{} : std::vector<std::string>{*f.entrypoint};
  req.io.stdin_plan = *stdin_plan;
  if (auto st = apply_named_tenant(f.tenant, req); !st) return usage_error(st.error().message);
  if (auto st = read_run_secrets(f, req); !st) return usage_error(st.error().message);
  return std::nullopt;
}

void add_run_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  RunFlags& f = run_flags();
  auto* run = app.add_subcommand("run", "Run a command in a fresh sandbox");
  add_run_options(run, f);
  // Here, not in add_run_options: sbx probe takes the run options and has a --json of its own.
  run->add_flag("--json", f.as_json,
                "At the end, print one JSON object on stdout (run_id, result, exit_status, wall_ms, violations, "
                "record {seq, ...}); the program's stdout goes to stderr");
  // Everything from the first positional on belongs to the command, options included.
  run->prefix_command();
  // Falling through to the parent would hand the command's own options to sbx's parser; the
  // global options are declared on `run` itself instead.
  run->fallthrough(false);
  add_global_options(*run, g);

  out.push_back({run,
                 [run, &g, &f]() -> int {
                   // With prefix_command, everything from the first positional on is in remaining(); a "--"
                   // that main() cut off came after it, so it is put back where it was.
                   f.command = run->remaining();
                   if (auto rc = check_command_start(f.command, g)) return *rc;
                   if (g.after_dashdash) {
                     if (!f.command.empty()) f.command.push_back("--");
                     f.command.insert(f.command.end(), g.after_dashdash->begin(), g.after_dashdash->end());
                   }
                   RunRequest req;
                   if (auto rc = build_run_request(f, g, req)) return *rc;
                   auto stdin_plan = req.io.stdin_plan;
                   if (auto hint = terminal_unused_hint(req.spec.argv, stdin_plan); !hint.empty() && !f.dry_run)
                     std::fprintf(stderr, "sbx: hint: %s\n", printable(hint).c_str());
                   if (f.dry_run) {
                     if (!f.output_dir.empty())
                       if (auto st = prepare_export_dir(f.output_dir, false); !st)
                         return usage_error(st.error().describe());
                     return print_dry_run(req);
                   }
                   if (auto st = check_trace_file(f.trace_file); !st) return usage_error(st.error().describe());
                   if (auto rc = enter_systemd_scope(g.argv, req)) return *rc;
                   if (!f.output_dir.empty())
                     if (auto st = prepare_export_dir(f.output_dir); !st) return usage_error(st.error().describe());
                   req.export_dir = f.output_dir;
                   if (f.keep_inputs)
                     if (auto st = keep_inputs(req); !st) return usage_error(st.error().describe());
                   // --json: stdout carries the one object and nothing else; the program's stdout goes to
                   // sbx's stderr, as `pack run` does with its result, so a program cannot print an object
                   // of its own where the caller reads sbx's.
                   if (f.as_json) req.io.stdout_fd = STDERR_FILENO;
                   return run_and_report(req, f.as_json);
                 },
                 true});
}

}  // namespace sbx::cli
