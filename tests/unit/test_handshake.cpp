// The handshake between the supervisor and init (handshake.hpp), each step driven over the real
// pipes and socketpairs: a forked child plays init with InitEnd, the test is the supervisor with
// InitChannel. Also a peer that dies mid-way, a short message, EINTR, the shared init's wait.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "runtime/base/fdpass.hpp"
#include "runtime/base/raw_syscall.hpp"
#include "runtime/base/signals.hpp"
#include "runtime/launch/handshake.hpp"

using namespace sbx;

namespace {

// Writes to a pipe whose reader is gone must be EPIPE here, as in a run (sandbox.cpp ignores
// SIGPIPE for the launch), not the end of the test binary.
struct IgnoreSigpipe {
  SignalDispositionGuard g{SIGPIPE, SIG_IGN};
};

struct Channel {
  InitChannel chan;
  Channel() {
    REQUIRE(chan.open_pipes().ok());
    REQUIRE(chan.open_out_socket().ok());
    REQUIRE(chan.open_listener_socket().ok());
    REQUIRE(chan.open_proxy_socket().ok());
  }
  // Init's ends as ChildConfig carries them (sandbox.cpp fills the stdio members too).
  InitFds fds() const {
    InitFds f;
    f.sync = chan.init_sync();
    f.msg = chan.init_reports();
    f.out_sock = chan.init_out_socket();
    f.listener_sock = chan.init_listener_socket();
    f.proxy_sock = chan.init_proxy_socket();
    return f;
  }
  InitEnd end() const { return InitEnd(fds()); }
};

// Forks a child that runs `body` as init and exits 0 if it returns. Like init (child.cpp), the
// child keeps only its own ends: a copy of a supervisor's end would hide its hang-up.
template <class F>
pid_t fork_init(const Channel& c, F body) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    InitFds keep = c.fds();
    for (int fd = 3; fd < 1024; ++fd) {
      bool mine = false;
      keep.for_each([&](int k) { mine = mine || k == fd; });
      if (!mine) raw::close(fd);
    }
    body();
    raw::exit_group(0);
  }
  return pid;
}

