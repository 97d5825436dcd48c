#include "runtime/launch/supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>

#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <tuple>
#include <unistd.h>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/log.hpp"
#include "runtime/base/poll_set.hpp"
#include "runtime/base/progress_line.hpp"
#include "runtime/base/signals.hpp"
#include "runtime/linux/limits_plan.hpp"

namespace sbx {
namespace {

// Milliseconds on the monotonic clock: the one clock (runtime/base/clock.hpp), by this file's name.
constexpr auto now_ms = monotonic_ms;

int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

}  // namespace

// Named (PreparedSupervisor holds one), but this file's alone.
namespace supervisor_detail {

// An armed timer's fd, closed when it has fired or the run is over.
using TimerFd = UniqueFd;

class Supervisor {
 public:
  // What needs only the sandbox: the relays, the seccomp notifier, the poll loop's participants
  // (each reads `in` again when it is polled). The run's start, limits and events are taken by
  // run(): a pooled call's arrive after this (PreparedSupervisor).
  explicit Supervisor(const SuperviseInput& in)
      : in_(in),
        out_(in.out_fd, OutputSink::open(in.out_dst), in.output_limit_bytes),
        err_(in.err_fd, OutputSink::open(in.err_dst), in.output_limit_bytes),
        msg_fd_(in.msg_fd),
        seccomp_(in.seccomp_sock, in.seccomp_reference, 0, in.seccomp_named) {
    if (msg_fd_.ok()) ::fcntl(msg_fd_.get(), F_SETFL, ::fcntl(msg_fd_.get(), F_GETFL) | O_NONBLOCK);
    add_stream_participants();
    add_control_participants();
  }
  SuperviseResult run();

 private:
  bool running(std::int64_t now);
  int poll_timeout(std::int64_t now, bool proxy_polled) const;
  bool handoff_pending() const { return in_.input && in_.input->handoff_fd() >= 0; }
  void add_stream_participants();
  void add_control_participants();
  void add_fd(std::function<int()> fd, std::function<void(short revents)> on_ready);
  void add_hooks(std::function<void(PollSet&)> add, std::function<void(std::span<const struct pollfd>)> dispatch);
  void add_stdin(PollSet& p);
  void on_stdin(std::span<const struct pollfd> e);
  void on_listener(short revents);
  void on_message();
  void on_deadline();
  void on_cpu_timer();
  void on_grace_expired();
  void on_signals();
  void on_init_exit();
  void arm(TimerFd& t, std::int64_t ms, Stage stage, const char* what);
  void fail(Error e);
  void kill_all() { pidfd_send_signal(in_.pidfd, SIGKILL); }
  void end_sandbox();
  void wind_up();
  void note_truncation();
  void take_run_settings();

