#include "runtime/session/session_agent.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/session/session_child.hpp"
#include "runtime/session/session_tunnel.hpp"
#include "runtime/session/session_wire.hpp"

namespace sbx {
namespace {

std::int64_t now_ms() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Frames to the server, blocking: the server reads without blocking and applies back-pressure
// by reading no more. A server that is gone ends the agent (and with it the session).
void send(std::string_view frame) {
  while (!frame.empty()) {
    ssize_t n = ::write(STDOUT_FILENO, frame.data(), frame.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ::_exit(0);
    frame.remove_prefix(static_cast<std::size_t>(n));
  }
}
void send_json(const nlohmann::json& j) { send(encode_json_frame(j)); }

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// One stream of the running call: forwarded up to the call's limit, the rest read and counted.
struct Stream {
  int fd = -1;
  char type = 'O';
  std::int64_t bytes = 0, dropped = 0;
  bool eof = false;  // no more will come: not polled again
  int poll_fd() const { return eof ? -1 : fd; }
  // Reads what there is; false at EOF or a read error (nothing more will come).
  bool pump(std::int64_t limit, bool forward) {
    if (fd < 0 || eof) return false;
    eof = !read_all(limit, forward);
    return !eof;
  }
  // At most kMaxPumpChunks reads: a writer that keeps the pipe full (a background process, an
  // interpreter's thread) cannot hold the agent here past a call's deadline; what is left is read
  // at the next pump. The bound passes more than a full pipe (1 MiB at most, F_SETPIPE_SZ for an
  // unprivileged writer), so a pump after the writer ended still reads all it wrote.
  static constexpr int kMaxPumpChunks = 32;
  bool read_all(std::int64_t limit, bool forward) {
    char buf[kOutputChunk];
    for (int chunk = 0; chunk < kMaxPumpChunks; ++chunk) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno == EAGAIN;
      if (n == 0) return false;
      auto got = static_cast<std::int64_t>(n);
      std::int64_t room = forward ? std::max<std::int64_t>(0, limit - bytes) : 0;
      std::int64_t pass = std::min(room, got);
      if (pass > 0) send(encode_frame(type, std::string_view(buf, static_cast<std::size_t>(pass))));
      bytes += pass;
      dropped += got - pass;
      if (static_cast<std::size_t>(n) < sizeof buf) return true;
    }
    return true;
  }
};

// The session's Python interpreter (session_python.py): started at the first python call, kept
// until it dies or is killed at a timeout.
struct Interpreter {
  pid_t pid = -1;
  int code_fd = -1, status_fd = -1;
  Stream out{-1, 'O'}, err{-1, 'E'};
  std::string status;  // the status line being read
  void forget() {
    pid = -1;
    close_fd(code_fd);
    close_fd(status_fd);
    close_fd(out.fd);
    close_fd(err.fd);
    out = Stream{-1, 'O'};
    err = Stream{-1, 'E'};
    status.clear();
  }
};

struct Call {
  bool active = false, python = false, ended = false;
  pid_t pid = -1;  // the command's process (and process group); the interpreter's for python
  Stream out{-1, 'O'}, err{-1, 'E'};
  std::int64_t limit = 0, started = 0, deadline = 0, kill_at = 0;
  bool timed_out = false, interrupted = false;
  std::string interpreter = "kept";
  std::optional<int> exit_code, signal;
};

struct Pipe {
  int r = -1, w = -1;
  bool open() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return false;
    r = p[0];
    w = p[1];
    return true;
  }
};

void set_nonblock(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

class Agent {
 public:
  int main() {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &chld, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    sfd_ = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd_ < 0) return 1;
    // Not dumpable: a call (same uid) cannot open /proc/<agent>/mem or its fds and write frames
    // in the agent's name. Killing it stays possible, which only ends its own session.
    ::prctl(PR_SET_DUMPABLE, 0);
    set_nonblock(STDIN_FILENO);
    send_json({{"event", "ready"}});
    for (;;) {
      if (!loop_once()) break;
    }
    // The server is gone or asked the session to end: nothing of it survives the agent.
    ::kill(-1, SIGKILL);
    return 0;
  }

 private:
  bool loop_once() {
    std::vector<struct pollfd> p;
    p.push_back({STDIN_FILENO, POLLIN, 0});
    p.push_back({sfd_, POLLIN, 0});
    p.push_back({call_.active ? call_.out.poll_fd() : -1, POLLIN, 0});
    p.push_back({call_.active ? call_.err.poll_fd() : -1, POLLIN, 0});
    p.push_back({call_.active && call_.python ? py_.status_fd : -1, POLLIN, 0});
    tunnel_.add_to(p);
    int timeout = -1;
    if (call_.active) {
      std::int64_t next = call_.kill_at != 0 ? std::min(call_.deadline, call_.kill_at) : call_.deadline;
      timeout = static_cast<int>(std::clamp<std::int64_t>(next - now_ms(), 0, 60000));
    }
    if (::poll(p.data(), p.size(), timeout) < 0 && errno != EINTR) return false;
    if (p[1].revents) reap();
    if (p[2].revents) call_.out.pump(call_.limit, true);
    if (p[3].revents) call_.err.pump(call_.limit, true);
    if (p[4].revents) read_status();
    tunnel_.dispatch(std::span<const struct pollfd>(p).subspan(5));
    check_deadlines();
    if (call_.active && call_.ended) finish();
    if (p[0].revents) return read_requests();
    return true;
  }

  bool read_requests() {
    char buf[64 << 10];
    for (;;) {
      if (!in_.wants_more()) break;
      ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      if (n <= 0) return false;
      in_.feed(std::string_view(buf, static_cast<std::size_t>(n)));
      if (static_cast<std::size_t>(n) < sizeof buf) break;
    }
    for (;;) {
      auto f = in_.next();
      if (!f) return false;  // the server broke the framing: it is not ours to guess
      if (!*f) return true;
      if ((*f)->type == 'S') {
        std::uint32_t id = 0;
        std::string_view bytes;
        if (!decode_stream_frame((*f)->body, id, bytes)) return false;
        tunnel_.to_stream(id, bytes);
        continue;
      }
      auto j = frame_json(**f);
      if (!j) return false;
      try {
        handle(*j);
      } catch (const nlohmann::json::exception&) { refuse("a malformed request"); }
    }
  }

  void refuse(const std::string& why) { send_json({{"event", "error"}, {"message", why}}); }

  void handle(const nlohmann::json& j) {
    std::string op = j.value("op", "");
    if (op == "interrupt") return interrupt();
    if (tunnel_.handle(j)) return;
    if (call_.active) return refuse("a call is already running in this session");
    if (op != "exec" && op != "code") return refuse("unknown request '" + op + "'");
    auto num = [&](const char* k, std::int64_t d) {
      auto it = j.find(k);
      return it != j.end() && it->is_number_integer() ? it->get<std::int64_t>() : d;
    };
    call_ = Call{};
    call_.limit = std::max<std::int64_t>(0, num("output_limit", 1 << 20));
    call_.started = now_ms();
    call_.deadline = call_.started + std::max<std::int64_t>(1, num("timeout_ms", 30000));
    if (op == "code" && j.value("language", "") == "python") return start_python(j.value("code", ""));
    std::vector<std::string> argv;
    if (op == "exec") {
      auto it = j.find("argv");
      if (it == j.end() || !it->is_array() || it->empty()) return refuse("exec needs a non-empty argv");
      for (auto& a : *it) {
        if (!a.is_string()) return refuse("exec: argv holds a non-string");
        argv.push_back(a.get<std::string>());
      }
    } else {
      std::string lang = j.value("language", "");
      if (lang != "sh" && lang != "bash" && lang != "node") return refuse("unknown language '" + lang + "'");
      argv = {lang, lang == "node" ? "-e" : "-c", j.value("code", "")};
    }
    start_command(argv);
  }

  void start_command(const std::vector<std::string>& argv) {
    Pipe o, e;
    if (!o.open() || !e.open()) return refuse("cannot make the call's pipes");
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) {
      for (int fd : {o.r, o.w, e.r, e.w}) ::close(fd);
      return refuse("cannot fork the call's process (the session's pids limit?)");
    }
    if (pid == 0) {
      session_child_setup(o.w, e.w, 2);
      ::execvp(args[0], args.data());
      int err = errno;
      std::string msg = std::string("sbx session: ") + args[0] + ": " + ::strerror(err) + "\n";
      (void)!::write(2, msg.data(), msg.size());
      ::_exit(err == ENOENT ? 127 : 126);
    }
    ::setpgid(pid, pid);
    ::close(o.w);
    ::close(e.w);
    set_nonblock(o.r);
    set_nonblock(e.r);
    call_.active = true;
    call_.pid = pid;
    call_.out.fd = o.r;
    call_.err.fd = e.r;
  }

