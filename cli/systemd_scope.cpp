#include "cli/systemd_scope.hpp"

#include <limits.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/linux/host_blockers.hpp"
#include "runtime/linux/limits_plan.hpp"
#include "runtime/model/limits_table.hpp"
#include "runtime/linux/scope_reuse.hpp"
#include "runtime/base/signals.hpp"

namespace sbx::cli {

namespace {

bool on_path(const char* prog) {
  const char* p = std::getenv("PATH");
  std::string path = p && *p ? p : "/usr/local/bin:/usr/bin:/bin";
  std::size_t i = 0;
  while (i <= path.size()) {
    std::size_t j = path.find(':', i);
    if (j == std::string::npos) j = path.size();
    std::string dir = path.substr(i, j - i);
    if (!dir.empty() && ::access((dir + "/" + prog).c_str(), X_OK) == 0) return true;
    i = j + 1;
  }
  return false;
}

// The runtime directory systemd-run will look in: $XDG_RUNTIME_DIR, else pam_systemd's
// /run/user/<uid> (a cron job or `su -` often lacks the variable while the manager runs).
std::string runtime_dir() {
  const char* rt = std::getenv("XDG_RUNTIME_DIR");
  if (rt && *rt) return rt;
  return "/run/user/" + std::to_string(::geteuid());
}

}  // namespace

std::vector<std::string> systemd_scope_argv(const std::string& self_exe, const std::vector<std::string>& argv) {
  // --scope runs the command in this process (stdio, signals and exit status stay ours);
  // Delegate=yes hands the scope's cgroup to the user, so sbx can create run cgroups below it.
  std::vector<std::string> out = {"systemd-run", "--user",    "--scope", "-p",    "Delegate=yes",
                                  "--quiet",     "--collect", "--",      self_exe};
  bool after_dashdash = false;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    if (!after_dashdash && (argv[i] == "--systemd-scope" || argv[i] == "--no-systemd-scope")) continue;
    if (argv[i] == "--") after_dashdash = true;
    out.push_back(argv[i]);
  }
  return out;
}

ScopeFacts gather_scope_facts(const RunSpec& spec, const CgroupInfo& info) {
  ScopeFacts f;
  f.rootless = ::geteuid() != 0;
  const char* in = std::getenv(kInScopeEnv);
  f.in_scope = in && *in;
  f.cgroup_usable = plan_limits(spec.limits, info, f.rootless, true).use_cgroup;
  // A cgroup of the user's that holds other processes (a desktop terminal's scope, with its
  // shell) is writable, but cgroup v2 gives no controllers below it (no internal processes):
  // RunCgroup would fail with EBUSY. A fresh scope is the fix there too.
  if (f.rootless && f.cgroup_usable && !info.mount.empty()) {
    std::string own = own_cgroup_path(info.self_path);
    if (own != "/") {
      auto procs = read_file(info.mount + own + "/cgroup.procs");
      std::istringstream procs_in(procs ? *procs : std::string());
      long pid;
      while (procs_in >> pid)
        if (pid != ::getpid()) {
          f.cgroup_usable = false;
          f.own_cgroup_busy = true;
          break;
        }
    }
  }
  f.layout = info.layout;
  for (auto& k : limit_kinds())  // a limit of the limit plan: cgroup v2, else an rlimit fallback
    f.wants_cgroup = f.wants_cgroup || (k.enforced == LimitEnforcement::plan && limit_set(spec.limits, k));
  if (f.rootless && !f.in_scope && !f.cgroup_usable) {  // only then is it worth a connect()
    std::string rt = runtime_dir();
    for (const char* s : {"/systemd/private", "/bus"}) {
      if (unix_socket_answers(rt + s)) {
        f.user_manager = rt + s;
        break;
      }
    }
    f.user_manager_probe = rt + "/systemd/private, " + rt + "/bus";
    f.have_systemd_run = on_path("systemd-run");
  }
  return f;
}

