// The fork server (runtime/server/fork_server.hpp) over a socket pair: serve_forks runs in a forked
// child of the test, with a run() of the test in place of sbx_main, and ForkServer::spawn asks it
// for workers, which must be the test's own children.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/server/fork_server.hpp"

using namespace sbx;
using namespace sbx::mcp;

namespace {

// The worker's run(): reads its stdin, writes what it was given and where it runs, exits 7.
int report(std::vector<std::string>& argv) {
  std::string out;
  for (auto& a : argv) out += a + "|";
  char buf[256];
  ssize_t n = ::read(0, buf, sizeof buf);
  out += std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  out += "|ppid=" + std::to_string(::getppid()) + "|pgid-is-pid=" + std::to_string(::getpgrp() == ::getpid());
  (void)!::write(1, out.data(), out.size());
  return 7;
}

// A fork server child of the test on one end of a socket pair; the other end in a ForkServer.
struct Rig {
  pid_t server_pid = -1;
  UniqueFd ours;
  explicit Rig(int (*run)(std::vector<std::string>&) = report) {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    server_pid = ::fork();
    REQUIRE(server_pid >= 0);
    if (server_pid == 0) {
      ::close(sv[0]);
      ::_exit(serve_forks(sv[1], run));
    }
    ::close(sv[1]);
    ours = UniqueFd(sv[0]);
  }
  // The fork server's exit status once it has ended.
  int wait_status() {
    int ws = 0;
    REQUIRE(::waitpid(server_pid, &ws, 0) == server_pid);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  }
};

UniqueFd memfd_with(const std::string& data) {
  UniqueFd fd(::memfd_create("fork-server-test", MFD_CLOEXEC));
  (void)!::write(fd.get(), data.data(), data.size());
  ::lseek(fd.get(), 0, SEEK_SET);
  return fd;
}

std::string read_all(int fd) {
  ::lseek(fd, 0, SEEK_SET);
  std::string s;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<std::size_t>(n));
  return s;
}

}  // namespace

TEST_CASE("fork server: a worker is the caller's child, with its stdin, stdout, argv and process group") {
  Rig rig;
  auto attached = ForkServer::attach(std::move(rig.ours), rig.server_pid);  // reaped at its end
  REQUIRE(attached);
  ForkServer& forks = *attached;
  UniqueFd in = memfd_with("the job"), out(::memfd_create("out", MFD_CLOEXEC));
  auto w = forks.spawn({"sbx", "mcp-worker", "a b"}, in.get(), out.get(), SIGTERM);
  REQUIRE(w);
  CHECK(*w > 0);
  int ws = 0;
  REQUIRE(::waitpid(*w, &ws, 0) == *w);  // CLONE_PARENT: ours to reap, not the fork server's
  CHECK(WIFEXITED(ws));
  CHECK(WEXITSTATUS(ws) == 7);
  CHECK(read_all(out.get()) == "sbx|mcp-worker|a b|the job|ppid=" + std::to_string(::getpid()) + "|pgid-is-pid=1");
  // A second worker from the same fork server.
  UniqueFd in2 = memfd_with("second"), out2(::memfd_create("out", MFD_CLOEXEC));
  auto w2 = forks.spawn({"x"}, in2.get(), out2.get(), SIGTERM);
  REQUIRE(w2);
  REQUIRE(::waitpid(*w2, &ws, 0) == *w2);
  CHECK(read_all(out2.get()).rfind("x|second|", 0) == 0);
  CHECK(forks.alive());
}

TEST_CASE("fork server: a request too large is refused without ending it; EOF ends it with 0") {
  Rig rig;
  pid_t pid = rig.server_pid;
  {
    auto attached = ForkServer::attach(std::move(rig.ours), -1);
    REQUIRE(attached);
    ForkServer& forks = *attached;
    UniqueFd in = memfd_with(""), out(::memfd_create("out", MFD_CLOEXEC));
    auto big = forks.spawn({"sbx", std::string(kMaxForkRequest, 'x')}, in.get(), out.get(), SIGTERM);
    REQUIRE(!big);
    CHECK(big.error().err == E2BIG);
    CHECK(forks.alive());
  }  // the socket closed: the fork server sees EOF
  int ws = 0;
  REQUIRE(::waitpid(pid, &ws, 0) == pid);
  CHECK(WIFEXITED(ws));
  CHECK(WEXITSTATUS(ws) == 0);
}

