// sbx session start|exec|ls|show|stop: parsing and printing; the session itself is
// runtime/session/ (session_server.hpp: its server, runner and agent).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/signals.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/base/units.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/session/kernel_relay.hpp"
#include "runtime/session/session_agent.hpp"
#include "runtime/session/session_client.hpp"
#include "runtime/session/session_launch.hpp"
#include "runtime/session/session_store.hpp"
#include "runtime/session/session_wire.hpp"

namespace sbx::cli {
namespace {
using json = nlohmann::json;

struct SessionFlags {
  std::optional<std::string> tenant;
  std::string idle = "10m", max = "1h";
  bool json_out = false, all = false;
  std::string id;
  std::optional<std::string> language, code, timeout, output_limit;
};

Result<Dirs> store(const GlobalOptions& g, const std::optional<std::string>& tenant) {
  Dirs d = resolve_dirs(g.state_dir);
  if (!tenant) {
    SBX_TRY(check_session_store(d));
    return d;
  }
  auto t = load_tenant(*tenant);
  if (!t) return t.error();
  // A tenant that never ran has no store yet, and so no session: find_session says so.
  if (Dirs own = tenant_store(*t, d); ::access(own.state.c_str(), F_OK) != 0) return own;
  auto own = tenant_store_of(*tenant, d);
  if (own) SBX_TRY(check_session_store(*own));
  return own;
}

// --- start: the run request of the run options, the session started from it (session_launch.hpp)
Result<PreparedSession> prepare(RunFlags& f, GlobalOptions& g, SessionFlags& sf, const std::string& what,
                                const std::string& kernel, int& rc) {
  rc = 125;
  auto refuse = [&rc](const std::string& msg) -> Error {
    rc = usage_error(msg);
    return make_error("usage", msg);
  };
  const std::string calls = kernel.empty() ? "run commands with 'sbx session exec ID -- CMD'"
                                           : "a kernel's cells come from its Jupyter client";
  if (f.interactive || f.tty) return refuse(what + ": -i and -t are 'sbx run''s; " + calls);
  if (f.dry_run) return refuse(what + ": --dry-run is not supported; try 'sbx run --dry-run' with the same options");
  // sbx run's options that have no meaning for a session (its calls start in /workspace, its
  // end exports nothing yet): refused rather than ignored.
  for (auto [given, flag] :
       {std::pair{!f.output_dir.empty(), "--output"}, std::pair{f.output_max_bytes.has_value(), "--output-max-bytes"},
        std::pair{f.output_max_files.has_value(), "--output-max-files"}, std::pair{f.keep_inputs, "--keep-inputs"},
        std::pair{f.systemd_scope, "--systemd-scope"}, std::pair{f.workdir.has_value(), "--workdir"}})
    if (given)
      return refuse(what + ": " + flag + " is sbx run's; a session's calls start in /workspace and it exports nothing");
  if (!f.command.empty() || g.after_dashdash) return refuse(what + " takes no command; " + calls);
  f.command = {std::string(kAgentPath), "session-agent"};  // the session's program (make_session_request)
  RunRequest req;
  if (auto code = build_run_request(f, g, req)) {
    rc = *code;
    return make_error("usage", "refused");
  }
  SessionSettings s;
  s.dirs = req.dirs;
  auto idle = parse_duration_ms(sf.idle);
  auto max = parse_duration_ms(sf.max);
  if (!idle) return refuse(what + ": --idle " + sf.idle + ": " + idle.error().message);
  if (!max) return refuse(what + ": --max " + sf.max + ": " + max.error().message);
  s.idle_ms = *idle;
  s.max_ms = *max;
  auto p = prepare_session(std::move(req), std::move(s), kernel, f.tenant);
  if (!p) return refuse(what + ": " + p.error().message);
  return p;
}

int start(RunFlags& f, GlobalOptions& g, SessionFlags& sf) {
  int rc = 125;
  auto p = prepare(f, g, sf, "session start", "", rc);
  if (!p) return rc;
  auto started = start_session(std::move(*p));
  if (!started) {
    std::fprintf(stderr, "sbx: session start: %s\n", printable(started.error().message).c_str());
    return 125;
  }
  const SessionSettings& s = *started;
  if (sf.json_out) {
    json j = {{"session", s.id},
              {"run_id", s.run_id},
              {"idle_ms", s.idle_ms},
              {"max_ms", s.max_ms},
              {"call_timeout_ms", s.call_timeout_ms},
              {"call_output_limit", s.call_output_limit}};
    std::printf("%s\n", dump_json(j, -1).c_str());
  } else {
    std::printf("%s\n", s.id.c_str());
  }
  return 0;
}

// --- exec
// The members of a server's answer, read without trusting their types (an answer is a peer's).
const json& member(const json& j, const char* key) { return json_member(j, key); }
json int_member(const json& j, const char* key) {
  const json& v = json_member(j, key);
  return v.is_number_integer() ? v : json(nullptr);
}

int exit_status_of(const json& done) {
  const json& r = member(done, "result");
  std::string st = json_str(r, "status", "error");
  json code = int_member(r, "exit_code"), sig = int_member(r, "signal");
  auto in = [](const json& v, std::int64_t lo, std::int64_t hi) {
    return v.is_number_integer() && v.get<std::int64_t>() >= lo && v.get<std::int64_t>() <= hi;
  };
  if (st == "ok" || st == "exit_nonzero") return in(code, 0, 255) ? code.get<int>() : 1;
  if (st == "timeout") return 124;
  if (st == "killed" && in(sig, 1, 64)) return 128 + sig.get<int>();
  if (st == "interrupted") return 130;
  return 125;
}

int exec(GlobalOptions& g, SessionFlags& sf, std::vector<std::string> command) {
  json req;
  if (sf.language || sf.code) {
    if (!sf.language || !sf.code || !command.empty())
      return usage_error("session exec: give --language L with --code C, or -- CMD [ARGS...] (one of the two)");
    req = {{"op", "code"}, {"language", *sf.language}, {"code", *sf.code}};
  } else {
    if (command.empty())
      return usage_error("session exec: nothing to run: give -- CMD [ARGS...] or --language L --code C");
    req = {{"op", "exec"}, {"argv", command}};
  }
  if (sf.timeout) {
    auto t = parse_duration_ms(*sf.timeout);
    if (!t) return usage_error("session exec: --timeout " + *sf.timeout + ": " + t.error().message);
    req["timeout_ms"] = *t;
  }
  if (sf.output_limit) {
    auto b = parse_size_bytes(*sf.output_limit);
    if (!b) return usage_error("session exec: --output-limit " + *sf.output_limit + ": " + b.error().message);
    req["output_limit"] = *b;
  }
  auto dirs = store(g, sf.tenant);
  if (!dirs) return usage_error(dirs.error().message);
  // Ctrl-C (and SIGTERM, SIGHUP) interrupt the call, not the session; the answer still comes.
  sigset_t sigs;
  sigemptyset(&sigs);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&sigs, sig);
  ::sigprocmask(SIG_BLOCK, &sigs, nullptr);
  UniqueFd sfd(::signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK));
  int out_fd = sf.json_out ? STDERR_FILENO : STDOUT_FILENO;
  auto answer = session_call(
      *dirs, sf.id, req,
      [out_fd](char type, std::string_view bytes) {
    (void)write_all(type == 'O' ? out_fd : STDERR_FILENO, bytes, "the call's output");
      },
      sfd.get());
  if (!answer && answer.error().stage == Stage("signal")) {
    std::fprintf(stderr, "sbx: session exec: %s; exit 130\n", answer.error().message.c_str());
    return 130;
  }
  if (!answer) return usage_error("session exec: " + answer.error().describe());
  json& j = *answer;
  if (sf.json_out) std::printf("%s\n", dump_json(j, -1).c_str());
  if (json_str(j, "event") == "error") {
    std::fprintf(stderr, "sbx: session exec: %s\n", printable(json_str(j, "message", "?")).c_str());
    return 125;
  }
  const json& r = member(j, "result");
  if (!r.is_object() || json_str(j, "event") != "done") {
    std::fprintf(stderr, "sbx: session exec: session %s answered no result (%s): not an sbx session's server?\n",
                 sf.id.c_str(), printable(dump_json(j, -1).substr(0, 200)).c_str());
    return 125;
  }
  if (json_str(r, "status") == "error")
    std::fprintf(stderr, "sbx: session exec: %s\n", printable(json_str(member(r, "error"), "message", "?")).c_str());
  if (json_str(r, "status") == "timeout")
    std::fprintf(stderr, "sbx: session exec: the call hit its timeout (%s ms); exit 124\n",
                 int_member(j, "timeout_ms").dump().c_str());
  if (json_str(j, "interpreter") == "lost")
    std::fprintf(stderr,
                 "sbx: session exec: the session's python interpreter ended; its state is lost, and the next python "
                 "call starts a new one\n");
  return exit_status_of(j);
}

