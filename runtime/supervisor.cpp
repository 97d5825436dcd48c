#include "runtime/supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>

#include <cstring>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "runtime/limits_plan.hpp"
#include "runtime/sha256.hpp"

namespace sbx {
namespace {

std::int64_t now_ms() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1'000'000;
}

int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// Copies one pipe to sbx's own stdout/stderr, up to a byte cap; the rest is read and dropped so
// the program keeps running instead of blocking on a full pipe.
class StreamPump {
 public:
  StreamPump(int src, int dst, std::optional<std::int64_t> limit) : src_(src), dst_(dst), limit_(limit) {}
  bool open() const { return src_ >= 0; }
  int fd() const { return src_; }
  void on_readable() {
    char buf[65536];
    ssize_t n = ::read(src_, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
      ::close(src_);
      src_ = -1;
      return;
    }
    std::uint64_t pass = static_cast<std::uint64_t>(n);
    if (limit_) {
      std::uint64_t room = static_cast<std::uint64_t>(*limit_) > stats_.bytes ? static_cast<std::uint64_t>(*limit_) - stats_.bytes : 0;
      if (pass > room) {
        pass = room;
        stats_.truncated = true;
      }
    }
    stats_.dropped_bytes += static_cast<std::uint64_t>(n) - pass;
    hash_.update(buf, pass);
    stats_.bytes += pass;
    write_all(buf, pass);
  }
  StreamStats finish() {
    stats_.sha256 = hash_.final_hex();
    return stats_;
  }

 private:
  void write_all(const char* p, std::uint64_t len) {
    while (len > 0 && dst_ >= 0) {
      ssize_t w = ::write(dst_, p, len);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        dst_ = -1;  // reader gone (EPIPE): keep draining and hashing, stop writing
        return;
      }
      p += w;
      len -= static_cast<std::uint64_t>(w);
    }
  }
  int src_, dst_;
  std::optional<std::int64_t> limit_;
  Sha256 hash_;
  StreamStats stats_;
};

int arm_timer(std::int64_t ms) {
  int fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (fd < 0) return -1;
  struct itimerspec its = {};
  its.it_value.tv_sec = ms / 1000;
  its.it_value.tv_nsec = (ms % 1000) * 1'000'000;
  if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
  ::timerfd_settime(fd, 0, &its, nullptr);
  return fd;
}

}  // namespace

