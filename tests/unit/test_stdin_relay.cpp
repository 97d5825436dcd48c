#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/output_relay.hpp"
#include "runtime/linux/stdin_relay.hpp"

using namespace sbx;

TEST_CASE("plan_stdin: the caller's stdin decides the program's") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  UniqueFd r(p[0]), w(p[1]);
  auto pipe_plan = plan_stdin(false, false, r.get());
  REQUIRE(pipe_plan.ok());
  CHECK(pipe_plan->mode == StdinMode::pipe);
  CHECK(pipe_plan->source == "pipe");
  CHECK(pipe_plan->relay);

  UniqueFd null(::open("/dev/null", O_RDONLY));
  auto null_plan = plan_stdin(true, false, null.get());  // -i from /dev/null: nothing to relay
  REQUIRE(null_plan.ok());
  CHECK(null_plan->mode == StdinMode::null);
  CHECK(null_plan->source == "null");

  UniqueFd file(::open("/proc/self/exe", O_RDONLY));
  CHECK(plan_stdin(false, false, file.get())->source == "file");

  int s[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, s) == 0);
  UniqueFd s0(s[0]), s1(s[1]);
  CHECK(plan_stdin(false, false, s0.get())->source == "socket");

  // An epoll fd never polls readable: relayed, the run waited for its wall limit. Like /dev/null.
  UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  auto anon = plan_stdin(true, false, ep.get());
  REQUIRE(anon.ok());
  CHECK(anon->mode == StdinMode::null);
  CHECK_FALSE(anon->relay);
  CHECK(anon->source == "anonymous inode");
  UniqueFd ev(::eventfd(0, EFD_CLOEXEC));
  CHECK(plan_stdin(false, false, ev.get())->mode == StdinMode::null);
  CHECK(plan_stdin(true, true, ev.get()).error().message ==
        "-t/--tty needs a terminal on stdin (stdin is an anonymous inode)");

  auto closed = plan_stdin(false, false, 1000);
  REQUIRE(closed.ok());
  CHECK(closed->mode == StdinMode::null);
  CHECK(closed->source == "closed");
}

TEST_CASE("plan_stdin: -t needs a terminal") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  UniqueFd r(p[0]), w(p[1]);
  auto plan = plan_stdin(true, true, r.get());
  REQUIRE(!plan.ok());
  CHECK(plan.error().stage == sbx::Stage("usage"));
  CHECK(plan.error().message == "-t/--tty needs a terminal on stdin (stdin is a pipe)");
  CHECK(plan_stdin(false, true, 1000).error().message == "-t/--tty needs a terminal on stdin (stdin is closed)");
}

TEST_CASE("plan_stdin: a terminal is never passed, relayed only with -i") {
  int m = ::posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(m >= 0);
  UniqueFd master(m);
  REQUIRE(::grantpt(m) == 0);
  REQUIRE(::unlockpt(m) == 0);
  UniqueFd slave(::open(::ptsname(m), O_RDWR | O_NOCTTY));
  REQUIRE(slave.get() >= 0);
  auto plain = plan_stdin(false, false, slave.get());
  CHECK(plain->mode == StdinMode::null);
  CHECK(plain->source == "terminal");
  auto i = plan_stdin(true, false, slave.get());
  CHECK(i->mode == StdinMode::pipe);
  auto t = plan_stdin(false, true, slave.get());
  CHECK(t->mode == StdinMode::pty);
  CHECK(!t->relay);
  auto it = plan_stdin(true, true, slave.get());
  CHECK(it->mode == StdinMode::pty);
  CHECK(it->relay);
}

// The stdin relay is an OutputRelay toward a pipe sbx made (stdin_relay.hpp): the program must
// see EOF once the caller's input has ended and all of it is delivered, and what the caller
// still holds when the program stops reading is the caller's, not a loss.
namespace {
struct PipeFds {
  int r = -1, w = -1;
  PipeFds() {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    r = p[0];
    w = p[1];
  }
  ~PipeFds() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
  }
};
}  // namespace

