#include "runtime/linux/scope_reuse.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/linux/cgroup.hpp"
#include "runtime/base/clock.hpp"
#include "runtime/base/dbus_wire.hpp"
#include "runtime/base/fsutil.hpp"

namespace sbx {

namespace {

constexpr const char* kKeeperLeaf = "keeper";
constexpr const char* kRunPrefix = "run-";

void sleep_ms(int ms) {
  struct timespec ts {
    ms / 1000, (ms % 1000) * 1000000L
  };
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

// Our cgroup v2 path ("/user.slice/...") from /proc/self/cgroup, "" when there is none.
std::string self_cgroup() {
  auto t = read_file("/proc/self/cgroup");
  if (!t) return "";
  std::size_t at = t->find("0::");
  if (at != 0 && (at == std::string::npos || (*t)[at - 1] != '\n')) return "";
  std::size_t end = t->find('\n', at);
  return t->substr(at + 3, end == std::string::npos ? std::string::npos : end - at - 3);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string basename_of(const std::string& p) {
  std::size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

std::string parent_of(const std::string& p) {
  std::size_t s = p.rfind('/');
  return s == std::string::npos || s == 0 ? "/" : p.substr(0, s);
}

// One write(2) of `data` to an existing cgroup file (cgroup files take each write whole).
Status write_file(const std::string& path, const std::string& data) {
  bool opened = false;
  if (int err = write_whole(path, data, &opened))
    return make_error("systemd-scope", (opened ? "write " : "open ") + path, err);
  return {};
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Starts `systemd-run --user --scope --unit=sbx-runs-<uid> -p Delegate=yes ... sbx scope-keeper`
// detached from this process (a new session, stdio on /dev/null, reparented away by a double
// fork, so that sbx neither waits for it nor leaves a zombie). Whether it took (or another sbx's
// did) is seen by the next AttachProcessesToUnit.
// The keeper's note of where its scope is: read without following a link or waiting on a FIFO,
// bounded, and used only when it has the one shape it can have (an absolute cgroup path without
// '..' ending in the scope's own name), so that a planted file makes no directory elsewhere.
std::optional<std::string> read_hint(const std::string& file, const std::string& unit) {
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.ok()) return std::nullopt;
  struct stat st;
  char buf[4096];
  ssize_t n = -1;
  if (::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid())
    n = ::read(fd.get(), buf, sizeof buf);
  if (n <= 0 || n == static_cast<ssize_t>(sizeof buf)) return std::nullopt;
  std::string p = trim(std::string(buf, static_cast<std::size_t>(n)));
  if (p.empty() || p[0] != '/' || p.find("/..") != std::string::npos || p.find('\0') != std::string::npos ||
      !ends_with(p, "/" + unit))
    return std::nullopt;
  return p;
}

Status start_keeper(const std::string& runtime_dir, const std::string& self_exe, const std::string& unit, int idle_s) {
  std::string unit_arg = "--unit=" + unit.substr(0, unit.size() - std::string(".scope").size());
  std::string idle = std::to_string(idle_s);
  std::vector<std::string> args = {"systemd-run",  "--user",  "--scope",   unit_arg, "-p",
                                   "Delegate=yes", "--quiet", "--collect", "--",     self_exe,
                                   "scope-keeper", "--idle",  idle};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string rt = "XDG_RUNTIME_DIR=" + runtime_dir;
  pid_t pid = ::fork();
  if (pid < 0) return sys_error("systemd-scope", "fork for systemd-run");
  if (pid == 0) {
    // The child of a (possibly multi-signal-blocking) sbx: plain signal state for the keeper, so
    // that systemd's SIGTERM at the scope's stop ends it.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    // The keeper lives for minutes: it must hold nothing of the run that started it — no pipe a
    // caller waits on for EOF (a make jobserver, pass_fds), no working directory, no environment
    // (secrets passed as env:VAR live there). Only what systemd-run needs to reach the manager.
    ::close_range(3, ~0U, 0);
    if (::chdir("/") != 0) ::_exit(127);
    static char path_env[] = "PATH=/usr/local/bin:/usr/bin:/bin";
    char* envp[] = {rt.data(), path_env, nullptr};
    ::execvpe("systemd-run", argv.data(), envp);
    ::_exit(127);
  }
  int st;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  return {};
}

// One AttachProcessesToUnit call: the reply (METHOD_RETURN, or ERROR with its name).
Result<dbus::Message> attach(const std::string& socket, bool bus, const std::string& unit, const std::string& sub,
                             pid_t pid, std::int64_t deadline) {
  dbus::Connection c;
  SBX_TRY(c.open(socket, bus, deadline));
  dbus::BodyWriter b;
  b.str(unit);
  b.str(sub);
  b.u32_array({static_cast<std::uint32_t>(pid)});
  return c.call("/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager", "AttachProcessesToUnit",
                "org.freedesktop.systemd1", "ssau", b.bytes(), deadline);
}

// Removes an empty cgroup tree bottom-up (rmdir only: a cgroup's files go with its directory).
// Depth-bounded; a populated cgroup stays (EBUSY).
void remove_cgroup_tree(const std::string& dir, int depth = 0) {
  if (depth > 16) return;
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> subs;
    while (struct dirent* e = ::readdir(d))
      if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        subs.push_back(e->d_name);
    ::closedir(d);
    for (auto& s : subs) remove_cgroup_tree(dir + "/" + s, depth + 1);
  }
  ::rmdir(dir.c_str());
}

}  // namespace

std::string reused_scope_unit(uid_t uid) { return "sbx-runs-" + std::to_string(uid) + ".scope"; }

Result<int> parse_keeper_idle(const std::string& text, const std::string& where) {
  bool digits = !text.empty() && text.size() <= 9 && text.find_first_not_of("0123456789") == std::string::npos;
  long v = digits ? std::strtol(text.c_str(), nullptr, 10) : 0;
  if (!digits || v < 1 || v > kMaxKeeperIdle)
    return make_error(
        "usage",
        where + ": '" + text + "' is not a whole number of seconds from 1 to " + std::to_string(kMaxKeeperIdle),
        EINVAL);
  return static_cast<int>(v);
}

Result<JoinedScope> join_reused_scope(const std::string& runtime_dir, const std::string& self_exe, int keeper_idle_s,
                                      int budget_ms) {
  const std::int64_t deadline = monotonic_ms() + budget_ms;
  JoinedScope j;
  j.unit = reused_scope_unit(::geteuid());
  const pid_t pid = ::getpid();
  std::string sub = "/";
  sub.append(kRunPrefix).append(std::to_string(pid));
  // The private socket first (no bus daemon in between, no Hello), as systemd-run does.
  std::string socket = runtime_dir + "/systemd/private";
  bool bus = false;
  struct stat st;
  if (::stat(socket.c_str(), &st) != 0) {
    socket = runtime_dir + "/bus";
    bus = true;
  }
  j.manager = socket;
  // Each call gets a short bound of its own (a manager that hangs costs ~1 s, not the budget).
  auto step = [&] { return std::min<std::int64_t>(deadline, monotonic_ms() + 1000); };
  // systemd (252) attaches into an existing subcgroup only: sbx makes run-<pid> itself (the scope
  // is the user's through Delegate=yes) where the keeper says the scope is. That file is only a
  // hint: /proc/self/cgroup is checked after the move.
  const std::string hint = runtime_dir + "/" + j.unit + ".cgroup";
  const std::string mount = detect_cgroup().mount;
  bool started = false;
  std::string last;
  for (;;) {
    if (auto path = read_hint(hint, j.unit); path && !mount.empty()) ::mkdir((mount + *path + sub).c_str(), 0755);
    auto r = attach(socket, bus, j.unit, sub, pid, step());
    if (!r) return r.error();
    if (r->type == dbus::kMethodReturn) break;
    // "Unit ... not loaded" (NoSuchUnit), "Unit is not active" (InvalidArgs) or, while the keeper
    // starts, "No such file or directory": start the scope once, then ask again until the budget
    // is spent (a concurrent sbx may have started it: systemd refuses the second systemd-run).
    last = r->error_name + ": " + dbus::first_string(*r);
    if (!started) {
      SBX_TRY(start_keeper(runtime_dir, self_exe, j.unit, keeper_idle_s));
      started = j.started = true;
    }
    if (monotonic_ms() + 50 >= deadline)
      return make_error(
          "systemd-scope",
          "AttachProcessesToUnit(" + j.unit + ", " + sub + ") within " + std::to_string(budget_ms) + " ms: " + last,
          ETIMEDOUT);
    sleep_ms(50);
  }
  // Proof, not trust: the kernel's word on where this process now is.
  j.cgroup = self_cgroup();
  if (!ends_with(j.cgroup, "/" + j.unit + sub))
    return make_error("systemd-scope",
                      "after AttachProcessesToUnit sbx is in '" + j.cgroup + "', not in " + j.unit + sub, EPROTO);
  // The keeper enables the controllers for the scope's children once it has moved into its leaf;
  // a run that started the scope waits (bounded) for that, or its limits would fall back.
  CgroupInfo cg = detect_cgroup();
  const std::string scope_dir = cg.mount + parent_of(j.cgroup);
  for (;;) {
    auto ctl = read_file(scope_dir + "/cgroup.subtree_control");
    if (ctl && !trim(*ctl).empty()) break;
    if (monotonic_ms() + 20 >= deadline)
      return make_error("systemd-scope",
                        j.unit + ": no controllers enabled for its children within " + std::to_string(budget_ms) +
                            " ms (is its keeper running?)",
                        ETIMEDOUT);
    sleep_ms(20);
  }
  return j;
}

int run_scope_keeper(int idle_s) {
  CgroupInfo cg = detect_cgroup();
  const std::string unit = reused_scope_unit(::geteuid());
  std::string self = self_cgroup();
  if (basename_of(self) == kKeeperLeaf) self = parent_of(self);
  if (cg.mount.empty() || basename_of(self) != unit) {
    std::string line = "sbx: scope-keeper: runs only inside " + unit +
                       " (sbx run starts it there); this process is in '" + self + "'\n";
    (void)!::write(2, line.data(), line.size());
    return 125;
  }
  const std::string scope = cg.mount + self;
  // The no-internal-processes rule: the scope can give its children controllers only once no
  // process is directly in it, so the keeper lives in a leaf of its own.
  ::mkdir((scope + "/" + kKeeperLeaf).c_str(), 0755);
  if (auto st = write_file(scope + "/" + kKeeperLeaf + "/cgroup.procs", std::to_string(::getpid())); !st) {
    std::string line =
        "sbx: scope-keeper: cannot move into " + scope + "/" + kKeeperLeaf + ": " + st.error().describe() + "\n";
    (void)!::write(2, line.data(), line.size());
    return 1;
  }
  std::string want;
  if (auto have = read_file(scope + "/cgroup.controllers")) {
    std::string padded = " ";
    padded.append(trim(*have)).append(" ");
    for (const char* c : {"memory", "pids", "cpu"}) {
      std::string word = " ";
      word.append(c).append(" ");
      if (padded.find(word) != std::string::npos) want.append(want.empty() ? "+" : " +").append(c);
    }
  }
  if (!want.empty())
    if (auto st = write_file(scope + "/cgroup.subtree_control", want); !st) {
      std::string line =
          "sbx: scope-keeper: cannot enable " + want + " in " + scope + ": " + st.error().describe() + "\n";
      (void)!::write(2, line.data(), line.size());
      return 1;
    }
  // Where the scope is, for runs to make their run-<pid> in (join_reused_scope); written whole
  // (rename) so that a run never reads half of it.
  std::string hint;
  if (const char* rt = std::getenv("XDG_RUNTIME_DIR"); rt && *rt) {
    hint = std::string(rt) + "/" + unit + ".cgroup";
    std::string tmp = hint + ".tmp";
    if (write_file_durable(tmp, self).ok()) ::rename(tmp.c_str(), hint.c_str());
  }
  std::int64_t last_busy = monotonic_ms();
  for (;;) {
    sleep_ms(1000);
    bool busy = false;
    if (DIR* d = ::opendir(scope.c_str())) {
      std::vector<std::string> runs;
      while (struct dirent* e = ::readdir(d))
        if (e->d_type == DT_DIR && std::strncmp(e->d_name, kRunPrefix, std::strlen(kRunPrefix)) == 0)
          runs.push_back(e->d_name);
      ::closedir(d);
      for (auto& r : runs) {
        auto ev = read_file(scope + "/" + r + "/cgroup.events");
        // "populated 1": a run is in it (or below it). A freshly made run-PID before the manager
        // moved its sbx in reads "populated 0": it is left for a second look unless still empty
        // after a sweep (its sbx then failed to join, or is long gone).
        if (!ev || ev->find("populated 0") == std::string::npos) {
          busy = true;
          continue;
        }
        struct stat st;
        if (::stat((scope + "/" + r).c_str(), &st) == 0 && ::time(nullptr) - st.st_mtime < 2) {
          busy = true;
          continue;
        }
        remove_cgroup_tree(scope + "/" + r);
      }
    }
    if (busy) last_busy = monotonic_ms();
    else if (monotonic_ms() - last_busy >= std::int64_t{idle_s} * 1000) {
      if (!hint.empty()) ::unlink(hint.c_str());
      return 0;
    }
  }
}

}  // namespace sbx
