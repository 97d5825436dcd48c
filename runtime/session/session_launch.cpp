#include "runtime/session/session_launch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "runtime/launch/sandbox.hpp"
#include "runtime/session/session_request.hpp"
#include "runtime/session/session_store.hpp"

namespace sbx {
namespace {
constexpr const char* kStage = "sessions";

// The runner: the session's run, with the agent's channel as its stdin and stdout.
[[noreturn]] void become_runner(PreparedSession& p) {
  // A process group of its own: jupyter_client SIGKILLs its kernel's group at a hard shutdown,
  // and the runner must outlive its server to record the session (its stdin's EOF ends it).
  ::setpgid(0, 0);
  std::string dir = session_dir(p.s.dirs, p.s.id);
  p.listen.reset();
  p.to_agent[0].reset();
  p.from_agent[0].reset();
  ::dup2(p.to_agent[1].get(), STDIN_FILENO);
  int log = ::open((dir + "/runner.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (log >= 0) ::dup2(log, STDERR_FILENO);
  p.req.io.stdout_fd = p.from_agent[1].get();
  // Once the sandbox ended its channel is done with: shut down, so that the server sees the
  // agent's end now (the runner's own copy kept it open until the runner exited) and writes
  // end.json, which the end record reads (session_request.cpp, session_end).
  p.req.typed.after_run =
      [inner = std::move(p.req.typed.after_run), out = p.from_agent[1].get()](const Outcome& o, int fd) {
    ::shutdown(out, SHUT_RDWR);
    return inner(o, fd);
  };
  // The agent's own stderr is the sandbox's: nothing of it is kept on the host's disk (a call
  // could write there without end). runner.log holds sbx's own messages only.
  p.req.io.stderr_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  RunReport r = run_sandbox(p.req);
  ::_exit(r.exit_status);
}

// Forks the runner; the server keeps its ends of the channels. -1 when the fork failed. The
// runner holds none of the server's other fds (`ready`: a start waits for its EOF).
pid_t fork_runner(PreparedSession& p, UniqueFd* ready) {
  pid_t runner = ::fork();
  if (runner == 0) {
    if (ready) ready->reset();
    become_runner(p);
  }
  p.to_agent[1].reset();
  p.from_agent[1].reset();
  return runner;
}

int serve(PreparedSession& p, pid_t runner, UniqueFd ready, std::optional<KernelRelay> relay) {
  p.s.meta["server_pid"] = ::getpid();
  (void)write_session_meta(session_dir(p.s.dirs, p.s.id) + "/session.json", p.s.meta);
  return serve_session(std::move(p.s), std::move(p.listen), std::move(p.to_agent[0]), std::move(p.from_agent[0]),
                       runner, std::move(ready), std::move(relay));
}

// Closes every fd from 3 up but `keep`: a daemon holds nothing of its caller's (a file, a pipe
// whose reader waits for EOF) for the session's whole life.
void close_all_but(std::vector<int> keep) {
  std::sort(keep.begin(), keep.end());
  unsigned from = 3;
  for (int fd : keep) {
    if (fd < 3) continue;
    if (static_cast<unsigned>(fd) > from) ::close_range(from, static_cast<unsigned>(fd) - 1, 0);
    from = static_cast<unsigned>(fd) + 1;
  }
  ::close_range(from, ~0u, 0);
}

// The daemon: its own session (no terminal), stdio away from the caller's (a script's
// `id=$(sbx session start)` must see EOF), no directory or fd of the caller's held.
[[noreturn]] void become_daemon(PreparedSession& p, UniqueFd ready) {
  ::setsid();
  close_all_but({p.listen.get(), p.to_agent[0].get(), p.to_agent[1].get(), p.from_agent[0].get(), p.from_agent[1].get(),
                 ready.get()});
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ::dup2(null, STDIN_FILENO);
  ::dup2(null, STDOUT_FILENO);
  std::string log = session_dir(p.s.dirs, p.s.id) + "/runner.log";
  int lfd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  ::dup2(lfd >= 0 ? lfd : null, STDERR_FILENO);
  pid_t runner = fork_runner(p, &ready);
  if (runner < 0) {
    (void)write_all(ready.get(), "error: cannot fork the session's runner\n", "pipe");
    ::_exit(125);
  }
  // After the runner's fork: the run may need the caller's directory (--workspace).
  if (::chdir("/") != 0) ::_exit(125);
  ::_exit(serve(p, runner, std::move(ready), std::nullopt));
}

std::string read_ready(int fd) {
  std::string line;
  struct pollfd pfd {
    fd, POLLIN, 0
  };
  while (line.find('\n') == std::string::npos && line.size() < 4096) {
    if (::poll(&pfd, 1, kSessionStartWaitMs) <= 0) return "error: the session did not start within 120s";
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    line.append(buf, static_cast<std::size_t>(n));
  }
  if (line.empty()) return "error: the session's server ended before it was ready";
  return line.substr(0, line.find('\n'));
}

// The binary bound as the agent: sbx itself, or SBX_SESSION_AGENT, another build of the same sbx.
// That is for a sanitizer build (tests/sanitize.sh), which cannot run inside a sandbox whose
// memory limit is an RLIMIT_DATA (its shadow mapping is refused): its server and runner are
// tested with the sanitizers, the agent as it ships. The agent is inside the boundary either way,
// with every restriction of a program: whatever binary it is gains nothing.
Result<std::string> agent_binary() {
  if (const char* a = std::getenv("SBX_SESSION_AGENT"); a && *a) {
    struct stat st;
    if (a[0] != '/' || ::stat(a, &st) != 0 || !S_ISREG(st.st_mode) || ::access(a, X_OK) != 0)
      return make_error("usage",
                        std::string("SBX_SESSION_AGENT=") + a + ": not an absolute path of an executable file");
    return std::string(a);
  }
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return make_error(kStage, "cannot find sbx's own binary (/proc/self/exe)");
  return std::string(exe, static_cast<std::size_t>(n));
}

Status socket_pair(UniqueFd (&pair)[2]) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return sys_error(kStage, "cannot make the session's channels");
  pair[0] = UniqueFd(fds[0]);
  pair[1] = UniqueFd(fds[1]);
  return {};
}
}  // namespace

Result<PreparedSession> prepare_session(RunRequest req, SessionSettings s, const std::string& kernel,
                                        const std::optional<std::string>& tenant) {
  // Checked before anything is made: a store another user could change is refused (one line,
  // with the chown or chmod that fixes it).
  SBX_TRY(check_session_store(s.dirs));
  PreparedSession p;
  p.req = std::move(req);
  p.s = std::move(s);
  p.s.id = new_session_id();
  auto agent = agent_binary();
  if (!agent) return agent.error();
  std::optional<Tenant> t;
  if (tenant) {
    auto loaded = load_tenant(*tenant);
    if (!loaded) return loaded.error();
    t = std::move(*loaded);
  }
  SBX_TRY(make_session_request(p.req, p.s, *agent, kernel, t ? &*t : nullptr));
  auto limit = max_sessions();
  if (!limit) return limit.error();
  auto listen = create_session_dir(p.s.dirs, p.s.id, *limit);
  if (!listen) return listen.error();
  p.listen = std::move(*listen);
  SBX_TRY(socket_pair(p.to_agent));
  SBX_TRY(socket_pair(p.from_agent));
  return p;
}

Result<SessionSettings> start_session(PreparedSession p) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return sys_error(kStage, "cannot make the session's channels");
  std::fflush(nullptr);
  pid_t daemon = ::fork();
  if (daemon == 0) {
    ::close(ready[0]);
    become_daemon(p, UniqueFd(ready[1]));
  }
  ::close(ready[1]);
  UniqueFd rd(ready[0]);
  if (daemon < 0) return sys_error(kStage, "cannot fork the session's server");
  std::string line = read_ready(rd.get());
  ::waitpid(daemon, nullptr, WNOHANG);
  if (line != "ok") return make_error(kStage, line.rfind("error: ", 0) == 0 ? line.substr(7) : line);
  return std::move(p.s);
}

int run_kernel_session(PreparedSession p, KernelRelay relay) {
  pid_t runner = fork_runner(p, nullptr);
  if (runner < 0) {
    std::fprintf(stderr, "sbx: kernel run: cannot fork the session's runner\n");
    return 125;
  }
  return serve(p, runner, UniqueFd(), std::move(relay));
}

}  // namespace sbx
