// The supervisor's relays and its fail-closed paths, driven without a sandbox: a forked child
// stands in for init, pipes for the program's streams and for sbx's own stdout.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "runtime/launch/outcome.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/output_relay.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/signals.hpp"
#include "runtime/launch/supervisor.hpp"

using namespace sbx;

namespace {

struct Fds {
  int r = -1, w = -1;
  Fds() {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    r = p[0];
    w = p[1];
  }
  ~Fds() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
  }
};

void set_nonblock(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Writes until the pipe is full (non-blocking); returns what went in.
std::string fill(int fd, char c) {
  set_nonblock(fd);
  std::string chunk(4096, c), all;
  while (::write(fd, chunk.data(), chunk.size()) == static_cast<ssize_t>(chunk.size())) all += chunk;
  return all;
}

std::string drain(int fd) {
  set_nonblock(fd);
  std::string all;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) all.append(buf, static_cast<std::size_t>(n));
  return all;
}

// A child that waits to be killed, as a stand-in for the sandbox's init.
struct FakeInit {
  pid_t pid = -1;
  int pidfd = -1;
  bool reaped = false;  // by supervise()
  FakeInit() {
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      for (;;) ::pause();
    }
    pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    REQUIRE(pidfd >= 0);
  }
  ~FakeInit() {
    if (!reaped) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    ::close(pidfd);
  }
};

std::int64_t mono_ms() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1'000'000;
}

}  // namespace

TEST_CASE("relay: a stalled reader stops the relay reading (backpressure), never blocks it, and counts exactly") {
  Fds prog, reader;
  set_nonblock(prog.r);
  std::string written = fill(prog.w, 'a');  // a full pipe: the program would block now
  OutputRelay relay(prog.r, OutputSink::open(reader.w), std::nullopt);
  prog.r = -1;                                            // the relay owns it
  CHECK((::fcntl(reader.w, F_GETFL) & O_NONBLOCK) == 0);  // the shared description is untouched
  std::int64_t t0 = mono_ms();
  for (int i = 0; i < 64 && relay.src_poll_fd() >= 0; ++i) {
    relay.on_src_ready();
    written += fill(prog.w, 'b');
  }
  CHECK(mono_ms() - t0 < 2000);
  CHECK(relay.src_poll_fd() == -1);  // its buffer and the reader's pipe are full: stop reading
  CHECK(relay.pending());
  // The program ends, the reader wakes up: everything arrives, in order, counted and hashed.
  ::close(prog.w);
  prog.w = -1;
  std::string got;
  for (int i = 0; i < 10000 && relay.active(); ++i) {
    got += drain(reader.r);
    relay.on_sink_ready(POLLOUT);
    if (relay.src_poll_fd() >= 0) relay.on_src_ready();
  }
  got += drain(reader.r);
  StreamStats st = relay.finish();
  CHECK(got.size() == written.size());
  CHECK(got == written);
  CHECK(st.bytes == got.size());
  CHECK(st.sha256 == sha256_hex(got));
  CHECK(st.undelivered_bytes == 0);
  CHECK_FALSE(st.reader_closed);
}

TEST_CASE("relay: a reader that goes away closes the program's pipe (EPIPE for the program)") {
  SignalDispositionGuard no_sigpipe(SIGPIPE, SIG_IGN);
  Fds prog, reader;
  set_nonblock(prog.r);
  OutputRelay relay(prog.r, OutputSink::open(reader.w), std::nullopt);
  prog.r = -1;  // the relay owns it
  REQUIRE(::write(prog.w, "hello\n", 6) == 6);
  ::close(reader.r);
  reader.r = -1;
  relay.on_src_ready();
  CHECK_FALSE(relay.source_open());
  StreamStats st = relay.finish();
  CHECK(st.bytes == 0);
  CHECK(st.undelivered_bytes == 6);
  errno = 0;
  CHECK(::write(prog.w, "x", 1) == -1);
  CHECK(errno == EPIPE);
}

TEST_CASE("relay: output limit: bytes, dropped and truncated are exact") {
  Fds prog, reader;
  set_nonblock(prog.r);
  OutputRelay relay(prog.r, OutputSink::open(reader.w), 100);
  prog.r = -1;
  std::string data(300, 'z');
  REQUIRE(::write(prog.w, data.data(), data.size()) == 300);
  ::close(prog.w);
  prog.w = -1;
  while (relay.source_open()) relay.on_src_ready();
  StreamStats st = relay.finish();
  CHECK(st.bytes == 100);
  CHECK(st.dropped_bytes == 200);
  CHECK(st.truncated);
  CHECK(drain(reader.r) == data.substr(0, 100));
}

