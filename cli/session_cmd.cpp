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
#include "runtime/session/session_request.hpp"
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

// How long `start` waits for the session's sandbox to answer.
constexpr int kStartWaitMs = 120000;

Result<Dirs> store(const GlobalOptions& g, const std::optional<std::string>& tenant) {
  Dirs d = resolve_dirs(g.state_dir);
  if (!tenant) return d;
  auto t = load_tenant(*tenant);
  if (!t) return t.error();
  // A tenant that never ran has no store yet, and so no session: find_session says so.
  if (Dirs own = tenant_store(*t, d); ::access(own.state.c_str(), F_OK) != 0) return own;
  return tenant_store_of(*tenant, d);
}

void write_fd(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

// --- start: the daemon (server and runner), then the id once the sandbox answered
[[noreturn]] void become_runner(RunRequest& req, int in_r, int out_w, const std::string& dir) {
  ::dup2(in_r, STDIN_FILENO);
  int log = ::open((dir + "/runner.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (log >= 0) ::dup2(log, STDERR_FILENO);
  ::close_range(3, ~0u, CLOSE_RANGE_CLOEXEC);
  req.io.stdout_fd = out_w;
  ::fcntl(out_w, F_SETFD, 0);
  // The agent's own stderr is the sandbox's: nothing of it is kept on the host's disk (a call
  // could write there without end). runner.log holds sbx's own messages only.
  req.io.stderr_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  RunReport r = run_sandbox(req);
  ::_exit(r.exit_status);
}

[[noreturn]] void become_daemon(RunRequest& req, SessionSettings& s, UniqueFd listen, int pairs[2][2], UniqueFd ready) {
  ::setsid();
  std::string dir = session_dir(s.dirs, s.id);
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ::dup2(null, STDIN_FILENO);
  ::dup2(null, STDOUT_FILENO);
  int log = ::open((dir + "/runner.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  ::dup2(log >= 0 ? log : null, STDERR_FILENO);
  pid_t runner = ::fork();
  if (runner == 0) {
    listen.reset();
    ready.reset();
    ::close(pairs[0][0]);
    ::close(pairs[1][0]);
    become_runner(req, pairs[0][1], pairs[1][1], dir);
  }
  ::close(pairs[0][1]);
  ::close(pairs[1][1]);
  if (runner < 0) {
    (void)write_all(ready.get(), "error: cannot fork the session's runner\n", "pipe");
    ::_exit(125);
  }
  // The server holds no directory of the caller's (the runner started in it: --workspace).
  if (::chdir("/") != 0) ::_exit(125);
  s.meta["server_pid"] = ::getpid();
  (void)write_session_meta(dir + "/session.json", s.meta);
  int rc = serve_session(std::move(s), std::move(listen), UniqueFd(pairs[0][0]), UniqueFd(pairs[1][0]), runner,
                         std::move(ready));
  ::_exit(rc);
}

std::string read_ready(int fd) {
  std::string line;
  struct pollfd p {
    fd, POLLIN, 0
  };
  while (line.find('\n') == std::string::npos && line.size() < 4096) {
    if (::poll(&p, 1, kStartWaitMs) <= 0) return "error: the session did not start within 120s";
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    line.append(buf, static_cast<std::size_t>(n));
  }
  if (line.empty()) return "error: the session's server ended before it was ready";
  return line.substr(0, line.find('\n'));
}

// What start and kernel run share: the session's request, its directory, its socket and the
// two channels between the server and the runner (pairs[0]: to the agent, pairs[1]: from it).
struct PreparedSession {
  RunRequest req;
  SessionSettings s;
  UniqueFd listen;
  int pairs[2][2] = {{-1, -1}, {-1, -1}};
};

std::optional<int> prepare_session(RunFlags& f, GlobalOptions& g, SessionFlags& sf, PreparedSession& p,
                                   const std::string& kernel = "") {
  const std::string what = kernel.empty() ? "session start" : "kernel run";
  if (f.interactive || f.tty)
    return usage_error(what + ": -i and -t are 'sbx run''s; run commands with 'sbx session exec ID -- CMD'");
  if (f.dry_run)
    return usage_error(what + ": --dry-run is not supported; try 'sbx run --dry-run' with the same options");
  if (!f.command.empty() || g.after_dashdash)
    return usage_error(what + " takes no command: run commands with 'sbx session exec ID -- CMD'");
  f.command = {std::string(kAgentPath), "session-agent"};  // the session's program (make_session_request)
  RunRequest& req = p.req;
  if (auto rc = build_run_request(f, g, req)) return *rc;
  SessionSettings& s = p.s;
  s.id = new_session_id();
  s.dirs = req.dirs;
  auto idle = parse_duration_ms(sf.idle);
  auto max = parse_duration_ms(sf.max);
  if (!idle) return usage_error(what + ": --idle " + sf.idle + ": " + idle.error().message);
  if (!max) return usage_error(what + ": --max " + sf.max + ": " + max.error().message);
  s.idle_ms = *idle;
  s.max_ms = *max;
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return usage_error(what + ": cannot find sbx's own binary (/proc/self/exe)");
  if (auto st = make_session_request(req, s, std::string(exe, static_cast<std::size_t>(n)), kernel); !st)
    return usage_error(st.error().message);
  auto limit = max_sessions();
  if (!limit) return usage_error(limit.error().message);
  if (auto st = create_session_dir(s.dirs, s.id, *limit); !st) return usage_error(st.error().describe());
  auto listen = listen_session(session_dir(s.dirs, s.id));
  if (!listen) return usage_error(listen.error().describe());
  p.listen = std::move(*listen);
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p.pairs[0]) != 0 ||
      ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p.pairs[1]) != 0)
    return usage_error(what + ": cannot make the session's channels");
  return std::nullopt;
}

int start(RunFlags& f, GlobalOptions& g, SessionFlags& sf) {
  PreparedSession p;
  if (auto rc = prepare_session(f, g, sf, p)) return *rc;
  SessionSettings& s = p.s;
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return usage_error("session start: cannot make the session's channels");
  std::fflush(nullptr);
  pid_t daemon = ::fork();
  if (daemon == 0) {
    ::close(ready[0]);
    become_daemon(p.req, s, std::move(p.listen), p.pairs, UniqueFd(ready[1]));
  }
  p.listen.reset();
  for (auto& pair : p.pairs)
    for (int fd : pair) ::close(fd);
  ::close(ready[1]);
  UniqueFd rd(ready[0]);
  if (daemon < 0) return usage_error("session start: cannot fork the session's server");
  std::string line = read_ready(rd.get());
  ::waitpid(daemon, nullptr, WNOHANG);
  if (line != "ok") {
    std::fprintf(stderr, "sbx: session start: %s\n",
                 printable(line.rfind("error: ", 0) == 0 ? line.substr(7) : line).c_str());
    return 125;
  }
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
int exit_status_of(const json& done) {
  const json& r = done.value("result", json::object());
  std::string st = r.value("status", "error");
  if (st == "ok" || st == "exit_nonzero")
    return r.value("exit_code", json(1)).is_number_integer() ? r["exit_code"].get<int>() : 1;
  if (st == "timeout") return 124;
  if (st == "killed" && r.value("signal", json(nullptr)).is_number_integer()) return 128 + r["signal"].get<int>();
  if (st == "interrupted") return 130;
  return 125;
}

int exec(GlobalOptions& g, SessionFlags& sf, std::vector<std::string> command) {
  json req;
  if (sf.language || sf.code) {
    if (!sf.language || !sf.code || !command.empty())
      return usage_error("session exec: give --language L --code C, or -- CMD [ARGS...], not both");
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
  auto conn = connect_session(*dirs, sf.id);
  if (!conn) return usage_error("session exec: " + conn.error().describe());
  write_fd(conn->get(), encode_json_frame(req));
  // Ctrl-C (and SIGTERM, SIGHUP) interrupt the call, not the session; the answer still comes.
  sigset_t sigs;
  sigemptyset(&sigs);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&sigs, sig);
  ::sigprocmask(SIG_BLOCK, &sigs, nullptr);
  UniqueFd sfd(::signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK));
  FrameReader reader;
  int out_fd = sf.json_out ? STDERR_FILENO : STDOUT_FILENO;
  for (;;) {
    struct pollfd p[2] = {{conn->get(), POLLIN, 0}, {sfd.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) break;
    if (p[1].revents) {
      struct signalfd_siginfo si;
      while (::read(sfd.get(), &si, sizeof si) == sizeof si) {}
      write_fd(conn->get(), encode_json_frame({{"op", "interrupt"}}));
    }
    if (!p[0].revents) continue;
    char buf[64 << 10];
    ssize_t n = ::read(conn->get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reader.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    for (;;) {
      auto f = reader.next();
      if (!f) return usage_error("session exec: " + f.error().message);
      if (!*f) break;
      if ((*f)->type == 'O') write_fd(out_fd, (*f)->body);
      if ((*f)->type == 'E') write_fd(STDERR_FILENO, (*f)->body);
      if ((*f)->type != 'J') continue;
      auto j = frame_json(**f);
      if (!j) return usage_error("session exec: " + j.error().message);
      if (j->value("event", "") == "error") {
        if (sf.json_out) std::printf("%s\n", dump_json(*j, -1).c_str());
        std::fprintf(stderr, "sbx: session exec: %s\n", printable(j->value("message", "?")).c_str());
        return 125;
      }
      if (sf.json_out) std::printf("%s\n", dump_json(*j, -1).c_str());
      const json& r = (*j)["result"];
      if (r.value("status", "") == "error")
        std::fprintf(stderr, "sbx: session exec: %s\n",
                     printable(r.value("error", json::object()).value("message", "?")).c_str());
      if (r.value("status", "") == "timeout")
        std::fprintf(stderr, "sbx: session exec: the call hit its timeout (%s ms); exit 124\n",
                     j->value("timeout_ms", json(nullptr)).dump().c_str());
      if (j->value("interpreter", "") == "lost")
        std::fprintf(
            stderr,
            "sbx: session exec: the session's python interpreter ended; its state is lost, and the next python call starts a new one\n");
      return exit_status_of(*j);
    }
  }
  std::fprintf(stderr, "sbx: session exec: session %s ended before the call did\n", sf.id.c_str());
  return 125;
}

// --- ls, show, stop
int ls(GlobalOptions& g, SessionFlags& sf) {
  auto dirs = store(g, sf.tenant);
  if (!dirs) return usage_error(dirs.error().message);
  auto all = list_sessions(*dirs, sf.all);
  if (sf.json_out) {
    json arr = json::array();
    for (auto& m : all) arr.push_back(m);
    std::printf("%s\n", dump_json(arr, 2).c_str());
    return 0;
  }
  std::printf("%-32s  %-8s  %-24s  %5s  %-10s  %s\n", "ID", "STATE", "STARTED", "CALLS", "PROFILE", "ENDED BY");
  for (auto& m : all)
    std::printf("%-32s  %-8s  %-24s  %5s  %-10s  %s\n", printable(m.value("id", "?")).c_str(),
                printable(m.value("state", "?")).c_str(), printable(m.value("started_at", "")).c_str(),
                m.contains("calls") ? m["calls"].dump().c_str() : "-", printable(m.value("profile", "")).c_str(),
                printable(m.value("ended_by", "")).c_str());
  return 0;
}

int show(GlobalOptions& g, SessionFlags& sf) {
  auto dirs = store(g, sf.tenant);
  if (!dirs) return usage_error(dirs.error().message);
  auto meta = find_session(*dirs, sf.id);
  if (!meta) return usage_error("session show: " + meta.error().message);
  std::printf("%s\n", dump_json(*meta, 2).c_str());
  return 0;
}

int stop(GlobalOptions& g, SessionFlags& sf) {
  auto dirs = store(g, sf.tenant);
  if (!dirs) return usage_error(dirs.error().message);
  auto conn = connect_session(*dirs, sf.id);
  if (!conn) return usage_error("session stop: " + conn.error().describe());
  write_fd(conn->get(), encode_json_frame({{"op", "stop"}}));
  FrameReader reader;
  for (;;) {
    auto f = read_frame(conn->get(), reader);
    if (!f || !*f) break;
    if ((*f)->type != 'J') continue;
    auto j = frame_json(**f);
    if (!j || j->value("event", "") != "stopped") continue;
    if (sf.json_out) std::printf("%s\n", dump_json(*j, -1).c_str());
    else
      std::printf("session %s stopped after %s calls (its record: sbx trace show %s)\n", sf.id.c_str(),
                  (*j)["calls"].dump().c_str(), printable(j->value("run_id", "?")).c_str());
    return 0;
  }
  std::fprintf(stderr, "sbx: session stop: session %s's server went away before it said it stopped\n", sf.id.c_str());
  return 125;
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
  PreparedSession p;
  if (auto rc = prepare_session(f, g, sf, p, conn->kernel_name.empty() ? "jupyter" : conn->kernel_name)) return *rc;
  pid_t runner = ::fork();
  if (runner == 0) {
    p.listen.reset();
    ::close(p.pairs[0][0]);
    ::close(p.pairs[1][0]);
    become_runner(p.req, p.pairs[0][1], p.pairs[1][1], session_dir(p.s.dirs, p.s.id));
  }
  ::close(p.pairs[0][1]);
  ::close(p.pairs[1][1]);
  if (runner < 0) return usage_error("kernel run: cannot fork the session's runner");
  p.s.meta["server_pid"] = ::getpid();
  (void)write_session_meta(session_dir(p.s.dirs, p.s.id) + "/session.json", p.s.meta);
  return serve_session(std::move(p.s), std::move(p.listen), UniqueFd(p.pairs[0][0]), UniqueFd(p.pairs[1][0]), runner,
                       UniqueFd(), std::move(*relay));
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
