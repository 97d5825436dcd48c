#include "runtime/launch/preflight.hpp"

#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "runtime/base/fsutil.hpp"
#include "runtime/record/ledger_key.hpp"
#include "runtime/base/units.hpp"
#include "runtime/launch/facility.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx {
namespace {
using nlohmann::json;

std::string current_dir() {
  char buf[4096];
  return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string();
}

// The flag that sets each limit of the plan (limits_plan.hpp's names).
const char* flag_of(const std::string& limit) {
  if (limit == "cpu_time") return "--cpu-time";
  if (limit == "output") return "--output-limit";
  if (limit == "memory") return "--memory";
  if (limit == "pids") return "--pids";
  if (limit == "cpus") return "--cpus";
  return "--timeout";
}

// As root, init looks a bind source up as the sandbox's root: the host uid and gid that inside 0
// maps to, with no supplementary groups (userns.cpp's become_namespace_root). A child process with
// exactly those credentials takes the same look now, before anything is created, so that a path
// that uid cannot search fails here with the hint instead of inside a half-built sandbox. It
// makes only system calls (fork of a single-threaded sbx). 0 when it can; else the errno.
int stat_as_sandbox_root(const char* path, const IdentityPlan& identity) {
  uid_t uid = identity.uid_map.empty() ? 0 : identity.uid_map.front().outside;
  gid_t gid = identity.gid_map.empty() ? 0 : identity.gid_map.front().outside;
  for (auto& m : identity.uid_map)
    if (m.inside == 0) uid = m.outside;
  for (auto& m : identity.gid_map)
    if (m.inside == 0) gid = m.outside;
  pid_t pid = ::fork();
  if (pid < 0) return 0;  // cannot tell: the run finds out as before
  if (pid == 0) {
    struct stat st;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0) ::_exit(0);
    ::_exit(::stat(path, &st) == 0 ? 0 : (errno & 0xff));
  }
  // A source on a hung network or FUSE file system must not hang sbx before its run even starts:
  // the answer is awaited for at most 5 s, then the child is killed and the question left to the
  // run (whose mount would meet the same file system).
  int ws = 0;
  if (UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))); pidfd.ok()) {
    struct pollfd p = {pidfd.get(), POLLIN, 0};
    int n;
    do n = ::poll(&p, 1, 5000);
    while (n < 0 && errno == EINTR);
    if (n == 0) ::kill(pid, SIGKILL);
  }
  while (::waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 0;
}

}  // namespace