TEST_CASE("relay sink: a pipe sbx cannot reopen is written under a time guard, never blocking") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root to make a pipe another user cannot reopen");
    return;
  }
  Fds reader;
  fill(reader.w, 'q');
  drain(reader.r);  // empty again
  int fl = ::fcntl(reader.w, F_GETFL);
  ::fcntl(reader.w, F_SETFL, fl & ~O_NONBLOCK);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // As another user, /proc/self/fd/N of root's pipe cannot be opened (EACCES): guarded mode.
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(10);
    OutputSink sink = OutputSink::open(reader.w);
    if (sink.mode() != OutputSink::Mode::guarded) ::_exit(11);
    std::string big(1 << 20, 'g');
    std::int64_t t0 = mono_ms();
    ssize_t w = sink.write_some(big.data(), big.size());  // room for 64 KiB only: blocks, is cut
    std::int64_t took = mono_ms() - t0;
    if (w <= 0 || w >= static_cast<ssize_t>(big.size())) ::_exit(12);
    if (took > 1000) ::_exit(13);
    if (sink.write_some(big.data(), big.size()) != 0) ::_exit(14);  // full: poll says no room
    ::_exit(0);
  }
  int ws = 0;
  REQUIRE(::waitpid(pid, &ws, 0) == pid);
  CHECK(WIFEXITED(ws));
  CHECK(WEXITSTATUS(ws) == 0);
}

TEST_CASE("supervise: a wall-time limit whose timer cannot be armed ends the run (fail closed)") {
  FakeInit init;
  SuperviseInput in;
  in.pid = init.pid;
  in.pidfd = init.pidfd;
  in.timeout_ms = 60'000;
  in.out_dst = in.err_dst = -1;
  in.arm_timer = [](std::int64_t) -> Result<int> { return make_error("timer", "timerfd_create", EMFILE); };
  std::int64_t t0 = mono_ms();
  SuperviseResult r = supervise(in);
  CHECK(mono_ms() - t0 < 5000);  // the sandbox was killed, not left to run without its limit
  REQUIRE(r.error);
  CHECK(r.error->stage == sbx::Stage("timeout"));
  CHECK(r.error->err == EMFILE);
  CHECK(r.error->message.find("wall-time limit") != std::string::npos);
  CHECK(WIFSIGNALED(r.init_wait_status));
  Outcome o = outcome_from_supervision(r, 2000);
  CHECK(o.status == RunStatus::setup_error);
  CHECK(exit_status_for(o) == 125);
  init.reaped = !r.init_pending;
}

TEST_CASE("supervise: a CPU-time budget that cannot be read ends the run (fail closed)") {
  FakeInit init;
  SuperviseInput in;
  in.pid = init.pid;
  in.pidfd = init.pidfd;
  in.out_dst = in.err_dst = -1;
  in.cpu_budget_ms = 20;
  in.max_cpus = 1;
  in.cpu_used_us = []() -> Result<std::int64_t> { return make_error("cgroup", "cannot read cpu.stat", ENOENT); };
  SuperviseResult r = supervise(in);
  REQUIRE(r.error);
  CHECK(r.error->stage == sbx::Stage("cpu_time"));
  CHECK(r.error->err == ENOENT);
  CHECK_FALSE(r.cpu_exceeded);
  CHECK(outcome_from_supervision(r, 2000).status == RunStatus::setup_error);
  init.reaped = !r.init_pending;
}

TEST_CASE("outcome: who ended a run after a forwarded signal") {
  SuperviseResult s;
  s.forwarded_signal = SIGTERM;
  s.killed_after_grace = true;
  s.init_wait_status = SIGKILL;  // WTERMSIG == SIGKILL
  Outcome o = outcome_from_supervision(s, 2000);
  CHECK(o.status == RunStatus::signaled);
  CHECK(o.signal == SIGKILL);
  CHECK(exit_status_for(o) == 137);
  CHECK(o.reason.find("killed by sbx") != std::string::npos);
  CHECK(o.reason.find("SIGTERM") != std::string::npos);
  CHECK(o.reason.find("2000 ms") != std::string::npos);
  s.second_signal = SIGINT;
  CHECK(outcome_from_supervision(s, 2000).reason.find("second signal (SIGINT)") != std::string::npos);

  SuperviseResult own;  // the program ended by the forwarded signal itself
  own.forwarded_signal = SIGINT;
  own.program_wait_status = SIGINT;
  Outcome o2 = outcome_from_supervision(own, 2000);
  CHECK(exit_status_for(o2) == 130);
  CHECK(o2.reason.find("SIGINT") != std::string::npos);
  CHECK(o2.reason.find("killed by sbx") == std::string::npos);
}

