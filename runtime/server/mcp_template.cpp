// Warm templates: the server's launcher and the template host (mcp_template.hpp).
#include "runtime/server/mcp_template.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/base/clock.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/base/trace_field.hpp"
#include "runtime/image/self_digest.hpp"
#include "runtime/launch/sandbox.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/linux/unix_peer.hpp"
#include "runtime/linux/userns.hpp"
#include "runtime/model/caps.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/server/mcp_pool.hpp"

namespace sbx::mcp {
namespace {
using nlohmann::json;

constexpr const char* kControlMount = "/run/sbx-template";  // warm_template.py's CONTROL_DIR
constexpr const char* kControlSocket = "sock";              // in it: warm_template.py, main()
std::string control_socket(const std::string& dir) { return dir + "/" + kControlSocket; }
// How far below its host a template's driver may be (seal()): it is three generations down.
constexpr int kMaxDriverDepth = 8;

// A template's key (mcp_worker.hpp, kTemplateKeyBytes), from the kernel's generator.
Result<std::string> make_template_key() {
  std::string raw(kTemplateKeyBytes, '\0');
  if (::getrandom(raw.data(), raw.size(), 0) != static_cast<ssize_t>(raw.size()))
    return sys_error("mcp", "getrandom for the template's key");
  return hex_lower(raw);
}

void log_line(const std::string& s) {
  std::string line = "sbx: mcp: template: " + printable(s) + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace

Result<ControlDir> ControlDir::open(const std::string& path) {
  ControlDir d;
  auto slash = path.rfind('/');
  d.name_ = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (d.name_.rfind("sbx-template.", 0) != 0)
    return make_error("mcp", path + " is not a template's control directory (sbx-template.*)", EINVAL);
  d.parent_ = UniqueFd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.parent_.ok()) return sys_error("mcp", "open " + parent);
  d.dir_ = UniqueFd(::openat(d.parent_.get(), d.name_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d.dir_.ok()) return sys_error("mcp", "open the template's control directory " + path);
  struct stat st;
  if (::fstat(d.dir_.get(), &st) != 0 || st.st_uid != ::geteuid()) {
    d.dir_.reset();  // not ours: nothing of it is removed
    return make_error("mcp", "the template's control directory " + path + " is not this user's", EPERM);
  }
  d.path_ = path;
  return d;
}

ControlDir& ControlDir::operator=(ControlDir&& o) noexcept {
  if (this != &o) {
    remove();
    parent_ = std::move(o.parent_);
    dir_ = std::move(o.dir_);
    path_ = std::move(o.path_);
    name_ = std::move(o.name_);
  }
  return *this;
}

void ControlDir::remove() {
  if (!dir_.ok()) return;
  if (::unlinkat(dir_.get(), kControlSocket, 0) != 0 && errno != ENOENT)
    log_line("could not remove the template's socket in " + path_ + ": " + std::strerror(errno));
  // Its name, only while it still leads to this directory (not a link, nor another put there).
  if (named() && ::unlinkat(parent_.get(), name_.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
    log_line("could not remove the template's control directory " + path_ + ": " + std::strerror(errno));
  disown();
}

bool ControlDir::named() const {
  struct stat mine, named;
  return dir_.ok() && ::fstat(dir_.get(), &mine) == 0 &&
         ::fstatat(parent_.get(), name_.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(named.st_mode) &&
         named.st_dev == mine.st_dev && named.st_ino == mine.st_ino;
}

void ControlDir::disown() {
  dir_.reset();
  parent_.reset();
  path_.clear();
}

TemplateNote parse_template_note(const std::string& text) {
  TemplateNote n;
  for (std::size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    std::string line = text.substr(at, nl - at);
    if (at == 0 && line.rfind("template ", 0) == 0) {  // the host's own, first line
      auto sp = line.find(' ', 9);
      auto sp2 = sp == std::string::npos ? sp : line.find(' ', sp + 1);
      if (sp2 != std::string::npos) {
        n.run_id = line.substr(9, sp - 9);
        n.digest = line.substr(sp + 1, sp2 - sp - 1);
        n.key = line.substr(sp2 + 1);
      }
    } else if (line == "ready") {
      n.ready = true;
    } else if (line.rfind("failed ", 0) == 0 && n.failed.empty()) {
      n.failed = line.substr(7);
    }
  }
  return n;
}

// ---- the server's side ------------------------------------------------------------------------

TemplateLauncher::TemplateLauncher(std::vector<std::string> host_argv, std::string control_root, SandboxLauncher& cold,
                                   std::int64_t max_idle_ms, std::vector<std::string> pooled_argv,
                                   std::size_t pool_size)
    : argv_(std::move(host_argv)),
      root_(std::move(control_root)),
      cold_(cold),
      max_idle_us_(max_idle_ms * 1000),
      pooled_argv_(std::move(pooled_argv)),
      pool_size_(pool_size) {}

TemplateLauncher::~TemplateLauncher() {
  // The pooled forks first: each worker discards its fork and ends (bounded, PoolLauncher).
  pool_.reset();
  retired_pools_.clear();
  for (auto& h : hosts_) {
    if (h.pidfd.ok()) (void)::syscall(SYS_pidfd_send_signal, h.pidfd.get(), SIGTERM, nullptr, 0);
    h.sock.reset();
  }
  for (auto& h : hosts_) {
    // The host records the template's run and exits within its kill grace; bounded all the same.
    pollfd p{h.pidfd.get(), POLLIN, 0};
    if (h.pidfd.ok() && ::poll(&p, 1, kRetireGraceMs) == 0) {
      (void)::syscall(SYS_pidfd_send_signal, h.pidfd.get(), SIGKILL, nullptr, 0);
      (void)::poll(&p, 1, kRetireGraceMs);
    }
    reap(h);
  }
}

Status TemplateLauncher::start() {
  // Not in the state dir, which no sandbox may write (preflight.hpp, check_binds_spare_state):
  // a directory of its own (mkdtemp: 0700, unguessable) holding nothing but the driver's socket.
  std::string tmpl = root_ + "/sbx-template.XXXXXX";
  if (!::mkdtemp(tmpl.data())) return sys_error("mcp", "make a template's control directory in " + root_);
  // Open at once: 0700 and this user's, its name cannot have been taken since (ControlDir).
  auto dir = ControlDir::open(tmpl);
  if (!dir) {
    (void)::rmdir(tmpl.c_str());
    return dir.error();
  }
  // The driver's socket must fit a sockaddr_un (108 bytes with its NUL).
  if (control_socket(tmpl).size() >= sizeof(sockaddr_un::sun_path))
    return make_error(
        "mcp", "$TMPDIR is too long for a template's socket (" + control_socket(tmpl) + "): set a shorter TMPDIR",
        ENAMETOOLONG);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return sys_error("mcp", "socketpair");
  UniqueFd mine(sv[0]), theirs(sv[1]);
  UniqueFd out(::memfd_create("sbx-mcp-template", MFD_CLOEXEC));
  if (!out.ok()) return sys_error("mcp", "memfd_create for the template's worker");
  std::vector<std::string> argv = argv_;
  argv.insert(argv.end(), {"--template-host", tmpl});
  auto w = spawn_worker(argv, theirs.get(), std::move(out), SIGTERM);
  if (!w) return w.error();
  Host h;
  h.pid = w->pid;
  h.pidfd = std::move(w->pidfd);
  h.response = std::move(w->response);
  h.sock = std::move(mine);
  h.dir = std::move(*dir);
  h.born_us = monotonic_us();
  hosts_.push_back(std::move(h));
  return {};
}

// As root the control directory was the sandbox's, for the driver to make its socket in: once
// the driver is ready it becomes root's again, so that nothing in the template (a preload) can
// put another socket, or a link to one, where the calls' workers connect. The socket becomes
// root's too, mode 0600: the sandbox's host uid is every default sandbox's, and one that could
// reach the path (a profile binding the host's $TMPDIR) could otherwise send the template a job
// of its own (its argv, its filter). The workers connect as root.
//
// Until then that uid (rootless: the caller's, always) could also have put a socket of its own in
// the driver's place, from another sandbox that reaches the path: its owner and mode say nothing
// of who listens. The kernel does: the listener's pidfd (linux/unix_peer.hpp), whose process must
// be one of this host's own descendants (its driver). The workers then connect only to that listener
// (sandbox.cpp, connect_template), whoever may write the directory later; and as root the driver
// serves only root's connections (template_spec), so that none queued before now is served.
std::string TemplateLauncher::seal(Host& h, const TemplateNote& n) {
  auto fail = [&](const std::string& why) {
    stop(h, why);
    back_off();  // not rebuilt at once: whatever put it there may be there for the next one too
    return why;
  };
  // The workers connect to the socket by its name: only while it leads to the directory made.
  if (!h.dir.named()) return fail("its control directory " + h.dir.path() + " was replaced");
  if (h.sealed) return "";
  h.sealed = true;
  const int dir = h.dir.fd();  // the directory made, whatever its name leads to now
  const std::string sock_path = control_socket(h.dir.path());
  if (::geteuid() == 0) {
    // The directory first: from then on the sandbox's uid cannot swap the socket for a link.
    if (::fchown(dir, 0, 0) != 0 || ::fchmod(dir, 0755) != 0)
      return fail("could not take back its control directory " + h.dir.path() + ": " + std::strerror(errno));
  }
  struct stat st;
  if (::fstatat(dir, kControlSocket, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(st.st_mode))
    return fail("its control socket " + sock_path + " is not a socket");
  if (::geteuid() == 0 && (::fchownat(dir, kControlSocket, 0, 0, AT_SYMLINK_NOFOLLOW) != 0 ||
                           ::fchmodat(dir, kControlSocket, 0600, 0) != 0))
    return fail("could not take back its control socket " + sock_path + ": " + std::strerror(errno));
  // The driver is the host's great-grandchild: the host's child is the sandbox's init, whose
  // child, the program, forks the template in a pid namespace of its own (warm_template.py,
  // _pid_no_call_has). Alive after the walk: the pid walked was its own all along.
  auto conn = connect_unix_at(dir, kControlSocket, "the template's control socket " + sock_path, "template");
  if (!conn) return fail(conn.error().describe());
  auto peer = unix_peer(conn->get(), "template");
  if (!peer) return fail("its control socket " + sock_path + " is not its driver's (" + peer.error().describe() + ")");
  if (!descends_from(peer->pid, h.pid, kMaxDriverDepth) || !peer->alive())
    return fail("its control socket " + sock_path + " is not its driver's (it listens in process " +
                std::to_string(peer->pid) + ", not one of the template's)");
  h.listener_pid = peer->pid;
  h.listener_id = peer->id;
  // The file stat'ed before the connect, for socket_replaced. (One swapped out and back around
  // the connect would go unseen here: the calls' workers still refuse it, and run cold.)
  h.sock_dev = st.st_dev;
  h.sock_ino = st.st_ino;
  // This connection becomes the server's control connection: the key proves it so to the
  // driver, once (warm_template.py, _server_hello). Into an empty socket: never a wait.
  const std::string hello = "ctl" + n.key;
  if (!is_template_key(n.key) || ::send(conn->get(), hello.data(), hello.size(), MSG_DONTWAIT | MSG_NOSIGNAL) !=
                                     static_cast<ssize_t>(hello.size()))
    return fail("could not open its control connection: " + std::string(std::strerror(errno)));
  h.ctl = std::move(*conn);
  h.run_id = n.run_id;
  return "";
}

std::string TemplateLauncher::socket_replaced(const Host& h) const {
  if (!h.sealed || h.stopping) return "";
  if (!h.dir.named()) return "its control directory " + h.dir.path() + " was replaced";
  struct stat st;
  if (::fstatat(h.dir.fd(), kControlSocket, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_dev != h.sock_dev ||
      st.st_ino != h.sock_ino)
    return "its control socket " + control_socket(h.dir.path()) + " is no longer its driver's (replaced)";
  return "";
}

std::string TemplateLauncher::call_token(const std::string& run_id) {
  auto h = std::find_if(hosts_.begin(), hosts_.end(), [&](const Host& x) { return x.run_id == run_id; });
  if (run_id.empty() || h == hosts_.end() || h->stopping || !h->ctl.ok()) return "";
  auto token = make_template_key();
  if (!token) return "";
  const std::string digest = sha256_hex(*token);
  if (::send(h->ctl.get(), digest.data(), digest.size(), MSG_DONTWAIT | MSG_NOSIGNAL) !=
      static_cast<ssize_t>(digest.size()))
    return "";
  return *token;
}

void TemplateLauncher::back_off() {
  backoff_ms_ = next_build_backoff_ms(backoff_ms_);
  backoff_until_us_ = monotonic_us() + backoff_ms_ * 1000LL;
}

void TemplateLauncher::read_note(Host& h) { read_worker_note(h.sock.get(), h.note); }

void TemplateLauncher::stop(Host& h, const std::string& why) {
  if (h.stopping) return;
  log_line("stopping template (worker " + std::to_string(h.pid) + "): " + why);
  h.stopping = true;
  // SIGTERM: the host's supervisor ends the template's run and records it (mcp_template.hpp).
  if (h.pidfd.ok()) (void)::syscall(SYS_pidfd_send_signal, h.pidfd.get(), SIGTERM, nullptr, 0);
  h.stop_at_us = monotonic_us() + kRetireGraceMs * 1000LL;
}

void TemplateLauncher::reap(Host& h) {
  if (h.pid > 0) {
    int ws = 0;
    while (::waitpid(h.pid, &ws, 0) < 0 && errno == EINTR) {}
    h.pid = -1;
  }
  h.dir.remove();
}

std::string TemplateLauncher::await_first(int timeout_ms) {
  if (hosts_.empty())
    if (auto st = start(); !st) return st.error().describe();
  Host& h = hosts_.back();
  const std::int64_t deadline = monotonic_us() + timeout_ms * 1000LL;
  for (;;) {
    read_note(h);
    TemplateNote n = parse_template_note(h.note);
    if (!n.failed.empty()) return n.failed;
    if (n.ready) {
      if (std::string why = seal(h, n); !why.empty()) return "the template was stopped: " + why;
      sync_pool();  // its pooled forks start now, beside the server's start
      return "";
    }
    if (h.note.size() >= kMaxWorkerNoteBytes) return "the template said too much before it was ready";
    std::int64_t left_ms = (deadline - monotonic_us()) / 1000;
    if (left_ms <= 0)
      return "the template was not ready within " + std::to_string(timeout_ms / 1000) +
             " s (a preload that waits for input, or an image too slow to start it)";
    pollfd fds[2] = {{h.sock.get(), POLLIN, 0}, {h.pidfd.get(), POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(std::min<std::int64_t>(left_ms, 1000))) < 0 && errno != EINTR)
      return std::string("poll: ") + std::strerror(errno);
    if (fds[1].revents) {
      read_note(h);
      n = parse_template_note(h.note);
      if (n.ready) return "";
      return n.failed.empty() ? "the template's worker ended before it was ready (see its message above)" : n.failed;
    }
  }
}

Result<Worker> TemplateLauncher::launch(const json& job) {
  auto cold = [&](const std::string& why) { return launch_cold(cold_, job, why); };
  // The template serves the warm interpreter's language only (python3's: model/warm.hpp).
  std::string language = job.value("request", json::object()).value("language", "");
  if (language != "python")
    return cold("the template runs python; this call's language is " +
                (language.empty() ? std::string("not a language (a command)") : "'" + language + "'"));
  tick();
  // Forks of a live template (sync_pool): the current one's, or while a new one starts, the
  // one before's.
  if (pool_) return pool_->launch(job);
  if (hosts_.empty() || hosts_.back().stopping) return cold("no template is running (it is being rebuilt)");
  Host& h = hosts_.back();
  read_note(h);
  TemplateNote n = parse_template_note(h.note);
  if (!n.failed.empty()) return cold("the template could not start: " + n.failed);
  if (!n.ready || n.run_id.empty()) return cold("the template is still starting");
  return on_demand_.launch(job);
}

Result<Worker> TemplateLauncher::OnDemand::launch(const json& job) {
  json t = t_.ready_template();
  if (t.is_null()) return launch_cold(t_.cold_, job, "no template is ready (it is being rebuilt)");
  t["key"] = t_.call_token(t.value("run_id", ""));
  if (t["key"] == "") return launch_cold(t_.cold_, job, "the template could not be told of the call (it is busy)");
  json j = job;
  j["template"] = std::move(t);
  return t_.cold_.launch(j);
}

json TemplateLauncher::ready_template() {
  if (hosts_.empty() || hosts_.back().stopping) return nullptr;
  Host& h = hosts_.back();
  read_note(h);
  TemplateNote n = parse_template_note(h.note);
  if (!n.failed.empty() || !n.ready || n.run_id.empty() || !seal(h, n).empty()) return nullptr;
  return {{"socket", control_socket(h.dir.path())},
          {"listener_pid", h.listener_pid},
          {"listener_id", h.listener_id},
          {"digest", n.digest},
          {"run_id", n.run_id}};
}

// The pool follows the current template: retired (its idle forks discarded, its workers reaped
// off the loop) once another template is ready, or when its own has ended or is being stopped;
// started for a new one. While a new template starts, the old one's forks serve on.
void TemplateLauncher::sync_pool() {
  json t = ready_template();
  const std::string run_id = t.is_null() ? "" : t.value("run_id", "");
  const bool own_serves = std::any_of(hosts_.begin(), hosts_.end(), [&](Host& h) {
    return !h.stopping && !pool_run_id_.empty() && parse_template_note(h.note).run_id == pool_run_id_;
  });
  if (pool_ && (run_id.empty() ? !own_serves : run_id != pool_run_id_)) {
    log_line("retiring the pooled forks of template " + pool_run_id_);
    pool_->retire_all();
    retired_pools_.push_back(std::move(pool_));
    pool_run_id_.clear();
  }
  if (!pool_ && !run_id.empty() && pool_size_ > 0 && !pooled_argv_.empty()) {
    // Each worker's token goes on its socket, not in its argv (mcp_worker.hpp, read_template_key).
    auto argv = pooled_argv_;
    argv.insert(argv.end(), {"--from-template", dump_json(t, -1)});
    pool_ = std::make_unique<PoolLauncher>(argv, pool_size_, on_demand_, max_idle_us_ / 1000,
                                           [this, run_id] { return call_token(run_id); });
    pool_->prepared_only(true);  // a fork is handed out once its pid 1 said it is ready
    pool_->refill();
    pool_run_id_ = run_id;
  }
  if (pool_) pool_->tick();
  for (auto it = retired_pools_.begin(); it != retired_pools_.end();) {
    (*it)->tick();
    it = (*it)->drained() ? retired_pools_.erase(it) : it + 1;
  }
}

void TemplateLauncher::tick() {
  const std::int64_t now = monotonic_us();
  for (auto it = hosts_.begin(); it != hosts_.end();) {
    Host& h = *it;
    read_note(h);
    if (worker_exited(h.pidfd.get())) {
      TemplateNote n = parse_template_note(h.note);
      if (!h.stopping) {
        log_line("the template ended" + (n.failed.empty() ? std::string() : ": " + n.failed) + "; rebuilding");
        backoff_ms_ = n.ready ? 0 : next_build_backoff_ms(backoff_ms_);
        backoff_until_us_ = now + backoff_ms_ * 1000LL;
      }
      reap(h);
      it = hosts_.erase(it);
      continue;
    }
    const bool current = &h == &hosts_.back();
    // Why a new template should take the next calls from the current one: its socket replaced
    // (rootless, by a sandbox of the caller's that reaches $TMPDIR: man sbx-mcp, Templates), or
    // it is older than the pool's max idle.
    std::string renew;
    if (current && !h.stopping && now >= backoff_until_us_) {
      renew = socket_replaced(h);
      if (!renew.empty()) {  // whatever replaced it may replace the next one's: not again at once
        back_off();
      }
    }
    if (renew.empty() && current && !h.stopping && max_idle_us_ > 0 && now >= h.born_us + max_idle_us_)
      renew = "the template is older than --pool-max-idle";
    if (h.stopping && now >= h.stop_at_us) {
      (void)::syscall(SYS_pidfd_send_signal, h.pidfd.get(), SIGKILL, nullptr, 0);
      h.stop_at_us = now + 60'000'000LL;
    } else if (!current && !h.stopping &&
               (now >= h.retired_us + kTemplateDrainMs * 1000LL || hosts_.size() > kMaxTemplates)) {
      stop(h, "retired, its calls drained (or too many retired templates)");
    } else if (!renew.empty()) {
      // This one keeps the calls already forked from it until they end (or kTemplateDrainMs).
      log_line(renew + ": building a new one");
      h.retired_us = now;
      if (auto st = start(); !st) {
        log_line(st.error().describe() + " (the old template serves on)");
        h.born_us = now;
        h.retired_us = 0;
        back_off();
      }
      break;  // start() changed hosts_: the rest is the next tick's
    }
    ++it;
  }
  if ((hosts_.empty() || hosts_.back().stopping) && now >= backoff_until_us_)
    if (auto st = start(); !st) {
      log_line(st.error().describe());
      back_off();
    }
  sync_pool();
}

int TemplateLauncher::next_tick_ms() const {
  if (hosts_.empty()) return std::max<int>(1, static_cast<int>((backoff_until_us_ - monotonic_us()) / 1000));
  int soonest = 1000;
  auto sooner = [&](const PoolLauncher& p) {
    if (int ms = p.next_tick_ms(); ms >= 0) soonest = std::min(soonest, ms);
  };
  if (pool_) sooner(*pool_);
  for (auto& p : retired_pools_) sooner(*p);
  return soonest;
}

// ---- the template host: `sbx mcp-worker --template-host DIR` ----------------------------------

namespace {

// The template's spec: the profile's, its program the driver, with the two capabilities and the
// control directory the driver needs and no wall-clock limit (the server stops it).
Result<RunSpec> template_spec(const WorkerContext& ctx, const LoadedProfile& profile, const std::string& name,
                              const std::string& dir) {
  auto base = spec_from_layers(profile, nullptr, "profile " + name);
  if (!base) return base.error();
  if (base->warm.mode != "template" || base->warm.interpreter != "python3")
    return make_error("usage", "profile " + name + " does not prepare a template (warm.mode)", EINVAL);
  if (base->network.mode != "none" || !base->network.allow.empty())
    return make_error("usage",
                      "profile " + name +
                          " allows network hosts: a template's calls have no network (use \"mode\": "
                          "\"pool\")",
                      EINVAL);
  auto spec = ctx.with_command(*base, template_driver_argv(base->warm));
  if (!spec) return spec.error();
  std::vector<std::string>& keep = spec->capabilities.keep;
  for (const char* cap : {"CAP_SETPCAP", "CAP_SYS_ADMIN"})
    if (std::find(keep.begin(), keep.end(), cap) == keep.end()) keep.push_back(cap);
  std::sort(keep.begin(), keep.end(), [](const std::string& a, const std::string& b) {
    return capability_number(a).value_or(99) < capability_number(b).value_or(99);
  });
  // Read-write for the driver to make its socket, which it then remounts read-only before any
  // preload runs (warm_template.py, main).
  spec->binds.push_back({dir, kControlMount, true, false});
  // Mount points for a call's files (its /code and /in: fresh tmpfs in each fork).
  for (const char* d : {"/code", "/in"})
    if (std::none_of(spec->tmpfs.begin(), spec->tmpfs.end(), [&](const TmpfsMount& t) { return t.dst == d; }))
      spec->tmpfs.push_back({d, 4096, true});
  // As root the calls' workers are root, whom the template's user namespace does not map: its
  // driver serves only such peers (warm_template.py, PEER_UID), never the sandbox's host uid,
  // which other sandboxes share and which may connect before the seal. Set here, never a
  // profile's.
  if (::geteuid() == 0) spec->env["SBX_TEMPLATE_PEERS"] = "unmapped";
  else spec->env.erase("SBX_TEMPLATE_PEERS");
  spec->limits.timeout_ms.reset();
  return spec;
}

}  // namespace

// The host's hold on its control directory. The server removes it as it reaps the host; killed
// outright it never does, and the host outlives it (its parent-death signal is SIGTERM: it ends
// and records the template's run first), so the host removes it as it ends, but only once its
// server is gone: until then the server's workers connect to the socket by its name, which must
// stay taken (ControlDir).
struct HostsControlDir {
  ControlDir dir;
  pid_t server = ::getppid();
  ~HostsControlDir() {
    if (::getppid() == server) dir.disown();
  }
};

int serve_template_host(const WorkerContext& ctx, const std::string& name, const std::string& dir, int note_fd) {
  auto say = [note_fd](const std::string& line) {
    std::string l = line + "\n";
    (void)write_all(note_fd, l, "the template's note");
  };
  auto fail = [&](const Error& e) {
    say("failed " + printable(e.describe()));
    return 125;
  };
  HostsControlDir control;
  if (auto d = ControlDir::open(dir); d) control.dir = std::move(*d);
  else return fail(d.error());
  auto profile = load_profile(name);
  if (!profile) return fail(profile.error());
  auto spec = template_spec(ctx, *profile, name, dir);
  if (!spec) return fail(spec.error());
  auto binary = self_binary_sha256(ctx.dirs);
  RunRequest run;
  run.profile = profile->source;
  run.dirs = ctx.dirs;
  run.invocation_argv = ctx.argv;
  run.template_host = true;
  run.run_id = make_run_id();
  run.io.stdout_fd = note_fd;  // the driver's "ready" or "failed WHY" reaches the server as is
  const std::string digest =
      template_digest(profile->source.resolved_sha256, template_image_identity(spec->image, ctx.dirs), spec->warm,
                      binary ? *binary : "");
  run.record_extra["template"] = {
      {"digest", digest}, {"interpreter", spec->warm.interpreter}, {"preload", spec->warm.preload}};
  run.spec = std::move(*spec);
  if (auto st = apply_named_tenant(ctx.tenant, run); !st) return fail(st.error());
  // As root the sandbox's root is an unprivileged host id (userns.hpp): the control directory
  // becomes that id's, for the driver to make its socket in (rootless it is the caller's already).
  if (::geteuid() == 0) {
    auto id = plan_identity(run.spec, run.tenant.id_slot);
    if (!id) return fail(id.error());
    auto uid = host_id(id->uid_map, id->uid);
    auto gid = host_id(id->gid_map, id->gid);
    if (!uid || !gid || ::fchown(control.dir.fd(), *uid, *gid) != 0)
      return fail(make_error("mcp", "hand the template's control directory " + dir + " to its sandbox", EPERM));
  }
  // The key the server proves itself to the driver with, once (warm_template.py, KEY_DIGEST):
  // rootless the calls' workers and the caller's other sandboxes are one uid, which reaches the
  // control directory, so that no peer check tells the server's workers from a sandbox that
  // binds $TMPDIR. The driver gets its SHA-256 alone, as a secret of the run (never in its
  // record): the template's memory is every call's.
  auto key = make_template_key();
  if (!key) return fail(key.error());
  run.secrets.env.push_back({"SBX_TEMPLATE_KEY_SHA256", sha256_hex(*key)});
  say("template " + run.run_id + " " + digest + " " + *key);
  RunReport rep = run_sandbox(run);
  // A template that could not be built says why (a driver that started said ready or failed).
  if (rep.outcome.status == RunStatus::setup_error && rep.outcome.error)
    say("failed " + printable(rep.outcome.error->describe()));
  if (!rep.recorded) log_line("the template's record could not be stored: " + rep.record_error);
  return 0;
}

}  // namespace sbx::mcp