SuperviseResult supervise(const SuperviseInput& in) {
  SuperviseResult r;
  r.timed_out = in.timed_out_before_start;
  std::int64_t start = in.start_ms ? in.start_ms : now_ms();
  StreamPump out(in.out_fd, in.out_dst, in.output_limit_bytes);
  StreamPump err(in.err_fd, in.err_dst, in.output_limit_bytes);
  int msg_fd = in.msg_fd;
  int pidfd = in.pidfd;
  int deadline = in.timeout_ms && !in.timed_out_before_start ? arm_timer(*in.timeout_ms) : -1;
  int grace = -1;
  int cpu_timer = -1;
  if (in.cpu_budget_ms && in.cpu_used_us)
    cpu_timer = arm_timer(cpu_time_recheck_ms(*in.cpu_budget_ms, 0, in.max_cpus));
  bool init_done = false;
  std::int64_t init_done_at = 0;

  auto kill_all = [&] { pidfd_send_signal(in.pidfd, SIGKILL); };
  SeccompNotifier seccomp(in.seccomp_sock, in.seccomp_reference, start, in.seccomp_named);

  while (!init_done || out.open() || err.open() || msg_fd >= 0) {
    std::vector<struct pollfd> p;
    p.reserve(16);
    auto add = [&](int fd) -> int {
      if (fd < 0) return -1;
      p.push_back({fd, POLLIN, 0});
      return static_cast<int>(p.size()) - 1;
    };
    int i_pid = init_done ? -1 : add(pidfd);
    int i_out = add(out.fd()), i_err = add(err.fd()), i_msg = add(msg_fd);
    int i_dl = add(deadline), i_gr = add(grace), i_sig = add(init_done ? -1 : in.signal_fd);
    int i_cpu = add(init_done ? -1 : cpu_timer);
    int i_scs = add(init_done ? -1 : seccomp.sock_fd()), i_scl = add(init_done ? -1 : seccomp.listener_fd());
    std::size_t proxy_first = p.size();
    if (in.proxy && !init_done) in.proxy->add_pollfds(p);
    std::size_t proxy_count = p.size() - proxy_first;
    // Once init is gone every process in its pid namespace is being killed and the pipes close
    // within milliseconds; the bound only guards against a kernel surprise.
    int wait_ms = -1;
    if (init_done) {
      std::int64_t left = init_done_at + 5000 - now_ms();
      if (left <= 0) break;
      wait_ms = static_cast<int>(left);
    }
    if (proxy_count) {
      std::int64_t t = in.proxy->ms_until_next_expiry(now_ms());
      if (t >= 0 && (wait_ms < 0 || t < wait_ms)) wait_ms = static_cast<int>(t);
    }
    int rc = ::poll(p.data(), static_cast<nfds_t>(p.size()), wait_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      spdlog::error("poll: {}", std::strerror(errno));
      kill_all();
      break;
    }
    auto ready = [&](int i) { return i >= 0 && (p[i].revents & (POLLIN | POLLHUP | POLLERR)); };
    if (ready(i_out)) out.on_readable();
    if (ready(i_err)) err.on_readable();
    if (ready(i_msg)) {
      ChildMsg m;
      ssize_t k = ::read(msg_fd, &m, sizeof m);
      if (k == static_cast<ssize_t>(sizeof m)) {
        if (m.kind == ChildMsg::kSetupError && !r.setup_error) r.setup_error = m;
        if (m.kind == ChildMsg::kProgramStatus) {
          // Init has killed and reaped everything else: the sandbox is empty. The message can be
          // read after init's exit was already seen (both were ready in one poll).
          r.program_wait_status = m.wait_status;
          r.usage = m.usage;
          if (!init_done) {  // init is still exiting: it is reaped by the caller, later
            init_done = true;
            init_done_at = now_ms();
            r.init_pending = true;
            r.wall_ms = init_done_at - start;
          }
          ::close(msg_fd);  // nothing follows; its EOF would only come once init's exit is done
          msg_fd = -1;
        }
      } else if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
        ::close(msg_fd);
        msg_fd = -1;
      }
    }
    if (ready(i_dl) && !init_done) {
      r.timed_out = true;
      kill_all();
      ::close(deadline);
      deadline = -1;
    }
    if (ready(i_cpu)) {
      ::close(cpu_timer);
      cpu_timer = -1;
      std::int64_t used = in.cpu_used_us().value_or(0);
      std::int64_t next = cpu_time_recheck_ms(*in.cpu_budget_ms, used, in.max_cpus);
      if (next == 0) {
        r.cpu_exceeded = true;
        kill_all();
      } else {
        cpu_timer = arm_timer(next);
      }
    }
    if (ready(i_gr) && !init_done) {
      r.killed_after_grace = true;
      kill_all();
      ::close(grace);
      grace = -1;
    }
    if (ready(i_sig)) {
      struct signalfd_siginfo si;
      while (::read(in.signal_fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        int sig = static_cast<int>(si.ssi_signo);
        if (r.forwarded_signal == 0) {
          r.forwarded_signal = sig;
          spdlog::info("forwarding signal {} to the sandbox; killing it in {} ms unless it exits", sig, in.kill_grace_ms);
          pidfd_send_signal(in.pidfd, sig);
          grace = arm_timer(in.kill_grace_ms);
        } else {
          r.killed_after_grace = true;
          kill_all();
        }
      }
    }
    if (proxy_count) {
      in.proxy->on_events(p.data() + proxy_first, proxy_count, now_ms());
      in.proxy->expire_idle(now_ms());
    }
    if (ready(i_scs)) seccomp.on_sock_readable();
    if (ready(i_scl) && seccomp.on_listener_ready(p[i_scl].revents, now_ms()) && !r.seccomp_kill) {
      r.seccomp_kill = *seccomp.kill();
      kill_all();
    }
    if (ready(i_pid)) {
      int ws = 0;
      struct rusage ru {};
      pid_t w = ::wait4(in.pid, &ws, WNOHANG, &ru);
      if (w == in.pid) {
        init_done = true;
        r.init_pending = false;
        init_done_at = now_ms();
        r.init_wait_status = ws;
        if (!r.program_wait_status) r.usage = ru;  // the report's usage is the program's own
        r.wall_ms = init_done_at - start;
      }
    }
  }
  for (int fd : {deadline, grace, msg_fd, cpu_timer})
    if (fd >= 0) ::close(fd);
  if (in.proxy) in.proxy->close_all();  // the run has ended: so has every connection
  if (!init_done) {
    kill_all();
    int ws;
    ::wait4(in.pid, &ws, 0, &r.usage);
    r.init_wait_status = ws;
    r.wall_ms = now_ms() - start;
  }
  r.violations = seccomp.violations();
  r.seccomp_totals = seccomp.totals();
  r.out = out.finish();
  r.err = err.finish();
  return r;
}

int reap_init(pid_t pid) {
  int ws = 0;
  while (::waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  return ws;
}

}  // namespace sbx