TEST_CASE("signal guards restore the mask and the disposition") {
  sigset_t before, during, after;
  ::sigprocmask(SIG_BLOCK, nullptr, &before);
  struct sigaction pipe_before;
  ::sigaction(SIGPIPE, nullptr, &pipe_before);
  {
    sigset_t usr;
    sigemptyset(&usr);
    sigaddset(&usr, SIGUSR2);
    SignalMaskGuard mask(SIG_BLOCK, usr);
    SignalDispositionGuard pipe(SIGPIPE, SIG_IGN);
    ::sigprocmask(SIG_BLOCK, nullptr, &during);
    CHECK(sigismember(&during, SIGUSR2) == 1);
    struct sigaction now;
    ::sigaction(SIGPIPE, nullptr, &now);
    bool ignored = now.sa_handler == SIG_IGN;
    CHECK(ignored);
  }
  ::sigprocmask(SIG_BLOCK, nullptr, &after);
  CHECK(sigismember(&after, SIGUSR2) == sigismember(&before, SIGUSR2));
  struct sigaction pipe_after;
  ::sigaction(SIGPIPE, nullptr, &pipe_after);
  bool same = pipe_after.sa_handler == pipe_before.sa_handler;
  CHECK(same);
}

// supervise() as a whole, its fake init alive throughout, its output toward a reader that never
// reads: the loop must keep its limits although a write would block.
namespace {
struct StalledRun {
  FakeInit init;
  Fds prog, reader;  // the program's stdout; sbx's stdout, whose reader never reads
  std::string written;
  SuperviseInput in;
  StalledRun() {
    set_nonblock(prog.r);
    in.pid = init.pid;
    in.pidfd = init.pidfd;
    in.out_fd = prog.r;
    prog.r = -1;  // supervise() owns it
    in.out_dst = reader.w;
    in.err_dst = -1;
    fill(reader.w, 'r');  // the reader's pipe is full before the run starts
    ::fcntl(reader.w, F_SETFL, ::fcntl(reader.w, F_GETFL) & ~O_NONBLOCK);  // as sbx's own stdout: blocking
    written = fill(prog.w, 'p');                                           // and so is the program's
  }
};
}  // namespace

TEST_CASE("supervise: the wall-time limit fires although sbx's reader never reads") {
  SignalDispositionGuard no_sigpipe(SIGPIPE, SIG_IGN);
  StalledRun run;
  run.in.timeout_ms = 300;
  std::int64_t t0 = mono_ms();
  SuperviseResult r = supervise(run.in);
  std::int64_t took = mono_ms() - t0;
  CHECK(took >= 250);
  CHECK(took < 5000);  // a blocked write would have held it until the reader read (never)
  CHECK(r.timed_out);
  CHECK(WIFSIGNALED(r.init_wait_status));
  // The limit ends the sandbox through init (kEndSandboxSignal): this fake init takes the
  // signal's default action and dies of it, where sbx's init reports and exits.
  CHECK(WTERMSIG(r.init_wait_status) == kEndSandboxSignal);
  CHECK(r.out.bytes == 0);  // nothing could be delivered
  CHECK(r.out.undelivered_bytes == run.written.size());
  Outcome o = outcome_from_supervision(r, 2000);
  CHECK(o.status == RunStatus::timeout);
  CHECK(exit_status_for(o) == 124);
  run.init.reaped = !r.init_pending;
}

TEST_CASE("supervise: the output limit truncates while the reader never reads, and the run still ends") {
  SignalDispositionGuard no_sigpipe(SIGPIPE, SIG_IGN);
  StalledRun run;
  run.in.timeout_ms = 300;
  run.in.output_limit_bytes = 1000;
  SuperviseResult r = supervise(run.in);
  CHECK(r.timed_out);
  CHECK(r.out.truncated);
  CHECK(r.out.bytes + r.out.undelivered_bytes == 1000);  // within the limit: delivered or counted
  CHECK(r.out.dropped_bytes == run.written.size() - 1000);
  run.init.reaped = !r.init_pending;
}

