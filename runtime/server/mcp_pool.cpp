#include "runtime/server/mcp_pool.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/base/fdpass.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/text_escape.hpp"

namespace sbx::mcp {
namespace {
using nlohmann::json;

void log_line(const std::string& s) {
  std::string line = "sbx: mcp: pool: " + printable(s) + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

std::int64_t mono_us() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000LL + ts.tv_nsec / 1000;
}

bool exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace

PoolLauncher::PoolLauncher(std::vector<std::string> worker_argv, std::size_t size, SandboxLauncher& cold)
    : argv_(std::move(worker_argv)), size_(size), cold_(cold) {
  refill();
}

PoolLauncher::~PoolLauncher() {
  // Closing a worker's socket is its end (EOF while it waits: sandbox discarded, no record).
  for (auto& w : idle_) w.sock.reset();
  auto deadline = mono_us() + 3'000'000;
  for (auto& w : idle_) {
    pollfd p{w.pidfd.get(), POLLIN, 0};
    int left = static_cast<int>(std::max<std::int64_t>(0, (deadline - mono_us()) / 1000));
    if (::poll(&p, 1, left) <= 0)  // a worker that does not end by itself within the bound is killed
      ::syscall(SYS_pidfd_send_signal, w.pidfd.get(), SIGKILL, nullptr, 0);
    while (::waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  idle_.clear();
}

void PoolLauncher::drop(Idle& w, const std::string& why) {
  log_line("discarded pooled sandbox (worker " + std::to_string(w.pid) + "): " + why);
  ::syscall(SYS_pidfd_send_signal, w.pidfd.get(), SIGKILL, nullptr, 0);
  while (::waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

Result<PoolLauncher::Idle> PoolLauncher::spawn() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return sys_error("mcp", "socketpair for a pooled worker");
  UniqueFd mine(sv[0]), theirs(sv[1]);
  UniqueFd out(::memfd_create("sbx-mcp-response", MFD_CLOEXEC));
  if (!out.ok()) return sys_error("mcp", "memfd_create for a pooled worker's response");
  std::vector<char*> argv;
  for (auto& a : argv_) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t server = ::getpid();
  pid_t pid = ::fork();  // the server is single-threaded: fork is safe, and exec follows at once
  if (pid < 0) return sys_error("mcp", "fork a pooled worker");
  if (pid == 0) {
    if (::dup2(theirs.get(), 0) < 0 || ::dup2(out.get(), 1) < 0) ::_exit(125);
    // Idle, it holds no call: SIGKILL if the server dies (its init follows, PR_SET_PDEATHSIG in
    // child.cpp). The worker makes it SIGTERM once it has a call, whose record then is written.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != server) ::_exit(125);
    ::setpgid(0, 0);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  Idle w;
  w.pid = pid;
  w.pidfd = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!w.pidfd.ok()) {
    int e = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    errno = e;
    return sys_error("mcp", "pidfd_open for a pooled worker");
  }
  w.sock = std::move(mine);
  w.response = std::move(out);
  return w;
}

void PoolLauncher::refill() {
  // Workers that ended while idle (their sandbox died or was disturbed) are reaped here too.
  for (auto it = idle_.begin(); it != idle_.end();) {
    if (exited(it->pidfd.get())) {
      drop(*it, "it ended before hand-out");
      it = idle_.erase(it);
    } else {
      ++it;
    }
  }
  // A pool that cannot start workers (fork or pidfd failing) stops trying after a few, and every
  // call then runs cold: the server goes on either way.
  while (idle_.size() < size_ && spawn_failures_ < 8) {
    auto w = spawn();
    if (!w) {
      ++spawn_failures_;
      log_line("could not start a pooled worker: " + w.error().describe());
      break;
    }
    idle_.push_back(std::move(*w));
  }
}

Result<Worker> PoolLauncher::launch(const json& job) {
  auto cold = [&](const std::string& why) {
    json j = job;
    j["pool"] = {{"hit", false}, {"reason", why}};
    return cold_.launch(j);
  };
  if (job.value("tool", "") != "run_code") return cold("only run_code calls are served from the pool");
  while (!idle_.empty()) {
    Idle w = std::move(idle_.front());
    idle_.pop_front();
    if (exited(w.pidfd.get())) {
      drop(w, "it ended before hand-out (its sandbox died or was disturbed)");
      continue;
    }
    UniqueFd mfd(::memfd_create("sbx-mcp-job", MFD_CLOEXEC));
    if (!mfd.ok()) return sys_error("mcp", "memfd_create for a pooled worker's job");
    json j = job;
    j["pool_sent_us"] = mono_us();  // CLOCK_MONOTONIC, shared with the worker: its waited_ms
    std::string text = dump_json(j, -1);
    for (std::size_t off = 0; off < text.size();) {
      ssize_t n = ::write(mfd.get(), text.data() + off, text.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return sys_error("mcp", "write a pooled worker's job");
      off += static_cast<std::size_t>(n);
    }
    ::lseek(mfd.get(), 0, SEEK_SET);
    if (auto st = send_fd(w.sock.get(), mfd.get(), 'J', "mcp", "hand a job to a pooled worker"); !st) {
      drop(w, st.error().describe());
      continue;
    }
    Worker out;
    out.pid = w.pid;
    out.pidfd = std::move(w.pidfd);
    out.response = std::move(w.response);
    // w.sock closes here: the worker has its one job, and sees EOF after it.
    refill();
    return out;
  }
  refill();
  return cold("the pool was empty (" + std::to_string(size_) + " pooled sandboxes in use or still being made)");
}

}  // namespace sbx::mcp