// --- ls, show, stop
int ls(GlobalOptions& g, SessionFlags& sf) {
  auto dirs = store(g, sf.tenant);
  if (!dirs) return usage_error(dirs.error().message);
  std::vector<std::string> skipped;
  auto listed = list_sessions(*dirs, sf.all, &skipped);
  if (!listed) return usage_error("session ls: " + listed.error().describe());
  // What is no session's is named, once, and left alone: the others are listed all the same.
  for (const auto& why : skipped) std::fprintf(stderr, "sbx: session ls: skipped %s\n", printable(why).c_str());
  auto& all = *listed;
  if (sf.json_out) {
    json arr = json::array();
    for (auto& m : all) arr.push_back(m);
    std::printf("%s\n", dump_json(arr, 2).c_str());
    return 0;
  }
  std::printf("%-32s  %-8s  %-24s  %5s  %-10s  %s\n", "ID", "STATE", "STARTED", "CALLS", "PROFILE", "ENDED BY");
  for (auto& m : all) {
    json calls = int_member(m, "calls");
    std::printf("%-32s  %-8s  %-24s  %5s  %-10s  %s\n", printable(json_str(m, "id", "?")).c_str(),
                printable(json_str(m, "state", "?")).c_str(), printable(json_str(m, "started_at")).c_str(),
                calls.is_null() ? "-" : calls.dump().c_str(), printable(json_str(m, "profile")).c_str(),
                printable(json_str(m, "ended_by")).c_str());
  }
  return 0;
}