// A pooled sandbox's supervisor is made before its call (sandbox.cpp, hand_out): the call's
// limits, set on the input after, are the ones the run keeps, not the none it was made with.
TEST_CASE("supervise: a supervisor made before its call keeps the limits the call sets after") {
  SignalDispositionGuard no_sigpipe(SIGPIPE, SIG_IGN);
  StalledRun run;
  std::vector<std::int64_t> armed;  // what the supervisor armed its timers with
  run.in.arm_timer = [&armed](std::int64_t ms) {
    armed.push_back(ms);
    return arm_timerfd(ms);
  };
  PreparedSupervisor prepared(run.in);  // no wall-time limit, no output limit, no CPU budget yet
  run.in.timeout_ms = 300;
  run.in.output_limit_bytes = 1000;
  run.in.cpu_budget_ms = 60'000;
  run.in.max_cpus = 1;
  run.in.cpu_used_us = []() -> Result<std::int64_t> { return 0; };
  run.in.start_ms = mono_ms();
  REQUIRE(armed.empty());  // nothing is armed until the run
  SuperviseResult r = prepared.run();
  REQUIRE(armed.size() >= 2);
  CHECK(armed[0] == 300);     // the wall-time limit
  CHECK(armed[1] == 60'000);  // the CPU budget's first check (one CPU: the whole budget)
  CHECK(r.timed_out);
  CHECK(r.out.truncated);
  CHECK(r.out.dropped_bytes == run.written.size() - 1000);
  run.init.reaped = !r.init_pending;
}

TEST_CASE("supervise: a limit that ran out before a prepared supervisor's run is kept") {
  FakeInit init;
  SuperviseInput in;
  in.pid = init.pid;
  in.pidfd = init.pidfd;
  in.out_dst = in.err_dst = -1;
  PreparedSupervisor prepared(in);
  in.timed_out_before_start = true;
  ::kill(init.pid, SIGKILL);  // as init is when its setup outlived the limit
  SuperviseResult r = prepared.run();
  CHECK(r.timed_out);
  init.reaped = !r.init_pending;
}

TEST_CASE("relay: a limit set after the relay counted bytes holds them to it") {
  SignalDispositionGuard no_sigpipe(SIGPIPE, SIG_IGN);
  Fds prog, reader;
  std::string written = fill(prog.w, 'p');
  ::close(reader.r);  // the reader has gone before the relay is made: it counts the pipe at once
  reader.r = -1;
  set_nonblock(prog.r);
  OutputRelay relay(prog.r, OutputSink::open(reader.w), std::nullopt);
  prog.r = -1;
  relay.set_limit(1000);
  StreamStats st = relay.finish();
  CHECK(st.undelivered_bytes == 1000);
  CHECK(st.dropped_bytes == written.size() - 1000);
  CHECK(st.truncated);
}

TEST_CASE("supervise: a reader that goes away closes the program's pipe; the run goes on to its end") {
  SignalDispositionGuard no_sigpipe(SIGPIPE, SIG_IGN);
  StalledRun run;
  ::close(run.reader.r);  // the reader has gone before anything was delivered
  run.reader.r = -1;
  run.in.timeout_ms = 300;
  SuperviseResult r = supervise(run.in);
  CHECK(r.out.reader_closed);
  CHECK(r.out.bytes == 0);
  errno = 0;
  CHECK(::write(run.prog.w, "x", 1) == -1);  // the program sees EPIPE, not a stalled pipe
  CHECK(errno == EPIPE);
  // Nothing else ended the sandbox: the wall-time limit did, as for any run.
  CHECK(r.timed_out);
  run.init.reaped = !r.init_pending;
}

TEST_CASE("sbx exec's request read keeps a signal pending, and gives up only past the writer's grace") {
  sigset_t fwd;
  sbx::forwarded_signals(&fwd);
  sbx::SignalMaskGuard blocked(SIG_BLOCK, fwd);  // as main() leaves them for sbx exec
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  // The request is complete (end of file) after the signal: read whole, the signal still pending
  // for the run that follows (which records it).
  REQUIRE(::write(fds[1], "{\"a\": 1}", 8) == 8);
  REQUIRE(::raise(SIGTERM) == 0);
  ::close(fds[1]);
  int interrupted = -1;
  auto text = sbx::read_to_end_holding_signals(fds[0], 1024, 1000, &interrupted, "usage", "the exec request");
  ::close(fds[0]);
  REQUIRE(text);
  CHECK(*text == "{\"a\": 1}");
  CHECK(interrupted == 0);
  CHECK(sbx::peek_pending_forwarded_signal() == SIGTERM);
  CHECK(sbx::take_pending_forwarded_signal() == SIGTERM);
  // A writer that never finishes: past the grace, the signal and an error; no request.
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  REQUIRE(::write(fds[1], "{\"a\"", 4) == 4);
  REQUIRE(::raise(SIGINT) == 0);
  auto cut = sbx::read_to_end_holding_signals(fds[0], 1024, 100, &interrupted, "usage", "the exec request");
  CHECK_FALSE(cut);
  CHECK(interrupted == SIGINT);
  CHECK(cut.error().stage == sbx::Stage("signal"));
  CHECK(cut.error().message.find("SIGINT while reading the exec request") == 0);
  CHECK(sbx::take_pending_forwarded_signal() == SIGINT);
  // Bounded as read_bounded_fd is.
  REQUIRE(::write(fds[1], std::string(64, 'x').data(), 64) == 64);
  ::close(fds[1]);
  auto big = sbx::read_to_end_holding_signals(fds[0], 16, 100, &interrupted, "usage", "the exec request");
  ::close(fds[0]);
  CHECK_FALSE(big);
  CHECK(interrupted == 0);
}
