#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/stdin_relay.hpp"

using namespace sbx;

namespace {
// An fd that lives for one check.
struct Fd {
  int fd;
  ~Fd() { if (fd >= 0) ::close(fd); }
};
}  // namespace

TEST_CASE("plan_stdin: the caller's stdin decides the program's") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  Fd r{p[0]}, w{p[1]};
  auto pipe_plan = plan_stdin(false, false, r.fd);
  REQUIRE(pipe_plan.ok());
  CHECK(pipe_plan->mode == StdinMode::pipe);
  CHECK(pipe_plan->source == "pipe");
  CHECK(pipe_plan->relay);

  Fd null{::open("/dev/null", O_RDONLY)};
  auto null_plan = plan_stdin(true, false, null.fd);  // -i from /dev/null: nothing to relay
  REQUIRE(null_plan.ok());
  CHECK(null_plan->mode == StdinMode::null);
  CHECK(null_plan->source == "null");

  Fd file{::open("/proc/self/exe", O_RDONLY)};
  CHECK(plan_stdin(false, false, file.fd)->source == "file");

  int s[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, s) == 0);
  Fd s0{s[0]}, s1{s[1]};
  CHECK(plan_stdin(false, false, s0.fd)->source == "socket");

  auto closed = plan_stdin(false, false, 1000);
  REQUIRE(closed.ok());
  CHECK(closed->mode == StdinMode::null);
  CHECK(closed->source == "closed");
}

TEST_CASE("plan_stdin: -t needs a terminal") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  Fd r{p[0]}, w{p[1]};
  auto plan = plan_stdin(true, true, r.fd);
  REQUIRE(!plan.ok());
  CHECK(plan.error().stage == "usage");
  CHECK(plan.error().message == "-t/--tty needs a terminal on stdin (stdin is a pipe)");
  CHECK(plan_stdin(false, true, 1000).error().message == "-t/--tty needs a terminal on stdin (stdin is closed)");
}

TEST_CASE("plan_stdin: a terminal is never passed, relayed only with -i") {
  int m = ::posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(m >= 0);
  Fd master{m};
  REQUIRE(::grantpt(m) == 0);
  REQUIRE(::unlockpt(m) == 0);
  Fd slave{::open(::ptsname(m), O_RDWR | O_NOCTTY)};
  REQUIRE(slave.fd >= 0);
  auto plain = plan_stdin(false, false, slave.fd);
  CHECK(plain->mode == StdinMode::null);
  CHECK(plain->source == "terminal");
  auto i = plan_stdin(true, false, slave.fd);
  CHECK(i->mode == StdinMode::pipe);
  auto t = plan_stdin(false, true, slave.fd);
  CHECK(t->mode == StdinMode::pty);
  CHECK(!t->relay);
  auto it = plan_stdin(true, true, slave.fd);
  CHECK(it->mode == StdinMode::pty);
  CHECK(it->relay);
}