Status check_trace_file(const std::string& path) {
  if (path.empty()) return {};
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return sys_error("usage", "--trace-file " + path + ": directory " + dir);
  if (!S_ISDIR(st.st_mode)) return make_error("usage", "--trace-file " + path + ": " + dir + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return sys_error("usage", "--trace-file " + path + ": directory " + dir);
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return make_error("usage", "--trace-file " + path + " is a directory");
  return {};
}

Status check_sources(const RunSpec& spec, const std::string& cwd, const IdentityPlan* identity) {
  auto check = [&](const BindMount& b, const char* flag) -> Status {
    std::string src = b.src[0] == '/' ? b.src : cwd + "/" + b.src;
    struct stat st;
    if (::stat(src.c_str(), &st) != 0) return sys_error("mounts", std::string(flag) + " " + b.src + ": source " + src);
    if (!identity || identity->rootless) return {};
    char real[PATH_MAX];
    if (!::realpath(src.c_str(), real)) return sys_error("mounts", std::string(flag) + " " + b.src + ": source " + src);
    if (int err = stat_as_sandbox_root(real, *identity)) {
      Error e = make_error("mounts", "bind source " + std::string(real), err);
      add_setup_hint(e, spec, *identity, cwd);
      return e;
    }
    return {};
  };
  for (auto& b : spec.binds) SBX_TRY(check(b, "--bind"));
  for (auto& in : spec.inputs) SBX_TRY(check(in, "--input"));
  return {};
}

namespace {
// The path with the symlinks of its existing part resolved, the rest made lexically normal.
std::string resolved_path(const std::string& p) {
  std::error_code ec;
  auto r = std::filesystem::weakly_canonical(p, ec);
  std::string s = ec ? std::filesystem::path(p).lexically_normal().string() : r.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}
bool same_or_inside(const std::string& a, const std::string& b) {  // a is b or below it
  return a == b || b == "/" || a.starts_with(b + "/");
}
}  // namespace

Status check_binds_spare_state(const RunSpec& spec, const std::string& cwd, const Dirs& dirs) {
  std::vector<std::pair<std::string, std::string>> guarded;  // resolved path, what it is
  if (!dirs.state.empty()) guarded.push_back({resolved_path(dirs.state), "sbx's state dir"});
  if (!dirs.data.empty()) guarded.push_back({resolved_path(dirs.data), "sbx's data dir"});
  if (auto k = ledger_key_paths(); k && !k->dir.empty()) guarded.push_back({resolved_path(k->dir), "sbx's config dir (the ledger key)"});
  for (auto& b : spec.binds) {
    if (!b.rw || b.src.empty()) continue;
    std::string src = resolved_path(b.src[0] == '/' ? b.src : cwd + "/" + b.src);
    for (auto& [g, what] : guarded) {
      if (!same_or_inside(src, g) && !same_or_inside(g, src)) continue;
      std::string rel = src == g ? "is" : same_or_inside(src, g) ? "is inside" : "holds";
      return make_error("usage", "--bind " + b.src + ":" + b.dst + ":rw: " + src + " " + rel + " " + what + " " + g +
                                     ": a program that can write there changes what later runs trust (the seccomp cache, "
                                     "the ledger a replay rebuilds from); bind a directory outside it, or read-only");
    }
  }
  return {};
}

namespace {
// The decision keeps the raw value (bytes, milliseconds) for the trace; a message says it the
// way the flag takes it ("64M", "2s"), so a user can match it against the command line.
std::string value_as_flag_spells_it(const LimitDecision& d) {
  try {
    if (d.limit == "memory" || d.limit == "output") return format_size(std::stoll(d.value));
    if (d.limit == "cpu_time" || d.limit == "timeout") return format_duration_ms(std::stoll(d.value));
  } catch (const std::exception&) {
  }
  return d.value;
}
}  // namespace

std::optional<Error> require_limits_shortfall(const LimitPlan& plan, const CgroupInfo& cg,
                                              const std::map<std::string, std::string>& layers) {
  std::string missing;
  // Not applied at all, or applied per process only where the limit is on the total (memory in
  // the rlimit fallback: LimitPlan::unbounded).
  for (auto* d : plan.unbounded()) {
    auto layer = layers.find(d->limit);
    std::string what = d->limit + (d->applied ? " in total" : "") + " (" + value_as_flag_spells_it(*d);
    if (layer != layers.end() && layer->second.rfind("flag", 0) == 0)
      what += ", set by " + layer->second + ": leave it out to run without it)";
    else if (layer != layers.end())
      what += ", set by " + layer->second + ": clear it with " + flag_of(d->limit) + " none)";
    else
      what += ")";
    missing += (missing.empty() ? "" : ", ") + what;
  }
  if (missing.empty()) return std::nullopt;
  return make_error("limits", "--require-limits: cannot enforce " + missing + " on this host (cgroup v2 layout: " +
                                  cg.layout + "; see 'sbx doctor')");
}

void add_setup_hint(Error& e, const RunSpec& spec, const IdentityPlan& identity, const std::string& cwd) {
  if (!e.hint.empty()) return;
  if (e.stage == "execve" && (e.err == ENOENT || e.err == ENOTDIR) && !spec.argv.empty() && !spec.argv[0].empty() &&
      spec.argv[0][0] != '/') {
    const std::string& cmd = spec.argv[0];
    bool relative = cmd.find('/') != std::string::npos;
    struct stat st;
    bool in_cwd = ::stat((cwd + "/" + cmd).c_str(), &st) == 0;
    if (relative || in_cwd)
      e.hint = "the sandbox's working directory is " + spec.workdir +
               " and the current directory is not mounted; bind it with --bind .:/work --workdir /work, or pass "
               "the file with --input, read-only at /in/NAME";
    return;
  }
  bool bind = e.stage == "mounts" && e.message.rfind("bind source ", 0) == 0;
  if (bind && e.err == EACCES && !identity.rootless && !identity.uid_map.empty()) {
    std::uint32_t host_uid = identity.uid_map.front().outside;
    for (auto& m : identity.uid_map)
      if (m.inside == 0) host_uid = m.outside;
    e.hint = "as root, the sandbox runs as host uid " + std::to_string(host_uid) +
             ", which cannot reach this path: make every directory above it searchable for that uid "
             "(e.g. chmod o+x), or run sbx as an ordinary user (rootless), whose own files the sandbox can read";
  }
}

Result<json> dry_run(const RunRequest& req) {
  SBX_TRY(check_trace_file(req.trace_file));
  std::string cwd = current_dir();
  CgroupInfo cg = detect_cgroup();
  Result<IdentityPlan> identity = plan_identity(req.spec, req.id_slot);
  // The run's facilities, in the run's order (the same first error), creating nothing; then each
  // one's part of the plan.
  RunContext ctx(req, cwd, cg, identity, true);
  SBX_TRY(prepare_facilities(ctx));
  json out = spec_to_json(req.spec);
  out["enforcement"] = enforcement_plan(ctx);
  return out;
}

}  // namespace sbx
