// sbx session start|exec|ls|show|stop: parsing and printing; the session itself is
// runtime/session/ (session_server.hpp: its server, runner and agent).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/signals.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/base/units.hpp"
#include "runtime/launch/tenant.hpp"
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

int start(RunFlags& f, GlobalOptions& g, SessionFlags& sf) {
  if (f.interactive || f.tty)
    return usage_error("session start: -i and -t are 'sbx run''s; run commands with 'sbx session exec ID -- CMD'");
  if (f.dry_run)
    return usage_error("session start: --dry-run is not supported; try 'sbx run --dry-run' with the same options");
  if (!f.command.empty() || g.after_dashdash)
    return usage_error("session start takes no command: run commands with 'sbx session exec ID -- CMD'");
  f.command = {std::string(kAgentPath), "session-agent"};  // the session's program (make_session_request)
  RunRequest req;
  if (auto rc = build_run_request(f, g, req)) return *rc;
  SessionSettings s;
  s.id = new_session_id();
  s.dirs = req.dirs;
  auto idle = parse_duration_ms(sf.idle);
  auto max = parse_duration_ms(sf.max);
  if (!idle) return usage_error("session start: --idle " + sf.idle + ": " + idle.error().message);
  if (!max) return usage_error("session start: --max " + sf.max + ": " + max.error().message);
  s.idle_ms = *idle;
  s.max_ms = *max;
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return usage_error("session start: cannot find sbx's own binary (/proc/self/exe)");
  if (auto st = make_session_request(req, s, std::string(exe, static_cast<std::size_t>(n))); !st)
    return usage_error(st.error().message);
  auto limit = max_sessions();
  if (!limit) return usage_error(limit.error().message);
  if (auto st = create_session_dir(s.dirs, s.id, *limit); !st) return usage_error(st.error().describe());
  auto listen = listen_session(session_dir(s.dirs, s.id));
  if (!listen) return usage_error(listen.error().describe());
  int pairs[2][2], ready[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pairs[0]) != 0 ||
      ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pairs[1]) != 0 || ::pipe2(ready, O_CLOEXEC) != 0)
    return usage_error("session start: cannot make the session's channels");
  std::fflush(nullptr);
  pid_t daemon = ::fork();
  if (daemon == 0) {
    ::close(ready[0]);
    become_daemon(req, s, std::move(*listen), pairs, UniqueFd(ready[1]));
  }
  listen->reset();
  for (auto& p : pairs)
    for (int fd : p) ::close(fd);
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
}  // namespace

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