int exit_code(pid_t pid) {
  int ws = 0;
  while (::waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

// The next report, waiting for it (the pipe is blocking here).
ReportRead next_report(int fd, ChildMsg& m) {
  struct pollfd p = {fd, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 5000) == 1);
  return read_init_report(fd, m);
}

// recv_fd does not wait: the peer has sent before the report that the test waited for.
int recv_one(int sock, char* tag_out = nullptr) {
  int fd = -1;
  (void)tag_out;
  REQUIRE(recv_fd(sock, &fd) == 1);
  return fd;
}

std::string fd_target(int fd) {
  char path[64], buf[256];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = ::readlink(path, buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

void on_usr1(int) {}

}  // namespace

TEST_CASE("handshake: every step in order, over the real channels") {
  IgnoreSigpipe ig;
  Channel c;
  pid_t pid = fork_init(c, [&] {
    InitEnd end = c.end();
    end.wait_go();
    int dir = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (end.send_out_dir(dir) != 0) raw::exit_group(3);
    raw::close(dir);
    int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (end.send_proxy_listener(listener) != 0) raw::exit_group(4);
    raw::close(listener);
    end.wait_start();
    int fake_seccomp_listener = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    end.send_listener(fake_seccomp_listener);  // closes it
    std::uint64_t sets[5] = {1, 2, 3, 4, 5};
    end.report_started(sets, 1234567890123456789LL);
    struct rusage ru;
    std::memset(&ru, 0, sizeof ru);
    ru.ru_maxrss = 1234;
    end.report_program_status(42 << 8, ru);
  });
  c.chan.close_init_ends();
  c.chan.send_go();
  c.chan.send_start();
  ChildMsg m;
  REQUIRE(next_report(c.chan.reports(), m) == ReportRead::kReport);
  CHECK(m.kind == ChildMsg::kStarted);
  CHECK(m.caps.read == 1);
  CHECK(m.caps.sets[0] == 1);
  CHECK(m.caps.sets[4] == 5);
  CHECK(m.caps.exec_ns == 1234567890123456789LL);
  REQUIRE(next_report(c.chan.reports(), m) == ReportRead::kReport);
  CHECK(m.kind == ChildMsg::kProgramStatus);
  CHECK(m.wait_status == (42 << 8));
  CHECK(m.usage.ru_maxrss == 1234);
  CHECK(exit_code(pid) == 0);
  // Everything init sent waited in its socket.
  UniqueFd out = c.chan.recv_out_dir();
  REQUIRE(out.ok());
  CHECK(fd_target(out.get()) == "/");
  UniqueFd proxy_sock(c.chan.take_proxy_socket());
  UniqueFd proxy(recv_one(proxy_sock.get()));
  int type = 0;
  socklen_t len = sizeof type;
  CHECK(::getsockopt(proxy.get(), SOL_SOCKET, SO_TYPE, &type, &len) == 0);
  CHECK(type == SOCK_STREAM);
  UniqueFd lsock(c.chan.take_listener_socket());
  UniqueFd listener(recv_one(lsock.get()));
  CHECK(fd_target(listener.get()) == "/dev/null");
  // init's end is closed: EOF follows the last report.
  UniqueFd reports(c.chan.take_reports());
  CHECK(read_init_report(reports.get(), m) == ReportRead::kEnd);
}

TEST_CASE("handshake: a setup error is one whole message, its message cut to fit, and init exits 125") {
  IgnoreSigpipe ig;
  Channel c;
  std::string long_message(1000, 'x');
  pid_t pid = fork_init(c, [&] {
    InitEnd end = c.end();
    end.wait_go();
    end.report_setup_error("systemd-scope", EACCES, long_message.c_str());
  });
  c.chan.close_init_ends();
  c.chan.send_go();
  ChildMsg m;
  REQUIRE(next_report(c.chan.reports(), m) == ReportRead::kReport);
  CHECK(m.kind == ChildMsg::kSetupError);
  CHECK(m.err == EACCES);
  CHECK(std::string(m.stage) == "systemd-scope");  // a name of kStages; the field holds the longest
  CHECK(std::strlen(m.message) == sizeof m.message - 1);
  CHECK(exit_code(pid) == 125);
  CHECK(next_report(c.chan.reports(), m) == ReportRead::kEnd);
}

TEST_CASE("handshake: a supervisor gone before go, or a wrong start byte, ends init with 125") {
  IgnoreSigpipe ig;
  {
    Channel c;
    pid_t pid = fork_init(c, [&] { c.end().wait_go(); });
    c.chan.close_init_ends();
    { InitChannel drop = std::move(c.chan); }  // every supervisor end closed
    CHECK(exit_code(pid) == 125);
  }
  {
    Channel c;
    pid_t pid = fork_init(c, [&] {
      InitEnd end = c.end();
      end.wait_go();
      end.wait_start();
    });
    c.chan.close_init_ends();
    c.chan.send_go();
    c.chan.send_go();  // 'g' where 's' belongs
    CHECK(exit_code(pid) == 125);
  }
  {
    // supervisor_gone: the sync pipe's writer hung up.
    Channel c;
    pid_t pid = fork_init(c, [&] {
      InitEnd end = c.end();
      end.wait_go();
      for (int i = 0; i < 500 && !end.supervisor_gone(); ++i) ::usleep(10000);
      raw::exit_group(end.supervisor_gone() ? 7 : 8);
    });
    c.chan.close_init_ends();
    c.chan.send_go();
    { InitChannel drop = std::move(c.chan); }
    CHECK(exit_code(pid) == 7);
  }
}

TEST_CASE("handshake: init dead mid-way: EOF, a short message, a start into the void") {
  IgnoreSigpipe ig;
  {
    Channel c;
    pid_t pid = fork_init(c, [&] {
      c.end().wait_go();
      ChildMsg half;
      half.kind = ChildMsg::kProgramStatus;
      raw::write(c.chan.init_reports(), &half, 10);  // dies in the middle of a report
    });
    c.chan.close_init_ends();
    c.chan.send_go();
    CHECK(exit_code(pid) == 0);
    ChildMsg m;
    CHECK(next_report(c.chan.reports(), m) == ReportRead::kBroken);
    c.chan.send_start();  // EPIPE: logged, nothing else
    CHECK(read_init_report(c.chan.reports(), m) == ReportRead::kEnd);
    CHECK_FALSE(c.chan.recv_out_dir().ok());  // never sent
  }
  {
    // A report not there yet is kAgain on the supervisor's non-blocking pipe.
    Channel c;
    ::fcntl(c.chan.reports(), F_SETFL, O_NONBLOCK);
    ChildMsg m;
    CHECK(read_init_report(c.chan.reports(), m) == ReportRead::kAgain);
  }
}

TEST_CASE("handshake: init's wait for go goes on across a signal (EINTR)") {
  IgnoreSigpipe ig;
  Channel c;
  pid_t pid = fork_init(c, [&] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;  // no SA_RESTART: the blocked read returns EINTR
    ::sigaction(SIGUSR1, &sa, nullptr);
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, SIGUSR1);
    ::sigprocmask(SIG_UNBLOCK, &unblock, nullptr);
    InitEnd end = c.end();
    end.wait_go();
    end.report_started(nullptr, 0);
  });
  c.chan.close_init_ends();
  for (int i = 0; i < 5; ++i) {
    ::usleep(20000);
    ::kill(pid, SIGUSR1);
  }
  c.chan.send_go();
  ChildMsg m;
  REQUIRE(next_report(c.chan.reports(), m) == ReportRead::kReport);
  CHECK(m.kind == ChildMsg::kStarted);
  CHECK(m.caps.read == 0);
  CHECK(exit_code(pid) == 0);
}

TEST_CASE("handshake: a shared init's wait ends with its report, or kills it when time runs out") {
  IgnoreSigpipe ig;
  {
    Channel c;
    pid_t pid = fork_init(c, [&] {
      InitEnd end = c.end();
      end.wait_go();
      end.wait_start();  // "gs" came as one write
      end.report_started(nullptr, 0);
      ::pause();
    });
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    REQUIRE(pidfd.ok());
    c.chan.close_init_ends();
    CHECK_FALSE(c.chan.go_and_wait_shared_init(pidfd.get(), 5000));
    ChildMsg m;
    REQUIRE(read_init_report(c.chan.reports(), m) == ReportRead::kReport);
    CHECK(m.kind == ChildMsg::kStarted);
    ::kill(pid, SIGKILL);
    exit_code(pid);
  }
  {
    Channel c;
    pid_t pid = fork_init(c, [&] { ::pause(); });  // never reports
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    REQUIRE(pidfd.ok());
    c.chan.close_init_ends();
    CHECK(c.chan.go_and_wait_shared_init(pidfd.get(), 50));  // timed out: killed
    CHECK(exit_code(pid) == 128 + SIGKILL);
  }
}

TEST_CASE("InitFd closes with a raw call, once") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  {
    InitFd r(p[0]);
    CHECK(r.ok());
    int w = InitFd(p[1]).release();
    CHECK(w == p[1]);
    ::close(w);
  }
  CHECK(::fcntl(p[0], F_GETFD) == -1);
  CHECK(errno == EBADF);
}