TEST_CASE("stdin relay: the caller's EOF reaches the program once everything is delivered") {
  PipeFds caller, program;
  ::fcntl(caller.r, F_SETFL, O_NONBLOCK);
  OutputRelay relay(caller.r, OutputSink::owned_nonblocking(program.w), std::nullopt, OutputRelay::Unread::not_taken);
  caller.r = program.w = -1;  // the relay owns both
  REQUIRE(::write(caller.w, "hello", 5) == 5);
  ::close(caller.w);
  caller.w = -1;
  for (int i = 0; i < 4 && relay.source_open(); ++i) relay.on_src_ready();
  CHECK_FALSE(relay.active());
  CHECK(relay.sink_poll_fd() == -1);  // the write end is closed: the program reads EOF
  char buf[16];
  CHECK(::read(program.r, buf, sizeof buf) == 5);
  CHECK(::read(program.r, buf, sizeof buf) == 0);
  StreamStats st = relay.finish();
  CHECK(st.source_eof);
  CHECK(st.bytes == 5);
  CHECK(st.undelivered_bytes == 0);
}

TEST_CASE("stdin relay: a program that closes its stdin stops the relay; the caller's unread bytes are not counted") {
  PipeFds caller, program;
  ::fcntl(caller.r, F_SETFL, O_NONBLOCK);
  OutputRelay relay(caller.r, OutputSink::owned_nonblocking(program.w), std::nullopt, OutputRelay::Unread::not_taken);
  caller.r = program.w = -1;
  ::close(program.r);  // the program closes its stdin
  program.r = -1;
  REQUIRE(::write(caller.w, "0123456789", 10) == 10);
  struct pollfd pfd = {relay.sink_poll_fd(), 0, 0};
  REQUIRE(::poll(&pfd, 1, 0) == 1);
  relay.on_sink_ready(pfd.revents);  // POLLERR: no reader
  CHECK_FALSE(relay.source_open());
  StreamStats st = relay.finish();
  CHECK(st.reader_closed);
  CHECK_FALSE(st.source_eof);
  CHECK(st.undelivered_bytes == 0);  // the ten bytes were never taken from the caller
}

TEST_CASE("relay: a socket source is read with MSG_DONTWAIT; a source adopted late is read once") {
  int s[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s) == 0);  // blocking, as a caller's may be
  PipeFds program;
  OutputRelay relay(-1, OutputSink::owned_nonblocking(program.w), std::nullopt, OutputRelay::Unread::not_taken);
  program.w = -1;
  CHECK_FALSE(relay.source_open());
  relay.adopt_source(s[0]);
  CHECK(relay.source_open());
  int extra = ::dup(s[1]);
  relay.adopt_source(extra);  // a second source is closed, not read
  CHECK(::fcntl(extra, F_GETFD) == -1);
  relay.on_src_ready();  // nothing there: returns at once instead of waiting in read()
  CHECK(relay.source_open());
  REQUIRE(::write(s[1], "abc", 3) == 3);
  ::close(s[1]);
  for (int i = 0; i < 4 && relay.source_open(); ++i) relay.on_src_ready();
  char buf[8];
  CHECK(::read(program.r, buf, sizeof buf) == 3);
  StreamStats st = relay.finish();
  CHECK(st.source_eof);
  CHECK(st.bytes == 3);
}

TEST_CASE("stdin: a shell at a terminal without -i or -t gets the hint to use -it") {
  StdinPlan at_terminal;
  at_terminal.source = "terminal";  // plan_stdin(false, false) at a terminal: nothing relayed
  CHECK(terminal_unused_hint({"bash"}, at_terminal).find("sbx run -it -- bash") != std::string::npos);
  CHECK(terminal_unused_hint({"/usr/bin/python3", "-q"}, at_terminal).find("-it -- python3") != std::string::npos);
  CHECK(terminal_unused_hint({"bash", "script.sh"}, at_terminal).empty());  // runs a script
  CHECK(terminal_unused_hint({"sh", "-c", "echo hi"}, at_terminal).empty());
  CHECK(terminal_unused_hint({"ls"}, at_terminal).empty());
  StdinPlan relayed = at_terminal;
  relayed.relay = true;
  relayed.mode = StdinMode::pipe;
  CHECK(terminal_unused_hint({"bash"}, relayed).empty());  // -i
  StdinPlan piped;
  piped.source = "pipe";
  CHECK(terminal_unused_hint({"bash"}, piped).empty());
}