int show(GlobalOptions& g, SessionFlags& sf) {
  auto dirs = store(g, sf.tenant);
  if (!dirs) return usage_error(dirs.error().message);
  auto meta = find_session(*dirs, sf.id);
  if (!meta) return usage_error("session show: " + meta.error().describe());
  std::printf("%s\n", dump_json(*meta, 2).c_str());
  return 0;
}

int stop(GlobalOptions& g, SessionFlags& sf) {
  auto dirs = store(g, sf.tenant);
  if (!dirs) return usage_error(dirs.error().message);
  auto j = session_stop(*dirs, sf.id);
  if (!j) return usage_error("session stop: " + j.error().describe());
  if (sf.json_out) std::printf("%s\n", dump_json(*j, -1).c_str());
  else
    std::printf("session %s stopped after %s call%s (its record: sbx trace show %s)\n", sf.id.c_str(),
                int_member(*j, "calls").dump().c_str(), int_member(*j, "calls") == 1 ? "" : "s",
                printable(json_str(*j, "run_id", "?")).c_str());
  return 0;
}

RunFlags& start_flags() {
  static RunFlags f;
  return f;
}

// --- sbx kernel: a Jupyter kernel in a session
struct KernelFlags {
  std::string name, connection_file, display_name;
  bool user = false;
};

// Where Jupyter looks for kernelspecs: the user's data dir (JUPYTER_DATA_DIR, else
// $XDG_DATA_HOME/jupyter, else ~/.local/share/jupyter), or the system's /usr/local/share/jupyter.
std::string kernels_dir(bool user) {
  if (!user) return "/usr/local/share/jupyter/kernels";
  if (const char* d = std::getenv("JUPYTER_DATA_DIR"); d && *d) return std::string(d) + "/kernels";
  if (const char* d = std::getenv("XDG_DATA_HOME"); d && *d) return std::string(d) + "/jupyter/kernels";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.local/share/jupyter/kernels";
}