  const SuperviseInput& in_;
  SuperviseResult r_;
  std::int64_t start_ = 0;
  OutputRelay out_, err_;
  UniqueFd msg_fd_;  // init's reports; ours (SuperviseInput::msg_fd)
  TimerFd deadline_, grace_, cpu_timer_, end_;
  bool end_asked_ = false;  // init was told to end the sandbox (end_sandbox)
  bool init_done_ = false;
  std::int64_t init_done_at_ = 0;
  bool out_truncated_ = false, err_truncated_ = false;  // already told as events
  SeccompNotifier seccomp_;
  // Everything the loop waits on, in the order one pass handles it (Supervisor::run).
  PollParticipants participants_;
  const PollParticipant* proxy_participant_ = nullptr;  // its entries decide poll()'s timeout
};

static Result<int> arm_with(const SuperviseInput& in, std::int64_t ms) {
  return in.arm_timer ? in.arm_timer(ms) : arm_timerfd(ms);
}

// Fail closed: a run is never left without a limit it was given.
void Supervisor::arm(TimerFd& t, std::int64_t ms, Stage stage, const char* what) {
  auto fd = arm_with(in_, ms);
  if (!fd)
    return fail(
        make_error(stage, std::string("cannot arm the timer of ") + what + ": " + fd.error().message, fd.error().err));
  t.reset(*fd);
}

// A limit ends the sandbox through init (kEndSandboxSignal, handshake.hpp), so that the record's
// usage is the program tree's; init is SIGKILLed if its report has not come in kEndReportMs.
// A template's fork obeys it alike (runtime/model/warm_template.py, _reap): for its pid 1 the
// signal only wakes it, and the end is the byte on end_fd, written first (never waited for: a
// pipe still full of the call's job is bounded by that SIGKILL, as a lost signal is).
void Supervisor::end_sandbox() {
  if (end_asked_) return;
  end_asked_ = true;
  if (in_.end_fd >= 0) {
    ::fcntl(in_.end_fd, F_SETFL, ::fcntl(in_.end_fd, F_GETFL) | O_NONBLOCK);
    if (::write(in_.end_fd, "e", 1) != 1) spdlog::debug("end byte to the template's fork: {}", std::strerror(errno));
  }
  if (pidfd_send_signal(in_.pidfd, kEndSandboxSignal) != 0) return kill_all();
  arm(end_, kEndReportMs, "supervise", "the wait for init's report at the sandbox's end");
}

void Supervisor::fail(Error e) {
  if (!r_.error) {
    spdlog::debug("supervisor: {}: killing the sandbox", e.describe());
    r_.error = std::move(e);
  }
  kill_all();
}

// While init lives, and until its report and both streams are done. Once init is gone every
// process of its pid namespace is being killed and the pipes close within milliseconds; after
// 5 s of that (a kernel surprise) the sources are given up. Output that only waits for a slow
// reader keeps the loop going: the wall-time limit bounds it (on_deadline).
bool Supervisor::running(std::int64_t now) {
  if (!init_done_) return true;
  // A pty master still on its way from init (stdin_relay.hpp) is a source of stdout too.
  bool sources = out_.source_open() || err_.source_open() || msg_fd_.ok() || handoff_pending();
  if (sources && now - init_done_at_ >= 5000) {
    out_.abandon();
    err_.abandon();
    if (in_.input) in_.input->abandon_handoff();
    msg_fd_.reset();
    return false;
  }
  return sources || out_.pending() || err_.pending();
}

int Supervisor::poll_timeout(std::int64_t now, bool proxy_polled) const {
  int wait_ms = -1;
  if (init_done_ && (out_.source_open() || err_.source_open() || msg_fd_.ok() || handoff_pending()))
    wait_ms = static_cast<int>(std::max<std::int64_t>(0, init_done_at_ + 5000 - now));
  if (proxy_polled) {
    std::int64_t t = in_.proxy->ms_until_next_expiry(now);
    if (t >= 0 && (wait_ms < 0 || t < wait_ms)) wait_ms = static_cast<int>(t);
  }
  return wait_ms;
}

// What the run's call decides, read when it starts: its start, its output limit, its events.
void Supervisor::take_run_settings() {
  start_ = in_.start_ms ? in_.start_ms : now_ms();
  seccomp_.set_start_ms(start_);
  out_.set_limit(in_.output_limit_bytes);
  err_.set_limit(in_.output_limit_bytes);
  if (in_.events)
    seccomp_.on_refused = [ev = in_.events](const SeccompViolation& v) {
      ev->emit("violation", {{"kind", "seccomp"},
                             {"name", v.name},
                             {"number", v.number},
                             {"arch", v.arch},
                             {"action", v.action},
                             {"count", v.count}});
    };
  r_.timed_out = in_.timed_out_before_start;
}

SuperviseResult Supervisor::run() {
  take_run_settings();
  if (in_.timeout_ms && !in_.timed_out_before_start) arm(deadline_, *in_.timeout_ms, "timeout", "the wall-time limit");
  if (in_.cpu_budget_ms && in_.cpu_used_us)
    arm(cpu_timer_, cpu_time_recheck_ms(*in_.cpu_budget_ms, 0, in_.max_cpus), "cpu_time", "the CPU-time budget");
  for (std::int64_t now = now_ms(); running(now); now = now_ms()) {
    PollRound round(participants_);
    int rc = round.wait(poll_timeout(now, !round.entries_of(*proxy_participant_).empty()));
    if (rc < 0) {
      if (errno == EINTR) continue;
      fail(sys_error("supervise", "poll"));
      break;
    }
    round.dispatch();
  }
  wind_up();
  return std::move(r_);
}

// The output limit was reached on a stream: said once per stream, as it happens.
void Supervisor::note_truncation() {
  for (auto [name, relay, told] :
       {std::tuple{"stdout", &out_, &out_truncated_}, std::tuple{"stderr", &err_, &err_truncated_}}) {
    if (*told || !relay->truncated()) continue;
    *told = true;
    in_.events->emit(
        "output_truncated",
        {{"stream", name},
         {"limit_bytes", in_.output_limit_bytes ? nlohmann::json(*in_.output_limit_bytes) : nlohmann::json(nullptr)}});
  }
}

void Supervisor::add_fd(std::function<int()> fd, std::function<void(short revents)> on_ready) {
  participants_.push_back(std::make_unique<PollFd>(std::move(fd), std::move(on_ready)));
}

void Supervisor::add_hooks(std::function<void(PollSet&)> add,
                           std::function<void(std::span<const struct pollfd>)> dispatch) {
  participants_.push_back(std::make_unique<PollHooks>(std::move(add), std::move(dispatch)));
}

// What moves bytes, handled first in a pass: the program's stdout and stderr (sources, then
// sinks: the two may share sbx's destination, whose bytes keep this order), the caller's stdin,
// the proxy's connections. "Live": init has not ended (nor reported an empty sandbox).
void Supervisor::add_stream_participants() {
  add_hooks(
      [this](PollSet& p) {
    p.add(out_.src_poll_fd());
    p.add(err_.src_poll_fd());
    p.add(out_.sink_poll_fd(), out_.sink_events());
    p.add(err_.sink_poll_fd(), err_.sink_events());
      },
      [this](std::span<const struct pollfd> e) {
    if (poll_readable(e[0].revents)) out_.on_src_ready();
    if (poll_readable(e[1].revents)) err_.on_src_ready();
    if (e[2].revents) out_.on_sink_ready(e[2].revents);
    if (e[3].revents) err_.on_sink_ready(e[3].revents);
  });
  add_hooks([this](PollSet& p) { add_stdin(p); }, [this](std::span<const struct pollfd> e) { on_stdin(e); });
  add_hooks(
      [this](PollSet& p) {
    if (in_.proxy && !init_done_) in_.proxy->add_pollfds(p.fds());
      },
      [this](std::span<const struct pollfd> e) {
    if (e.empty()) return;
    in_.proxy->on_events(e.data(), e.size(), now_ms());
    in_.proxy->expire_idle(now_ms());
  });
  proxy_participant_ = participants_.back().get();
}

// Then init's reports, the timers, the forwarded signals, seccomp, init's exit, the cgroup's
// events, and last the live event stream (which tells what the others did in this pass).
void Supervisor::add_control_participants() {
  add_fd([this] { return msg_fd_.get(); }, [this](short) { on_message(); });
  add_fd([this] { return deadline_.get(); }, [this](short) { on_deadline(); });
  add_fd([this] { return init_done_ ? -1 : cpu_timer_.get(); }, [this](short) { on_cpu_timer(); });
  add_fd([this] { return init_done_ ? -1 : end_.get(); },
         [this](short) {
    end_.reset();
    if (!init_done_) kill_all();  // init did not report in time: the sandbox dies all the same
  });
  add_fd([this] { return init_done_ ? -1 : grace_.get(); },
         [this](short) {
    if (!init_done_) on_grace_expired();  // init's report came earlier in this pass
  });
  // After init, signals are still read while output waits for its reader: one ends that wait.
  add_fd([this] { return !init_done_ || out_.pending() || err_.pending() ? in_.signal_fd : -1; },
         [this](short) { on_signals(); });
  add_fd([this] { return init_done_ ? -1 : seccomp_.sock_fd(); }, [this](short) { seccomp_.on_sock_readable(); });
  add_fd([this] { return init_done_ ? -1 : seccomp_.listener_fd(); }, [this](short rev) { on_listener(rev); });
  add_fd([this] { return init_done_ ? -1 : in_.pidfd; }, [this](short) { on_init_exit(); });
  add_hooks(
      [this](PollSet& p) {
    if (in_.cgroup_events && !init_done_) in_.cgroup_events->add_pollfds(p.fds());
      },
      [this](std::span<const struct pollfd> e) {
    if (!e.empty()) in_.cgroup_events->on_events(e.data(), e.size());
  });
  add_hooks(
      [this](PollSet& p) {
    if (in_.events) p.add(in_.events->poll_fd(), POLLOUT);
      },
      [this](std::span<const struct pollfd> e) {
    if (!in_.events) return;
    note_truncation();
    if (e[0].revents) in_.events->on_writable(e[0].revents);
  });
}

// The stdin relay runs while the program may read; the pty's handoff is watched until it has
// come, also after init has ended (the program's output may wait in the pty). Four entries
// (source, sink, handoff, winch) whenever there is a caller's stdin.
void Supervisor::add_stdin(PollSet& p) {
  if (!in_.input) return;
  OutputRelay* relay = init_done_ ? nullptr : in_.input->relay();
  p.add(relay ? relay->src_poll_fd() : -1);
  p.add(relay ? in_.input->relay_sink_poll_fd() : -1, relay ? relay->sink_events() : POLLIN);
  p.add(in_.input->handoff_fd());
  p.add(init_done_ ? -1 : in_.input->winch_fd());
}

void Supervisor::on_stdin(std::span<const struct pollfd> e) {
  if (!in_.input) return;
  OutputRelay* relay = in_.input->relay();
  if (relay && poll_readable(e[0].revents)) relay->on_src_ready();
  if (relay && e[1].revents) relay->on_sink_ready(e[1].revents);
  if (poll_readable(e[2].revents)) out_.adopt_source(in_.input->on_handoff_ready());
  if (poll_readable(e[3].revents)) in_.input->on_winch();
  if (out_.reader_closed()) in_.input->hang_up();  // a pty's stdout has no pipe to close
}

void Supervisor::on_listener(short revents) {
  if (seccomp_.on_listener_ready(revents, now_ms()) && !r_.seccomp_kill) {
    r_.seccomp_kill = *seccomp_.kill();
    end_sandbox();
  }
}

void Supervisor::on_message() {
  ChildMsg m;
  ReportRead got = read_init_report(msg_fd_.get(), m);
  if (got == ReportRead::kReport) {
    if (m.kind == ChildMsg::kSetupError && !r_.setup_error) r_.setup_error = m;
    // A program child that failed before its execve (fail() in child.cpp: not found on PATH, a
    // refused step) reported it first, on this same pipe: the kStarted that follows is no start.
    if (m.kind == ChildMsg::kStarted && !r_.setup_error) r_.program_exec_ns = m.caps.exec_ns;
    if (m.kind == ChildMsg::kStarted && m.caps.read == 1)
      r_.program_caps = ProcessCaps{m.caps.sets[0], m.caps.sets[1], m.caps.sets[2], m.caps.sets[3], m.caps.sets[4]};
    if (m.kind == ChildMsg::kProgramStatus) {
      // Init has killed and reaped everything else: the sandbox is empty. The message can be
      // read after init's exit was already seen (both were ready in one poll).
      r_.program_wait_status = m.wait_status;
      r_.usage = m.usage;
      if (!init_done_) {  // init is still exiting: it is reaped by the caller, later
        init_done_ = true;
        init_done_at_ = now_ms();
        r_.init_pending = true;
        r_.wall_ms = init_done_at_ - start_;
      }
      msg_fd_.reset();  // nothing follows; its EOF would only come once init's exit is done
    }
  } else if (got != ReportRead::kAgain) {
    // EOF, or a short message (init writes whole messages atomically: it died mid-way).
    msg_fd_.reset();
  }
}

// The wall-time limit: while the program runs, the sandbox is killed. Once it has ended, the
// limit still bounds the delivery of its output to a reader that does not take it: what is
// left is dropped (counted as undelivered), and the run is recorded as timed out.
void Supervisor::on_deadline() {
  deadline_.reset();
  if (!init_done_) {
    r_.timed_out = true;
    if (in_.events) in_.events->emit("limit", {{"source", "sbx"}, {"counter", "wall_time"}});
    end_sandbox();
  } else if (out_.pending() || err_.pending()) {
    r_.timed_out = true;
    r_.delivery_timed_out = true;
  }
  out_.abandon();
  err_.abandon();
  if (in_.input && in_.input->relay()) in_.input->relay()->abandon();
}

void Supervisor::on_cpu_timer() {
  cpu_timer_.reset();
  auto used = in_.cpu_used_us();
  if (!used) {
    return fail(make_error("cpu_time",
                           "cannot read the CPU time used against the CPU-time budget: " + used.error().message,
                           used.error().err));
  }
  std::int64_t next = cpu_time_recheck_ms(*in_.cpu_budget_ms, *used, in_.max_cpus);
  if (next == 0) {
    r_.cpu_exceeded = true;
    if (in_.events)
      in_.events->emit("limit", {{"source", "sbx"}, {"counter", "cpu_time"}, {"budget_ms", *in_.cpu_budget_ms}});
    end_sandbox();
  } else {
    arm(cpu_timer_, next, "cpu_time", "the CPU-time budget");
  }
}

void Supervisor::on_grace_expired() {
  grace_.reset();
  r_.killed_after_grace = true;
  kill_all();
}

// The first signal is forwarded to init, which passes it on to the program's process group
// (child.cpp); the sandbox is killed when the grace period is over, or at a second signal.
void Supervisor::on_signals() {
  struct signalfd_siginfo si;
  while (::read(in_.signal_fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    int sig = static_cast<int>(si.ssi_signo);
    if (init_done_) {  // nothing left to forward to: the caller wants sbx to stop delivering
      if (!r_.signal_after_end) r_.signal_after_end = sig;
      out_.abandon();
      err_.abandon();
    } else if (r_.forwarded_signal == 0) {
      r_.forwarded_signal = sig;
      spdlog::info("forwarding {} to the sandbox; killing it in {} ms unless it exits", signal_name(sig),
                   in_.kill_grace_ms);
      pidfd_send_signal(in_.pidfd, sig);
      arm(grace_, in_.kill_grace_ms, "signal", "the grace period after a forwarded signal");
    } else if (!r_.killed_after_grace) {
      r_.killed_after_grace = true;
      r_.second_signal = sig;
      kill_all();
    }
  }
}

void Supervisor::on_init_exit() {
  int ws = 0;
  struct rusage ru {};
  // A template's fork: its pidfd is readable, so it has exited; it reported the program's status
  // and usage before, or the template reports pid 1's own end right after reaping it, read while
  // the report pipe stays open (running); a fork killed, or ended without any report, ends the
  // run as killed (outcome.cpp).
  pid_t w = in_.init_is_child ? ::wait4(in_.pid, &ws, WNOHANG, &ru) : in_.pid;
  if (w != in_.pid) return;
  init_done_ = true;
  r_.init_pending = false;
  init_done_at_ = now_ms();
  r_.init_wait_status = ws;
  if (!r_.program_wait_status) r_.usage = ru;  // the report's usage is the program's own
  r_.wall_ms = init_done_at_ - start_;
}

// The loop has ended. If init still lives (poll failed), it is killed; its death is waited for
// a bounded time (a process of the sandbox stuck in the kernel can hold up the pid namespace's
// teardown), and past that it is left for reap_init(), after the record is written.
void Supervisor::wind_up() {
  if (in_.proxy) in_.proxy->close_all();  // the run has ended: so has every connection
  if (!init_done_) {
    kill_all();
    struct pollfd pfd = {in_.pidfd, POLLIN, 0};
    while (::poll(&pfd, 1, 5000) < 0 && errno == EINTR) {}
    int ws = 0;
    if (!in_.init_is_child) r_.init_pending = false;
    else if (::wait4(in_.pid, &ws, WNOHANG, &r_.usage) == in_.pid) r_.init_wait_status = ws;
    else r_.init_pending = true;
    r_.wall_ms = now_ms() - start_;
  }
  r_.violations = seccomp_.violations();
  r_.seccomp_totals = seccomp_.totals();
  r_.out = out_.finish();
  r_.err = err_.finish();
  if (in_.events) note_truncation();
}

}  // namespace supervisor_detail

using supervisor_detail::Supervisor;

Result<int> arm_timerfd(std::int64_t ms) {
  UniqueFd fd(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  if (!fd.ok()) return sys_error("timer", "timerfd_create");
  struct itimerspec its = {};
  its.it_value.tv_sec = ms / 1000;
  its.it_value.tv_nsec = (ms % 1000) * 1'000'000;
  if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
  if (::timerfd_settime(fd.get(), 0, &its, nullptr) != 0) return sys_error("timer", "timerfd_settime");
  return fd.release();
}

PreparedSupervisor::PreparedSupervisor(const SuperviseInput& in) : s_(std::make_unique<Supervisor>(in)) {}
PreparedSupervisor::~PreparedSupervisor() = default;

SuperviseResult PreparedSupervisor::run() {
  NonBlockingLogScope log_never_blocks;
  return s_->run();
}

SuperviseResult supervise(const SuperviseInput& in) { return PreparedSupervisor(in).run(); }

int reap_init(pid_t pid) {
  int ws = 0;
  while (::waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
  return ws;
}

}  // namespace sbx