std::string scope_origin(std::string* unit) {
  const char* in = std::getenv(kInScopeEnv);
  std::string v = in ? in : "";
  ::unsetenv(kInScopeEnv);
  if (v != "auto" && v != "flag") return "";
  std::string self = detect_cgroup().self_path;
  // The scope itself, or its sbx-supervisor leaf once a RunCgroup moved sbx there.
  std::string own = own_cgroup_path(self);
  const std::string suffix = ".scope";
  bool scope = own.size() > suffix.size() && own.compare(own.size() - suffix.size(), suffix.size(), suffix) == 0;
  if (scope && unit) *unit = own.substr(own.rfind('/') + 1);
  return scope ? v : "";
}

std::optional<int> maybe_reexec_in_systemd_scope(const std::vector<std::string>& argv, const RunSpec& spec,
                                                 ScopeMode mode, std::string& why, std::string* reused_unit) {
  ScopeDecision d = decide_systemd_scope(mode, gather_scope_facts(spec, detect_cgroup()));
  why = d.why;
  if (d.error) return usage_error(d.why);
  if (!d.reexec) {
    if (mode == ScopeMode::always) spdlog::info("--systemd-scope: not re-executing: {}", d.why);
    return std::nullopt;
  }
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return usage_error(std::string("systemd scope: cannot find sbx's own binary: ") + std::strerror(errno));
  const std::string self_exe(exe, static_cast<std::size_t>(n));
  const char* reuse = std::getenv(kScopeReuseEnv);
  if (mode == ScopeMode::automatic && reused_unit && !(reuse && std::string(reuse) == "0")) {
    int idle = kDefaultKeeperIdle;
    if (const char* e = std::getenv(kKeeperIdleEnv); e && *e) {
      auto p = parse_keeper_idle(e, kKeeperIdleEnv);
      if (!p) return usage_error(p.error().message);
      idle = *p;
    }
    // 5 s covers starting the scope and its keeper on a slow (emulated) machine; joining an
    // existing one takes one round trip to the user manager.
    auto j = join_reused_scope(runtime_dir(), self_exe, idle, 5000);
    if (j) {
      *reused_unit = j->unit;
      why = d.why + "; joined " + j->cgroup.substr(j->cgroup.rfind('/' + j->unit) + 1) +
            (j->started ? " (started the scope)" : " (reused)") + " via " + j->manager;
      return std::nullopt;
    }
    spdlog::info("cannot join {}: {}; re-executing under systemd-run instead", reused_scope_unit(::geteuid()),
                 j.error().describe());
  }
  auto args = systemd_scope_argv(self_exe, argv);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  ::setenv(kInScopeEnv, mode == ScopeMode::always ? "flag" : "auto", 1);
  // systemd-run finds the manager through $XDG_RUNTIME_DIR only (runtime_dir() above).
  bool set_rt = !std::getenv("XDG_RUNTIME_DIR");
  if (set_rt) ::setenv("XDG_RUNTIME_DIR", runtime_dir().c_str(), 1);
  spdlog::info("re-executing under systemd-run --user --scope -p Delegate=yes ({})", d.why);
  int err;
  {
    // systemd-run gets the mask sbx was started with; the re-executed sbx blocks again (main).
    CallerSignalMaskScope callers_mask;
    ::execvp("systemd-run", cargs.data());
    err = errno;
  }
  ::unsetenv(kInScopeEnv);
  if (set_rt) ::unsetenv("XDG_RUNTIME_DIR");
  if (mode == ScopeMode::always)
    return usage_error(std::string("--systemd-scope: cannot run systemd-run: ") + std::strerror(err) +
                       (err == ENOENT ? " (install systemd, or drop --systemd-scope)" : ""));
  why = std::string("cannot run systemd-run: ") + std::strerror(err);
  return std::nullopt;  // automatic: carry on without the scope, as if there were no manager
}

}  // namespace sbx::cli