bool valid_kernel_name(const std::string& n) {
  return !n.empty() && n.size() <= 64 && n != "." && n != ".." && std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  });
}

int kernel_install(GlobalOptions& g, RunFlags& f, KernelFlags& kf, SessionFlags& sf) {
  // Checked now, not at every kernel's start: a kernelspec that cannot start is found late.
  for (auto [flag, text] : {std::pair{"--idle", &sf.idle}, std::pair{"--max", &sf.max}})
    if (auto ms = parse_duration_ms(*text); !ms)
      return usage_error(std::string("kernel install: ") + flag + " " + *text + ": " + ms.error().message);
  if (auto profile = load_profile(f.profile); !profile)
    return usage_error("kernel install: " + profile.error().describe());
  // A profile file given by a relative path is written as the absolute one: Jupyter starts the
  // kernel in the notebook's directory.
  if (f.profile.find('/') != std::string::npos && f.profile.front() != '/') f.profile = current_dir() + "/" + f.profile;
  if (!valid_kernel_name(kf.name))
    return usage_error("kernel install: --name '" + kf.name + "': use letters, digits, '-', '.' and '_' (at most 64)");
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return usage_error("kernel install: cannot find sbx's own binary (/proc/self/exe)");
  json argv = {std::string(exe, static_cast<std::size_t>(n)), "kernel", "run", "--profile", f.profile};
  if (f.tenant) argv.insert(argv.end(), {"--tenant", *f.tenant});
  if (!g.state_dir.empty()) argv.insert(argv.end(), {"--state-dir", g.state_dir});
  argv.insert(argv.end(), {"--idle", sf.idle, "--max", sf.max, "--connection-file", "{connection_file}"});
  json spec = {{"argv", argv},
               {"display_name", kf.display_name.empty() ? "Python 3 in sbx (" + f.profile + ")" : kf.display_name},
               {"language", "python"},
               {"interrupt_mode", "message"},
               {"metadata", {{"sbx", {{"profile", f.profile}, {"version", SBX_VERSION}}}}}};
  std::string dir = kernels_dir(kf.user) + "/" + kf.name;
  if (auto st = ensure_dir(dir, 0755); !st) return usage_error("kernel install: " + st.error().describe());
  if (auto st = write_file_durable(dir + "/kernel.json", dump_json(spec, 2) + "\n", 0644); !st)
    return usage_error("kernel install: " + st.error().describe());
  std::printf("installed kernelspec %s in %s\n", kf.name.c_str(), dir.c_str());
  return 0;
}

// jupyter_client starts this with its connection file and ends it (a shutdown message, then
// SIGTERM or SIGKILL) at a restart or shutdown: the session runs in the foreground, and this
// process is its server.
int kernel_run(GlobalOptions& g, RunFlags& f, KernelFlags& kf, SessionFlags& sf) {
  auto conn = read_connection_file(kf.connection_file);
  if (!conn) return usage_error("kernel run: " + conn.error().describe());
  auto relay = KernelRelay::open(*conn);
  if (!relay) return usage_error("kernel run: " + relay.error().describe());
  int rc = 125;
  auto p = prepare(f, g, sf, "kernel run", conn->kernel_name.empty() ? "jupyter" : conn->kernel_name, rc);
  if (!p) return rc;
  return run_kernel_session(std::move(*p), std::move(*relay));
}

RunFlags& kernel_flags() {
  static RunFlags f;
  return f;
}
}  // namespace

