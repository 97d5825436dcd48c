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
#include <string_view>
#include <cerrno>
#include <cstring>

#include "runtime/base/clock.hpp"
#include "runtime/base/fdpass.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/trace_field.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/server/pool_job_wire.hpp"

namespace sbx::mcp {
namespace {
using nlohmann::json;

void log_line(const std::string& s) {
  std::string line = "sbx: mcp: pool: " + printable(s) + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace

bool worker_exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

void read_worker_note(int sock, std::string& note) {
  if (sock < 0) return;
  char buf[512];
  while (note.size() < kMaxWorkerNoteBytes) {
    ssize_t n = ::recv(sock, buf, std::min(sizeof buf, kMaxWorkerNoteBytes - note.size()), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    note.append(buf, static_cast<std::size_t>(n));
  }
}

std::string worker_note_ready(const std::string& cgroup_path) {
  return "ready " + (cgroup_path.empty() ? std::string("-") : cgroup_path) + "\n";
}

std::string worker_note_failed(const std::string& why) {
  std::string one = printable(why);
  if (one.size() > kMaxWorkerNoteBytes / 2) one.resize(kMaxWorkerNoteBytes / 2);
  return "failed " + one + "\n";
}

std::string cgroup_of_note(const std::string& note) {
  constexpr std::string_view kReady = "ready ", kRoot = "/sys/fs/cgroup/";
  auto nl = note.find('\n');
  if (nl == std::string::npos || note.compare(0, kReady.size(), kReady) != 0) return "";
  std::string path = note.substr(kReady.size(), nl - kReady.size());
  if (path.compare(0, kRoot.size(), kRoot) != 0 || path.size() == kRoot.size() || path.back() == '/') return "";
  for (std::size_t at = kRoot.size(); at <= path.size();) {
    auto next = path.find('/', at);
    if (next == std::string::npos) next = path.size();
    std::string part = path.substr(at, next - at);
    if (part.empty() || part == "." || part == ".." || part.find('\0') != std::string::npos) return "";
    at = next + 1;
  }
  return path;
}

// Why a worker said it failed ("" when it did not): a whole line of its note, the first or after
// "ready" (a prepared sandbox can fail after it was ready: runtime/server/mcp_worker.cpp).
static std::string failed_of_note(const std::string& note) {
  constexpr std::string_view kFailed = "failed ";
  for (std::size_t at = 0, nl; (nl = note.find('\n', at)) != std::string::npos; at = nl + 1)
    if (note.compare(at, kFailed.size(), kFailed) == 0)
      return note.substr(at + kFailed.size(), nl - at - kFailed.size());
  return "";
}

static bool ready_of_note(const std::string& note) {
  return note.rfind("ready ", 0) == 0 && note.find('\n') != std::string::npos;
}

PoolLauncher::PoolLauncher(std::vector<std::string> worker_argv, std::size_t size, SandboxLauncher& cold,
                           std::int64_t max_idle_ms, std::function<std::string()> first_words)
    : argv_(std::move(worker_argv)),
      size_(size),
      cold_(cold),
      max_idle_us_(max_idle_ms * 1000),
      first_words_(std::move(first_words)) {
  refill();
}

void PoolLauncher::back_off() {
  build_backoff_ms_ = next_build_backoff_ms(build_backoff_ms_);
  backoff_until_us_ = monotonic_us() + build_backoff_ms_ * 1000LL;
}

void PoolLauncher::discard_idle() {
  // Closing a worker's socket is its end (EOF while it waits: sandbox discarded, no record).
  // Each gets kRetireGraceMs to end by itself, as retire() gives (tick() kills it past that).
  const std::int64_t kill_at = monotonic_us() + kRetireGraceMs * 1000LL;
  for (auto& w : idle_) {
    read_note(w);
    retiring_.push_back({w.pid, std::move(w.pidfd), kill_at, cgroup_of_note(w.note), false});
    w.sock.reset();
  }
  idle_.clear();
}

PoolLauncher::~PoolLauncher() {
  discard_idle();
  auto deadline = monotonic_us() + kRetireGraceMs * 1000LL;
  for (auto& r : retiring_) {
    pollfd p{r.pidfd.get(), POLLIN, 0};
    int left = static_cast<int>(std::max<std::int64_t>(0, (deadline - monotonic_us()) / 1000));
    if (!r.killed && ::poll(&p, 1, left) <= 0) {  // one that does not end by itself within the bound is killed
      ::syscall(SYS_pidfd_send_signal, r.pidfd.get(), SIGKILL, nullptr, 0);
      r.killed = true;
    }
    int ws = 0;
    while (::waitpid(r.pid, &ws, 0) < 0 && errno == EINTR) {}
    if ((r.killed || (WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL)) && !r.cgroup.empty())
      stale_cgroups_.push_back({r.cgroup, 100});
  }
  retiring_.clear();
  // A killed worker's init dies with it (PR_SET_PDEATHSIG), but its run cgroup stays: removed
  // here, a few tries while the killed processes are reaped (bounded: the server is exiting).
  for (int i = 0; i < 100 && !stale_cgroups_.empty(); ++i) {
    remove_stale_cgroups();
    if (!stale_cgroups_.empty()) ::usleep(10'000);
  }
}

void PoolLauncher::read_note(Idle& w) { read_worker_note(w.sock.get(), w.note); }

std::string PoolLauncher::await_first(int timeout_ms) {
  if (idle_.empty()) return "";
  Idle& w = idle_.front();
  const std::int64_t deadline = monotonic_us() + timeout_ms * 1000LL;
  while (w.note.find('\n') == std::string::npos) {
    std::int64_t left_ms = (deadline - monotonic_us()) / 1000;
    if (left_ms <= 0)
      return "the first pooled sandbox was not ready within " + std::to_string(timeout_ms / 1000) +
             " s (a preload that waits for input, or an image too slow to start it)";
    pollfd fds[2] = {{w.sock.get(), POLLIN, 0}, {w.pidfd.get(), POLLIN, 0}};
    int n = ::poll(fds, 2, static_cast<int>(std::min<std::int64_t>(left_ms, 1000)));
    if (n < 0 && errno != EINTR) return "";
    read_note(w);
    if (w.note.find('\n') == std::string::npos && (fds[0].revents & POLLHUP || fds[1].revents))
      return "the pooled worker ended before its sandbox was ready (see its message above)";
  }
  return failed_of_note(w.note);
}

void PoolLauncher::retire(Idle& w, const std::string& why) {
  log_line("discarded pooled sandbox (worker " + std::to_string(w.pid) + "): " + why);
  read_note(w);
  Retiring r;
  r.pid = w.pid;
  r.pidfd = std::move(w.pidfd);
  r.kill_at_us = monotonic_us() + kRetireGraceMs * 1000LL;
  r.cgroup = cgroup_of_note(w.note);
  w.sock.reset();  // EOF: the worker kills its sandbox, removes its run cgroup and exits
  retiring_.push_back(std::move(r));
}

void PoolLauncher::remove_stale_cgroups() {
  for (auto it = stale_cgroups_.begin(); it != stale_cgroups_.end();) {
    const std::string& dir = it->first;
    // cgroup.kill first: the sandbox's init should have died with its worker (PR_SET_PDEATHSIG),
    // but a process of the sandbox that is still there keeps the directory busy.
    (void)write_whole(dir + "/cgroup.kill", "1");
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) {
      it = stale_cgroups_.erase(it);
    } else if (--it->second <= 0) {
      log_line("could not remove a killed worker's run cgroup " + dir + ": " + std::strerror(errno));
      it = stale_cgroups_.erase(it);
    } else {
      ++it;
    }
  }
}

Result<PoolLauncher::Idle> PoolLauncher::spawn() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return sys_error("mcp", "socketpair for a pooled worker");
  UniqueFd mine(sv[0]), theirs(sv[1]);
  UniqueFd out(::memfd_create("sbx-mcp-response", MFD_CLOEXEC));
  if (!out.ok()) return sys_error("mcp", "memfd_create for a pooled worker's response");
  // SIGTERM if the server dies, not SIGKILL, though the worker may hold no call yet: the server
  // hands a call to a worker still starting (under load, or ASan, for seconds), and the worker
  // reads it only once its sandbox is built. Killed by the server's end meanwhile, it took the
  // started call with it, unrecorded. SIGTERM (blocked, pending) reaches the hand-out instead: a
  // call in the socket runs cold and is recorded as not started; with none (the socket at EOF:
  // the kernel closed the dead server's end), the worker discards its sandbox and ends.
  // Into the socket's empty buffer before the worker exists: a few bytes, never a wait.
  if (first_words_) {
    const std::string words = first_words_();
    if (words.empty()) return make_error("mcp", "the pooled worker's first words could not be made", EBUSY);
    if (Status st = write_all(mine.get(), words, "a pooled worker's first words"); !st) return st.error();
  }
  auto w = spawn_worker(argv_, theirs.get(), std::move(out), SIGTERM);
  if (!w) return w.error();
  Idle idle;
  idle.pid = w->pid;
  idle.pidfd = std::move(w->pidfd);
  idle.response = std::move(w->response);
  idle.sock = std::move(mine);
  idle.born_us = monotonic_us();
  return idle;
}

void PoolLauncher::tick() {
  std::int64_t now = monotonic_us();
  for (auto it = retiring_.begin(); it != retiring_.end();) {
    if (worker_exited(it->pidfd.get())) {
      int ws = 0;
      while (::waitpid(it->pid, &ws, 0) < 0 && errno == EINTR) {}
      // Killed (by us, or by anyone): its sandbox did not clean up after itself.
      if ((it->killed || (WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL)) && !it->cgroup.empty())
        stale_cgroups_.push_back({it->cgroup, 50});
      it = retiring_.erase(it);
      continue;
    }
    if (!it->killed && now >= it->kill_at_us) {
      log_line("worker " + std::to_string(it->pid) + " did not end within " + std::to_string(kRetireGraceMs) +
               " ms of its sandbox's discard; killing it");
      ::syscall(SYS_pidfd_send_signal, it->pidfd.get(), SIGKILL, nullptr, 0);
      it->killed = true;
    }
    ++it;
  }
  remove_stale_cgroups();
  bool refill_now = refill_due_us_ != 0 && now >= refill_due_us_;
  if (refill_now) refill_due_us_ = 0;
  for (auto it = idle_.begin(); it != idle_.end();) {
    if (max_idle_us_ > 0 && now - it->born_us >= max_idle_us_) {
      retire(*it, "idle for " + std::to_string((now - it->born_us) / 1'000'000) + " s, past --pool-max-idle");
      it = idle_.erase(it);
      refill_now = true;
    } else {
      ++it;
    }
  }
  if (refill_now) refill();
}

int PoolLauncher::next_tick_ms() const {
  std::int64_t now = monotonic_us();
  auto until = [&](std::int64_t at_us) {
    return static_cast<int>(std::clamp<std::int64_t>((at_us - now + 999) / 1000, 0, 3'600'000));
  };
  int refill_ms = refill_due_us_ != 0 ? until(refill_due_us_) : -1;
  if (!retiring_.empty() || !stale_cgroups_.empty())  // reaping: pidfds are not in the loop's poll
    return refill_ms < 0 ? 50 : std::min(50, refill_ms);
  if (idle_.empty() || max_idle_us_ <= 0) return refill_ms;
  std::int64_t oldest = idle_.front().born_us;
  for (auto& w : idle_) oldest = std::min(oldest, w.born_us);
  int age_ms = until(oldest + max_idle_us_) + 1;
  return refill_ms < 0 ? age_ms : std::min(refill_ms, age_ms);
}

void PoolLauncher::refill() {
  // Workers that ended while idle (their sandbox died or was disturbed) are reaped here too.
  for (auto it = idle_.begin(); it != idle_.end();) {
    if (worker_exited(it->pidfd.get())) {
      retire(*it, "it ended before hand-out");
      it = idle_.erase(it);
    } else {
      ++it;
    }
  }
  // After a build failure the pool waits (build_backoff_ms_) before it builds again: a pack whose
  // every build fails (a context gone, a tenant that no longer allows it) would otherwise cost a
  // whole pool's builds per call. Its calls run cold meanwhile; tick() refills when it is over.
  if (std::int64_t now = monotonic_us(); now < backoff_until_us_) {
    if (refill_due_us_ == 0 || refill_due_us_ > backoff_until_us_) refill_due_us_ = backoff_until_us_;
    return;
  }
  // A pool that cannot start workers (fork or pidfd failing) stops trying after a few, and every
  // call then runs cold: the server goes on either way.
  while (idle_.size() < size_ && spawn_failures_ < 8) {
    auto w = spawn();
    if (!w) {
      log_line("could not start a pooled worker: " + w.error().describe());
      if (w.error().err == EBUSY) {  // no first words now (a template not reading its tokens): later
        back_off();
      } else {
        ++spawn_failures_;
      }
      break;
    }
    idle_.push_back(std::move(*w));
  }
}

Result<Worker> launch_cold(SandboxLauncher& cold, const json& job, const std::string& why) {
  json j = job;
  j["pool"] = trace_object({{"pool/hit", false}, {"pool/reason", why}});  // the job's note, the record's pool
  return cold.launch(j);
}

Result<Worker> PoolLauncher::launch(const json& job) {
  auto cold = [&](const std::string& why) { return launch_cold(cold_, job, why); };
  std::string build_failed;
  std::int64_t now = monotonic_us();
  std::size_t preparing = 0;  // with prepared_only_: sandboxes not ready yet, left for later calls
  while (idle_.size() > preparing) {
    auto at = idle_.begin() + static_cast<std::ptrdiff_t>(preparing);
    if (prepared_only_) {
      read_note(*at);
      if (!ready_of_note(at->note) && failed_of_note(at->note).empty() && !worker_exited(at->pidfd.get())) {
        ++preparing;
        continue;
      }
    }
    Idle w = std::move(*at);
    idle_.erase(at);
    if (worker_exited(w.pidfd.get())) {
      retire(w, "it ended before hand-out (its sandbox died or was disturbed)");
      continue;
    }
    if (max_idle_us_ > 0 && now - w.born_us >= max_idle_us_) {
      retire(w, "idle for " + std::to_string((now - w.born_us) / 1'000'000) + " s, past --pool-max-idle");
      continue;
    }
    read_note(w);
    if (std::string why = failed_of_note(w.note); !why.empty()) {
      // Its sandbox could not be built, or died: the call runs cold (the next idle sandbox, else
      // the cold launcher); a call that finds no other says why.
      retire(w, why);
      build_failed = why;
      back_off();
      continue;
    }
    json j = job;
    j["pool_sent_us"] = monotonic_us();  // CLOCK_MONOTONIC, shared with the worker: its waited_ms
    if (auto st = send_pool_job(w.sock.get(), dump_json(j, -1)); !st) {
      retire(w, st.error().describe());
      continue;
    }
    Worker out;
    out.pid = w.pid;
    out.pidfd = std::move(w.pidfd);
    out.response = std::move(w.response);
    build_backoff_ms_ = 0;  // a sandbox served: builds work again
    // w.sock closes here: the worker has its one job, and sees EOF after it. Its replacement
    // starts once the call's program has had the CPUs to start (refill_due_us_).
    if (refill_due_us_ == 0) refill_due_us_ = monotonic_us() + kRefillDelayMs * 1000LL;
    return out;
  }
  refill();
  if (!build_failed.empty()) return cold(build_failed);
  if (preparing > 0)
    return cold("no pooled sandbox was prepared yet (" + std::to_string(preparing) +
                " still starting their interpreter and preloads)");
  return cold("the pool was empty (" + std::to_string(size_) + " pooled sandboxes in use or still being made)");
}

std::string PoolRouter::key_of(const json& job) {
  std::string tool = job.value("tool", "");
  return tool == "pack" ? "pack:" + job.value("dir", "") : tool;
}

void PoolRouter::add(const std::string& key, std::unique_ptr<PoolLauncher> pool) { pools_[key] = std::move(pool); }

PoolLauncher* PoolRouter::find(const std::string& key) {
  auto it = pools_.find(key);
  return it == pools_.end() ? nullptr : it->second.get();
}

PoolRouter::~PoolRouter() {
  // Every pool's idle sandboxes told at once: their workers end side by side, and each pool's
  // destructor then waits for its own within one grace (kRetireGraceMs) that has mostly passed.
  for (auto& [key, pool] : pools_) pool->discard_idle();
}

Result<Worker> PoolRouter::launch(const json& job) {
  std::string key = key_of(job);
  if (auto* pool = find(key)) return pool->launch(job);
  if (auto it = others_.find(key); it != others_.end()) return it->second->launch(job);
  auto it = unpooled_.find(key);
  return launch_cold(cold_, job, it != unpooled_.end() ? it->second : "no pool serves this tool");
}

void PoolRouter::tick() {
  for (auto& [key, pool] : pools_) pool->tick();
  for (auto& [key, l] : others_) l->tick();
}

int PoolRouter::next_tick_ms() const {
  int soonest = -1;
  for (auto& [key, pool] : pools_) {
    int ms = pool->next_tick_ms();
    if (ms >= 0 && (soonest < 0 || ms < soonest)) soonest = ms;
  }
  for (auto& [key, l] : others_) {
    int ms = l->next_tick_ms();
    if (ms >= 0 && (soonest < 0 || ms < soonest)) soonest = ms;
  }
  return soonest;
}

}  // namespace sbx::mcp