  bool spawn_python() {
    Pipe code, status, o, e;
    if (!code.open() || !status.open() || !o.open() || !e.open()) return false;
    std::string driver(session_python_text());
    pid_t pid = ::fork();
    if (pid < 0) return false;
    if (pid == 0) {
      // fds 0-3 are stdio and the signalfd, so every pipe end here is above 4: placing two of
      // them on 3 and 4 clobbers nothing still needed.
      ::dup2(code.r, 3);
      ::dup2(status.w, 4);
      session_child_setup(o.w, e.w, 4);
      const char* argv[] = {"python3", "-u", "-c", driver.c_str(), nullptr};
      ::execvp(argv[0], const_cast<char**>(argv));
      std::string msg =
          "sbx session: python3: " + std::string(::strerror(errno)) + " (the session's image has no python3)\n";
      (void)!::write(2, msg.data(), msg.size());
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    for (int fd : {code.r, status.w, o.w, e.w}) ::close(fd);
    py_.pid = pid;
    py_.code_fd = code.w;
    py_.status_fd = status.r;
    py_.out.fd = o.r;
    py_.err.fd = e.r;
    set_nonblock(py_.status_fd);
    set_nonblock(py_.out.fd);
    set_nonblock(py_.err.fd);
    return true;
  }

  void start_python(const std::string& code) {
    std::string interpreter = "kept";
    if (py_.pid < 0) {
      if (!spawn_python()) return refuse("cannot start python3 in the session");
      interpreter = "new";
    }
    // What the interpreter wrote between calls (a thread of an earlier call) is not this call's.
    py_.out.pump(0, false);
    py_.err.pump(0, false);
    py_.out.bytes = py_.out.dropped = py_.err.bytes = py_.err.dropped = 0;
    py_.out.eof = py_.err.eof = false;
    call_.active = true;
    call_.python = true;
    call_.pid = py_.pid;
    call_.interpreter = interpreter;
    call_.out = py_.out;
    call_.err = py_.err;
    std::string msg(4, '\0');
    auto n = static_cast<std::uint32_t>(code.size());
    for (int i = 0; i < 4; ++i) msg[static_cast<std::size_t>(i)] = static_cast<char>(n >> (24 - 8 * i));
    msg += code;
    // Blocking: the interpreter is idle and reads the whole request before it runs it. A dead
    // one fails the write (EPIPE), and its death is reaped as the call's end.
    std::string_view rest = msg;
    while (!rest.empty()) {
      ssize_t w = ::write(py_.code_fd, rest.data(), rest.size());
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      rest.remove_prefix(static_cast<std::size_t>(w));
    }
  }

  void read_status() {
    char buf[64];
    ssize_t n = ::read(py_.status_fd, buf, sizeof buf);
    if (n <= 0) return;
    py_.status.append(buf, static_cast<std::size_t>(n));
    auto nl = py_.status.find('\n');
    if (nl == std::string::npos) {
      if (py_.status.size() > 64) py_.status.clear();  // not the driver's: ignored
      return;
    }
    std::string line = py_.status.substr(0, nl);
    py_.status.erase(0, nl + 1);
    if (line == "interrupted") call_.interrupted = true;
    call_.exit_code = line == "ok" ? 0 : 1;
    // "exit N": the call's sys.exit(N), whose status it keeps (0-255).
    if (line.rfind("exit ", 0) == 0 && line.size() <= 8 &&
        line.find_first_not_of("0123456789", 5) == std::string::npos && line.size() > 5)
      call_.exit_code = std::min(255, std::stoi(line.substr(5)));
    call_.ended = true;
  }

  void reap() {
    struct signalfd_siginfo si;
    while (::read(sfd_, &si, sizeof si) > 0) {}
    for (;;) {
      int st = 0;
      pid_t pid = ::waitpid(-1, &st, WNOHANG);
      if (pid <= 0) break;
      if (tunnel_.reaped(pid, st)) continue;
      bool interp = pid == py_.pid;
      if (interp) {
        py_.pid = -1;  // its pipes are read to the end by finish() or dropped below
        if (!(call_.active && call_.python)) py_.forget();
      }
      if (call_.active && pid == call_.pid) {
        if (WIFEXITED(st)) call_.exit_code = WEXITSTATUS(st);
        if (WIFSIGNALED(st)) call_.signal = WTERMSIG(st);
        if (interp) call_.interpreter = "lost";
        call_.ended = true;
      }
    }
  }

  void interrupt() {
    if (!call_.active || call_.ended) return;
    call_.interrupted = true;
    ::kill(call_.python ? call_.pid : -call_.pid, SIGINT);
    if (call_.kill_at == 0) call_.kill_at = now_ms() + kInterruptGraceMs;
  }

  // Past the call's deadline, or the interrupt's grace: SIGKILL to its process group. For python
  // that is the interpreter: its state is lost, and the next python call starts a new one.
  void check_deadlines() {
    if (!call_.active || call_.ended) return;
    std::int64_t now = now_ms();
    bool late = now >= call_.deadline, graceless = call_.kill_at != 0 && now >= call_.kill_at;
    if (!late && !graceless) return;
    if (late) call_.timed_out = true;
    ::kill(-call_.pid, SIGKILL);
    call_.kill_at = 0;
    call_.deadline = now + 60000;  // the reap ends the call
  }

  void finish() {
    call_.out.pump(call_.limit, true);
    call_.err.pump(call_.limit, true);
    nlohmann::json done = {{"event", "done"},
                           {"exit_code", nullptr},
                           {"signal", nullptr},
                           {"timed_out", call_.timed_out},
                           {"interrupted", call_.interrupted},
                           {"stdout_bytes", call_.out.bytes},
                           {"stderr_bytes", call_.err.bytes},
                           {"stdout_dropped", call_.out.dropped},
                           {"stderr_dropped", call_.err.dropped},
                           {"wall_ms", now_ms() - call_.started}};
    if (call_.exit_code) done["exit_code"] = *call_.exit_code;
    if (call_.signal) done["signal"] = *call_.signal;
    if (call_.python) {
      done["interpreter"] = call_.interpreter;
      if (py_.pid < 0) {
        py_.forget();
      } else {
        py_.out.fd = call_.out.fd;
        py_.err.fd = call_.err.fd;
      }
    } else {
      close_fd(call_.out.fd);
      close_fd(call_.err.fd);
    }
    call_ = Call{};
    send_json(done);
  }

  int sfd_ = -1;
  FrameReader in_;
  AgentTunnel tunnel_{[](std::string_view frame) { send(frame); }};
  Call call_;
  Interpreter py_;
};

}  // namespace

int session_agent_main() { return Agent().main(); }

}  // namespace sbx