void add_kernel_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  static KernelFlags kf;
  static SessionFlags sf;
  RunFlags& f = kernel_flags();
  auto* kernel = app.add_subcommand("kernel", "Jupyter kernels that run inside an sbx session: install, run");
  kernel->require_subcommand(1);
  auto* in = kernel->add_subcommand("install", "Write a kernelspec whose kernel runs in an sbx session");
  in->add_option("--name", kf.name, "The kernelspec's name (e.g. sbx-python3)")->required();
  in->add_option("--profile", f.profile, "The profile its sessions run under (default: untrusted)");
  in->add_option("--tenant", f.tenant, "Run its sessions as tenant NAME")->check(tenant_option_check, "NAME");
  in->add_flag("--user", kf.user, "Into the user's Jupyter data dir instead of /usr/local/share/jupyter");
  in->add_option("--display-name", kf.display_name, "The name notebooks show (default: Python 3 in sbx (PROFILE))");
  in->add_option("--idle", sf.idle, "End a kernel's session after this long without traffic (default 10m)");
  in->add_option("--max", sf.max, "End a kernel's session this long after its start (default 1h, at most 24h)");
  auto* run = kernel->add_subcommand("run", "Run a kernel in a session (what the kernelspec's argv starts)");
  add_run_options(run, f);
  run->add_option("--connection-file", kf.connection_file, "The client's connection file")->required();
  run->add_option("--idle", sf.idle, "End the session after this long without traffic (default 10m)");
  run->add_option("--max", sf.max, "End the session this long after its start (default 1h, at most 24h)");
  for (CLI::App* a : {in, run}) add_global_options(*a, g);
  out.push_back({kernel,
                 [&g, in, run, &f]() -> int {
                   if (in->parsed()) return kernel_install(g, f, kf, sf);
                   if (run->parsed()) return kernel_run(g, f, kf, sf);
                   return usage_error("kernel: expected install or run");
                 },
                 true});
}

void add_session_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  static SessionFlags sf;
  RunFlags& f = start_flags();
  auto* session = app.add_subcommand("session", "A long-lived sandbox for many calls: start, exec, ls, show, stop");
  session->require_subcommand(1);
  auto tenant = [](CLI::App* a) {
    a->add_option("--tenant", sf.tenant, "The sessions of tenant NAME (its own store, see --tenant of sbx run)")
        ->check(tenant_option_check, "NAME");
  };
  auto* st = session->add_subcommand("start", "Start a session with sbx run's options; print its id");
  add_run_options(st, f);
  st->add_option("--idle", sf.idle, "End the session after this long without a call (default 10m)");
  st->add_option("--max", sf.max,
                 "End the session this long after its start, whatever it does (default 1h, at most 24h)");
  st->add_flag("--json", sf.json_out, "Print {session, run_id, limits} as JSON instead of the bare id");
  auto* ex = session->add_subcommand("exec", "Run a command (-- CMD ...) or code (--language L --code C) in a session");
  ex->add_option("id", sf.id, "The session's id")->required();
  ex->add_option("--language", sf.language, "python (its globals stay between calls), sh, bash or node");
  ex->add_option("--code", sf.code, "The code to run with --language");
  ex->add_option("--timeout", sf.timeout, "This call's wall-time limit, at most the session's (its profile's timeout)");
  ex->add_option("--output-limit", sf.output_limit,
                 "Bytes of stdout and of stderr this call passes, at most the session's");
  ex->add_flag("--json", sf.json_out,
               "Print the call's result as one JSON object on stdout; its stdout goes to stderr");
  tenant(ex);
  auto* lsc = session->add_subcommand("ls", "List running sessions (--all: ended ones too)");
  lsc->add_flag("--all", sf.all, "Ended sessions too");
  lsc->add_flag("--json", sf.json_out, "As a JSON array");
  tenant(lsc);
  auto* sh = session->add_subcommand("show", "Print a session as JSON");
  sh->add_option("id", sf.id, "The session's id")->required();
  tenant(sh);
  auto* sp =
      session->add_subcommand("stop", "End a session: its processes and /workspace are destroyed, its record written");
  sp->add_option("id", sf.id, "The session's id")->required();
  sp->add_flag("--json", sf.json_out, "Print {session, calls, ended_by, run_id} as JSON");
  tenant(sp);
  for (CLI::App* a : {st, ex, lsc, sh, sp}) add_global_options(*a, g);
  out.push_back({session,
                 [&g, st, ex, lsc, sh, sp, &f]() -> int {
                   if (st->parsed()) return start(f, g, sf);
                   if (ex->parsed()) return exec(g, sf, g.after_dashdash.value_or(std::vector<std::string>{}));
                   if (lsc->parsed()) return ls(g, sf);
                   if (sh->parsed()) return show(g, sf);
                   if (sp->parsed()) return stop(g, sf);
                   return usage_error("session: expected start, exec, ls, show or stop");
                 },
                 true});
}

}  // namespace sbx::cli