TEST_CASE("fork server: a message that breaks the protocol ends it, and it forks nothing") {
  Rig rig;
  SUBCASE("no fds") {
    ForkRequest head;
    head.pdeathsig = SIGTERM;
    head.argc = 1;
    std::string msg(reinterpret_cast<const char*>(&head), sizeof head);
    msg += std::string("sbx") + '\0';
    REQUIRE(::send(rig.ours.get(), msg.data(), msg.size(), 0) == static_cast<ssize_t>(msg.size()));
  }
  SUBCASE("a short header") { REQUIRE(::send(rig.ours.get(), "abc", 3, 0) == 3); }
  CHECK(rig.wait_status() == 1);
}

TEST_CASE("fork server: one that has ended is an error, and the caller execs the worker itself") {
  Rig rig;
  pid_t pid = rig.server_pid;
  auto attached = ForkServer::attach(std::move(rig.ours), -1);
  REQUIRE(attached);
  ForkServer& forks = *attached;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  UniqueFd in = memfd_with(""), out(::memfd_create("out", MFD_CLOEXEC));
  auto w = forks.spawn({"sbx"}, in.get(), out.get(), SIGTERM);
  REQUIRE(!w);
  CHECK(!forks.alive());
  auto again = forks.spawn({"sbx"}, in.get(), out.get(), SIGTERM);
  REQUIRE(!again);
}

namespace {
// This process's child started last (its children's start times, /proc/self/task/*/children).
pid_t newest_child() {
  std::string kids;
  if (FILE* f = std::fopen(("/proc/self/task/" + std::to_string(::gettid()) + "/children").c_str(), "r")) {
    char buf[4096];
    std::size_t n = std::fread(buf, 1, sizeof buf, f);
    kids.assign(buf, n);
    std::fclose(f);
  }
  pid_t best = -1;
  unsigned long long best_start = 0;
  std::size_t pos = 0;
  while (pos < kids.size()) {
    std::size_t end = kids.find(' ', pos);
    if (end == std::string::npos) end = kids.size();
    if (end > pos) {
      pid_t pid = static_cast<pid_t>(std::stol(kids.substr(pos, end - pos)));
      std::string stat;
      if (FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r")) {
        char buf[1024];
        stat.assign(buf, std::fread(buf, 1, sizeof buf, f));
        std::fclose(f);
      }
      // Field 22, starttime, counted from the one after the command's closing parenthesis (3).
      std::size_t at = stat.rfind(')');
      unsigned long long start = 0;
      if (at != std::string::npos) {
        std::size_t field = 2, i = at + 1;
        while (i < stat.size() && field < 22) {
          if (stat[i] == ' ') ++field;
          ++i;
        }
        start = std::strtoull(stat.c_str() + i, nullptr, 10);
      }
      if (best < 0 || start >= best_start) best = pid, best_start = start;
    }
    pos = end + 1;
  }
  return best;
}

// A run() that leaves a mark: it must never run for a worker whose pid the server was not told.
int mark(std::vector<std::string>& argv) {
  int fd = ::open(argv.at(1).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  return 0;
}
}  // namespace

TEST_CASE("fork server: a worker whose pid could not be sent never runs") {
  Rig rig(mark);
  char dir[] = "/tmp/sbx-fork-server-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  std::string marker = std::string(dir) + "/ran";
  UniqueFd in = memfd_with(""), out(::memfd_create("out", MFD_CLOEXEC));
  // The request is sent and the socket closed before the answer: the fork server clones, its
  // answer fails, and the child finds no byte on its gate. Its ready message is read first (the
  // request is then what it reads next), and it is stopped until the socket is closed, so that no
  // answer can get through.
  std::int32_t ready = 0;
  REQUIRE(::recv(rig.ours.get(), &ready, sizeof ready, 0) == static_cast<ssize_t>(sizeof ready));
  REQUIRE(ready == kForkReady);
  ::kill(rig.server_pid, SIGSTOP);
  int stopped = 0;
  REQUIRE(::waitpid(rig.server_pid, &stopped, WUNTRACED) == rig.server_pid);
  REQUIRE(WIFSTOPPED(stopped));
  REQUIRE(send_fork_request(rig.ours.get(), {"sbx", marker}, in.get(), out.get(), SIGTERM));
  rig.ours.reset();
  ::kill(rig.server_pid, SIGCONT);
  CHECK(rig.wait_status() == 1);  // its answer could not be sent
  // The clone, our child (CLONE_PARENT), ends without running: reaped here, and no mark.
  pid_t clone = newest_child();
  REQUIRE(clone > 0);
  int ws = 0;
  REQUIRE(::waitpid(clone, &ws, 0) == clone);
  CHECK(WIFEXITED(ws));
  CHECK(WEXITSTATUS(ws) == 0);
  struct stat st;
  CHECK(::stat(marker.c_str(), &st) != 0);
  ::unlink(marker.c_str());
  ::rmdir(dir);
}
