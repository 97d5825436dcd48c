#include "runtime/linux/hostcheck.hpp"

#include <cap-ng.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <grp.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "runtime/base/fsutil.hpp"
#include "runtime/linux/userns.hpp"
#include "runtime/model/caps.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/base/strings.hpp"

namespace sbx {

namespace {

constexpr const char* kStage = "doctor";

// ---- small syscall helpers --------------------------------------------------------------------

Status write_string(const std::string& path, std::string_view data) {
  bool opened = false;
  if (int err = write_whole(path, data, &opened)) return make_error(kStage, (opened ? "write " : "open ") + path, err);
  return {};
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A probe running in a forked child. The child sends a failure as {errno, message} over a
// CLOEXEC pipe and leaves with _exit (no atexit handlers, no flushing of the parent's stdio
// buffers); EOF with exit status 0 means success. Forking keeps every unshare/mount of a probe
// out of the caller: the child's namespaces, and every mount in them, die with it. sbx is
// single-threaded here, so ordinary code (malloc included) between fork and _exit is safe.
//
// start() and finish() are apart so that run_host_checks() can have all children running at
// once: on a loaded machine most of a probe's wall time is the child waiting to be scheduled
// and the kernel tearing its namespaces down, and those waits overlap.
class ChildProbe {
 public:
  template <typename F>
  static ChildProbe start(std::string what, F fn) {
    ChildProbe c;
    c.what_ = std::move(what);
    int p[2];
    if (::pipe2(p, O_CLOEXEC) < 0) {
      c.early_ = sys_error(kStage, c.what_ + ": pipe2");
      return c;
    }
    UniqueFd r(p[0]), w(p[1]);
    pid_t pid = ::fork();
    if (pid < 0) {
      c.early_ = sys_error(kStage, c.what_ + ": fork");
      return c;
    }
    if (pid == 0) {
      r.reset();
      Status st = fn();
      if (!st) {
        int err = st.error().err;
        const std::string& msg = st.error().message;
        (void)!::write(p[1], &err, sizeof err);
        (void)!::write(p[1], msg.data(), msg.size());
        ::_exit(1);
      }
      ::_exit(0);
    }
    w.reset();
    c.pid_ = pid;
    c.fd_ = std::move(r);
    return c;
  }

  ChildProbe(ChildProbe&& o) noexcept
      : what_(std::move(o.what_)),
        pid_(std::exchange(o.pid_, -1)),
        fd_(std::move(o.fd_)),
        early_(std::move(o.early_)) {}
  ChildProbe& operator=(ChildProbe&&) = delete;
  ~ChildProbe() { (void)finish(); }

  // The child's report; reaps it. Later calls return the same answer.
  Status finish() {
    if (pid_ < 0) return early_;
    std::string buf;
    char chunk[512];
    for (;;) {
      ssize_t n = ::read(fd_.get(), chunk, sizeof chunk);
      if (n > 0) buf.append(chunk, static_cast<size_t>(n));
      else if (n < 0 && errno == EINTR) continue;
      else break;
    }
    fd_.reset();
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
    pid_ = -1;
    if (buf.size() >= sizeof(int)) {
      int err = 0;
      std::memcpy(&err, buf.data(), sizeof err);
      early_ = make_error(kStage, buf.substr(sizeof err), err);
    } else if (WIFSIGNALED(status)) {
      early_ = make_error(kStage, what_ + ": probe killed by signal " + std::to_string(WTERMSIG(status)));
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      early_ = make_error(kStage, what_ + ": probe failed without a report");
    }
    return early_;
  }

 private:
  ChildProbe() = default;
  std::string what_;
  pid_t pid_ = -1;
  UniqueFd fd_;
  Status early_;  // the outcome once known (a failure to start counts)
};

// Inside a fresh user namespace the process has no uid until the map is written: files it creates
// would fail with EOVERFLOW. A process may map its own outer uid/gid (one line each) — the rule
// that makes rootless work — but for an unprivileged writer the kernel refuses gid_map until
// setgroups is denied (otherwise dropping a group could grant access, CVE-2014-8989).
Status map_self(uid_t outer_uid, gid_t outer_gid) {
  SBX_TRY(write_string("/proc/self/setgroups", "deny"));
  SBX_TRY(write_string("/proc/self/uid_map", "0 " + std::to_string(outer_uid) + " 1\n"));
  SBX_TRY(write_string("/proc/self/gid_map", "0 " + std::to_string(outer_gid) + " 1\n"));
  return {};
}

// Create a user namespace and use a capability in it: unshare(CLONE_NEWUSER) alone can succeed
// where the namespace is then useless — Ubuntu's apparmor_restrict_unprivileged_userns lets the
// unshare through but confines the new namespace so that it holds no capabilities. Creating a
// mount namespace owned by it needs CAP_SYS_ADMIN there, so it tells the two apart.
Status userns_probe_body() {
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWUSER) < 0) return sys_error(kStage, "unshare(CLONE_NEWUSER)");
  SBX_TRY(map_self(uid, gid));
  if (::unshare(CLONE_NEWNS) < 0) return sys_error(kStage, "unshare(CLONE_NEWNS) inside the new user namespace");
  return {};
}

std::string sysctl_text(const char* name, const std::optional<long>& v) {
  return std::string(name) + "=" + (v ? std::to_string(*v) : "n/a");
}

}  // namespace

// ---- pure helpers ----------------------------------------------------------------------------

std::string_view to_string(CheckStatus s) {
  switch (s) {
    case CheckStatus::ok: return "ok";
    case CheckStatus::missing: return "missing";
    case CheckStatus::degraded: return "degraded";
  }
  return "?";
}

std::optional<long> parse_sysctl_int(std::string_view text) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  long v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

Result<long> read_sysctl_int(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.ok()) return sys_error(kStage, "open " + path);
  char buf[64];
  ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n < 0) return sys_error(kStage, "read " + path);
  auto v = parse_sysctl_int(std::string_view(buf, static_cast<size_t>(n)));
  if (!v) return make_error(kStage, path + ": not an integer", EINVAL);
  return *v;
}

std::optional<SubidRange> find_subid_range(std::string_view contents, std::string_view user) {
  while (!contents.empty()) {
    size_t eol = contents.find('\n');
    std::string_view line = contents.substr(0, eol);
    contents = eol == std::string_view::npos ? std::string_view{} : contents.substr(eol + 1);
    size_t c1 = line.find(':');
    if (c1 == std::string_view::npos || line.substr(0, c1) != user) continue;
    size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    auto start = parse_sysctl_int(line.substr(c1 + 1, c2 - c1 - 1));
    auto count = parse_sysctl_int(line.substr(c2 + 1));
    if (!start || !count || *start < 0 || *count <= 0) continue;
    return SubidRange{static_cast<unsigned long>(*start), static_cast<unsigned long>(*count)};
  }
  return std::nullopt;
}

UsernsSysctls read_userns_sysctls(const std::string& proc_sys) {
  auto opt = [](Result<long> r) -> std::optional<long> {
    if (r) return *r;
    return std::nullopt;
  };
  UsernsSysctls s;
  s.max_user_namespaces = opt(read_sysctl_int(proc_sys + "/user/max_user_namespaces"));
  s.unprivileged_userns_clone = opt(read_sysctl_int(proc_sys + "/kernel/unprivileged_userns_clone"));
  s.apparmor_restrict = opt(read_sysctl_int(proc_sys + "/kernel/apparmor_restrict_unprivileged_userns"));
  return s;
}

CheckResult assess_userns(std::string name, const Status& probe, const UsernsSysctls& s, bool unprivileged,
                          bool required) {
  CheckResult r{std::move(name), CheckStatus::ok, required, "", ""};
  std::string knobs = sysctl_text("user.max_user_namespaces", s.max_user_namespaces);
  if (s.unprivileged_userns_clone)
    knobs += ", " + sysctl_text("kernel.unprivileged_userns_clone", s.unprivileged_userns_clone);
  if (s.apparmor_restrict)
    knobs += ", " + sysctl_text("kernel.apparmor_restrict_unprivileged_userns", s.apparmor_restrict);
  if (probe) {
    r.detail =
        "created and used a user namespace" + std::string(unprivileged ? " unprivileged" : "") + " (" + knobs + ")";
    return r;
  }
  r.status = CheckStatus::missing;
  r.detail = probe.error().describe() + " (" + knobs + ")";
  // Most specific cause first. The Debian and Ubuntu knobs do not apply to a privileged caller.
  if (s.max_user_namespaces && *s.max_user_namespaces <= 0) {
    r.hint = "sysctl -w user.max_user_namespaces=15000 (and persist it in /etc/sysctl.d/)";
  } else if (unprivileged && s.unprivileged_userns_clone && *s.unprivileged_userns_clone == 0) {
    r.hint = "sysctl -w kernel.unprivileged_userns_clone=1 (and persist it in /etc/sysctl.d/)";
  } else if (unprivileged && s.apparmor_restrict && *s.apparmor_restrict != 0) {
    r.hint =
        "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or install an AppArmor profile "
        "for sbx with 'userns,' (see /etc/apparmor.d/ for examples such as bwrap)";
  } else {
    r.hint =
        "inside a container, a seccomp or LSM policy may block unshare: run sbx on the host or in a "
        "container with user namespaces allowed (e.g. docker --security-opt seccomp=unconfined)";
  }
  return r;
}

CheckResult assess_cgroup(const CgroupInfo& info) {
  CheckResult r{"cgroup", CheckStatus::degraded, false, "", ""};
  if (info.layout == "v1" || info.layout == "none" || info.mount.empty()) {
    r.detail = "layout " + info.layout + ": no cgroup v2; limits fall back to rlimits";
    r.hint = "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2)";
    return r;
  }
  std::vector<std::string> missing;
  for (const char* want : {"memory", "cpu", "pids"}) {
    bool have = false;
    for (auto& c : info.controllers) have = have || c == want;
    if (!have) missing.push_back(want);
  }
  r.detail = "layout " + info.layout + ", cgroup2 at " + info.mount + ", ours " +
             (info.self_path.empty() ? "?" : info.self_path) +
             ", controllers: " + (info.controllers.empty() ? "none" : join_words(info.controllers, ",")) +
             ", writable: " + (info.writable ? "yes" : "no");
  if (missing.empty() && info.writable) {
    r.status = CheckStatus::ok;
    return r;
  }
  if (!missing.empty()) r.detail += "; missing " + join_words(missing, ",") + " (those limits fall back to rlimits)";
  else r.detail += "; cannot create cgroups here (limits fall back to rlimits)";
  if (info.layout == "hybrid")
    r.hint = "the v1 hierarchies hold the controllers: boot with systemd.unified_cgroup_hierarchy=1";
  else r.hint = "run under a delegated cgroup: systemd-run --user --scope -p Delegate=yes sbx ...";
  return r;
}

std::string_view last_sbx_line(std::string_view err) {
  std::string_view last;
  for (std::size_t at = 0; at < err.size();) {
    std::size_t end = err.find('\n', at);
    if (end == std::string_view::npos) end = err.size();
    std::string_view line = err.substr(at, end - at);
    if (line.rfind("sbx: ", 0) == 0) last = line.substr(5);
    at = end + 1;
  }
  return last;
}

CheckResult assess_sandbox_run(int status, std::string_view err, bool killed) {
  CheckResult r{"sandbox", CheckStatus::ok, true, "a throwaway sandbox ran /bin/true with the default profile", ""};
  if (status == 0 && !killed) return r;
  // 126/127: the sandbox was built and the program's execve was tried, but the image has no
  // runnable /bin/true (a root holding only sbx's package: tests/tools/test_deb.sh). The
  // sandbox works; a setup failure is 125, a run that ended otherwise is 1-124 or a signal.
  if ((status == 126 || status == 127) && !killed) {
    r.detail =
        "a throwaway sandbox was built (its image has no runnable /bin/true: exit " + std::to_string(status) + ")";
    return r;
  }
  r.status = CheckStatus::missing;
  r.hint = "'sbx run -- /bin/true' fails the same way; the error says how to fix it";
  if (killed) {
    r.detail = "a throwaway sandbox running /bin/true did not finish in time (doctor stopped it)";
    return r;
  }
  std::string_view last = last_sbx_line(err);
  r.detail = "a throwaway sandbox running /bin/true failed: " +
             (last.empty() ? "exit status " + std::to_string(status) : std::string(last));
  return r;
}

bool host_can_run(const std::vector<CheckResult>& checks) {
  for (auto& c : checks)
    if (c.required && c.status != CheckStatus::ok) return false;
  return true;
}

std::string render_table(const std::vector<CheckResult>& checks) {
  size_t w = std::string_view("CHECK").size();
  for (auto& c : checks) w = std::max(w, c.name.size());
  auto row = [&](std::string_view name, std::string_view status, std::string_view need, std::string_view detail) {
    std::string line(name);
    line.append(w + 2 - name.size(), ' ');
    line += status;
    line.append(10 - std::min<size_t>(status.size(), 9), ' ');
    line += need;
    line.append(10 - std::min<size_t>(need.size(), 9), ' ');
    line += detail;
    return line + "\n";
  };
  std::string out = row("CHECK", "STATUS", "NEEDED", "DETAIL");
  int problems = 0;
  for (auto& c : checks) {
    out += row(c.name, to_string(c.status), c.required ? "required" : "optional", c.detail);
    if (!c.hint.empty()) out += std::string(w + 22, ' ') + "fix: " + c.hint + "\n";
    if (c.status != CheckStatus::ok) ++problems;
  }
  if (host_can_run(checks)) {
    out += "sbx can run on this host";
    if (problems)
      out += " (" + std::to_string(problems) + " optional feature" + (problems > 1 ? "s" : "") +
             " missing or degraded: see above)";
    out += "\n";
  } else {
    out += "sbx cannot run on this host: a required check failed (see fix: above)\n";
  }
  return out;
}

nlohmann::json checks_to_json(const std::vector<CheckResult>& checks) {
  nlohmann::json arr = nlohmann::json::array();
  for (auto& c : checks)
    arr.push_back({{"name", c.name},
                   {"status", std::string(to_string(c.status))},
                   {"required", c.required},
                   {"detail", c.detail},
                   {"hint", c.hint}});
  return {{"ok", host_can_run(checks)}, {"checks", std::move(arr)}};
}

// ---- probes ----------------------------------------------------------------------------------

// The probes that need a child come in three parts: start_*() forks, finish_*() waits and judges,
// check_*() does both.
namespace {

ChildProbe start_userns() { return ChildProbe::start("userns", userns_probe_body); }
CheckResult finish_userns(ChildProbe& c) {
  return assess_userns("userns", c.finish(), read_userns_sysctls(), ::geteuid() != 0, true);
}

// As root, the userns probe says nothing about other users: drop to nobody in a child and try
// again, so that Debian's and Ubuntu's restrictions on unprivileged user namespaces show up.
std::optional<ChildProbe> start_userns_rootless() {
  if (::geteuid() != 0) return std::nullopt;
  return ChildProbe::start("userns-rootless", []() -> Status {
    const gid_t nobody = 65534;
    if (::setgroups(0, nullptr) < 0) return sys_error(kStage, "setgroups");
    if (::setresgid(nobody, nobody, nobody) < 0) return sys_error(kStage, "setresgid(65534)");
    if (::setresuid(nobody, nobody, nobody) < 0) return sys_error(kStage, "setresuid(65534)");
    // Changing uids clears the dumpable flag, which makes /proc/self/* owned by root: the uid_map
    // write would then fail with EACCES for a reason no real rootless caller has. Set it back.
    if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0) return sys_error(kStage, "prctl(PR_SET_DUMPABLE)");
    return userns_probe_body();
  });
}
CheckResult finish_userns_rootless(std::optional<ChildProbe>& c) {
  if (!c)
    return {"userns-rootless", CheckStatus::ok, false, "running unprivileged: the userns check is the rootless one",
            ""};
  Status probe = c->finish();
  CheckResult r = assess_userns("userns-rootless", probe, read_userns_sysctls(), true, false);
  r.detail = (probe ? "other users can run sbx rootless: " : "rootless sbx is blocked for other users: ") + r.detail;
  return r;
}

struct Ns {
  int flag;
  const char* name;
};
constexpr Ns kNamespaces[] = {{CLONE_NEWPID, "pid"}, {CLONE_NEWNS, "mnt"},  {CLONE_NEWNET, "net"},
                              {CLONE_NEWIPC, "ipc"}, {CLONE_NEWUTS, "uts"}, {CLONE_NEWCGROUP, "cgroup"}};

ChildProbe start_namespaces() {
  return ChildProbe::start("namespaces", []() -> Status {
    int all = CLONE_NEWUSER;
    for (auto& ns : kNamespaces) all |= ns.flag;
    // One unshare with every flag, as sbx's clone does. The kernel creates the user namespace
    // first, so the others are owned by it and this works unprivileged too.
    if (::unshare(all) == 0) return {};
    int err = errno;
    // Find which one the kernel refused: a user namespace first, then the rest one by one (the
    // failed call changed nothing, so each type is unshared here for the first time).
    if (::unshare(CLONE_NEWUSER) < 0) return sys_error(kStage, "unshare(CLONE_NEWUSER)");
    std::vector<std::string> bad;
    for (auto& ns : kNamespaces)
      if (::unshare(ns.flag) < 0) bad.push_back(ns.name);
    return make_error(kStage,
                      "unshare(user|pid|mnt|net|ipc|uts|cgroup)" +
                          (bad.empty() ? std::string() : " refused: " + join_words(bad, ",")),
                      err);
  });
}
CheckResult finish_namespaces(ChildProbe& c) {
  Status probe = c.finish();
  CheckResult r{"namespaces", CheckStatus::ok, true, "", ""};
  if (probe) {
    r.detail = "user, pid, mnt, net, ipc, uts, cgroup";
  } else {
    r.status = CheckStatus::missing;
    r.detail = probe.error().describe();
    r.hint =
        "the kernel needs CONFIG_USER_NS, PID_NS, NET_NS, IPC_NS, UTS_NS and CGROUPS (namespaces); "
        "in a container, allow unshare (seccomp/LSM)";
  }
  return r;
}

struct OverlayProbe {
  std::string dir;                  // the empty mount point under /tmp, removed by finish
  std::optional<ChildProbe> child;  // absent when the directory could not be made
  int mkdtemp_err = 0;
};

OverlayProbe start_overlayfs() {
  OverlayProbe o;
  char dir[] = "/tmp/sbx-doctor-XXXXXX";
  if (!::mkdtemp(dir)) {
    o.mkdtemp_err = errno;
    return o;
  }
  o.dir = dir;
  o.child.emplace(ChildProbe::start("overlayfs", [base = o.dir]() -> Status {
    uid_t uid = ::geteuid();
    gid_t gid = ::getegid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) return sys_error(kStage, "unshare(CLONE_NEWUSER|CLONE_NEWNS)");
    SBX_TRY(map_self(uid, gid));
    // A mount namespace created together with a new user namespace is "less privileged": the
    // kernel already turns shared mounts into slaves there, so nothing propagates back to the
    // host. Making everything private says so explicitly and costs nothing.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) < 0) return sys_error(kStage, "make / private");
    if (::mount("sbx-doctor", base.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0700") < 0)
      return sys_error(kStage, "mount tmpfs");
    for (const char* d : {"/l1", "/l2", "/upper", "/work", "/merged"})
      if (::mkdir((base + d).c_str(), 0700) < 0) return sys_error(kStage, std::string("mkdir ") + d);
    // Two lower layers: a read-only overlay of a single lowerdir is refused by the kernel.
    // "userxattr" (5.11+) keeps overlay's private xattrs in user.overlay.* — the only kind an
    // unprivileged mounter may write; older kernels reject the option, so retry without it.
    std::string opts = "lowerdir=" + base + "/l1:" + base + "/l2,upperdir=" + base + "/upper,workdir=" + base + "/work";
    std::string merged = base + "/merged";
    if (::mount("overlay", merged.c_str(), "overlay", 0, (opts + ",userxattr").c_str()) == 0) return {};
    int first = errno;
    if (::mount("overlay", merged.c_str(), "overlay", 0, opts.c_str()) == 0)
      return make_error(kStage, "nouserxattr");  // mounted, but only without userxattr
    return make_error(kStage, "mount overlay in a user namespace", first);
  }));
  return o;
}
CheckResult finish_overlayfs(OverlayProbe& o) {
  CheckResult r{"overlayfs", CheckStatus::ok, false, "", ""};
  if (!o.child) {
    r.status = CheckStatus::missing;
    r.detail = std::string("cannot probe: mkdtemp in /tmp: ") + std::strerror(o.mkdtemp_err);
    r.hint = "make /tmp writable";
    return r;
  }
  Status probe = o.child->finish();
  // The tmpfs was only ever mounted in the child's mount namespace, gone with the child: here the
  // directory is empty.
  ::rmdir(o.dir.c_str());
  if (probe) {
    r.detail = "overlay mounts inside a user namespace (userxattr)";
  } else if (probe.error().err == 0 && probe.error().message == "nouserxattr") {
    r.detail = "overlay mounts inside a user namespace, without userxattr";
  } else {
    r.status = CheckStatus::missing;
    r.detail = probe.error().describe();
    const std::string& m = probe.error().message;
    bool userns_failed = m.rfind("unshare", 0) == 0 || m.find("/proc/self/") != std::string::npos;
    r.hint = userns_failed
                 ? "needs a usable user namespace first: see the userns check"
                 : "needs Linux 5.11+ with CONFIG_OVERLAY_FS (modprobe overlay) for overlay in a user namespace";
  }
  return r;
}

}  // namespace

CheckResult check_userns() {
  auto c = start_userns();
  return finish_userns(c);
}

CheckResult check_userns_rootless() {
  auto c = start_userns_rootless();
  return finish_userns_rootless(c);
}

CheckResult check_namespaces() {
  auto c = start_namespaces();
  return finish_namespaces(c);
}

CheckResult check_overlayfs() {
  auto o = start_overlayfs();
  return finish_overlayfs(o);
}

CheckResult check_clone3() {
  // An impossible size (below CLONE_ARGS_SIZE_VER0) makes clone3 fail with EINVAL before it does
  // anything, so nothing is ever created. ENOSYS: an old kernel, or a seccomp policy (Docker's
  // default profile answers ENOSYS so that libc falls back to clone).
  alignas(8) unsigned char args[64] = {};
  long rc = ::syscall(SYS_clone3, args, 1);
  int err = errno;
  CheckResult r{"clone3", CheckStatus::ok, false, "", ""};
  if (rc < 0 && err == EINVAL) {
    r.detail = "available (CLONE_INTO_CGROUP and CLONE_PIDFD in one call)";
  } else {
    r.status = CheckStatus::degraded;
    r.detail = std::string("unavailable (") + (rc < 0 ? std::strerror(err) : "unexpected success") +
               "): sbx falls back to clone + writing cgroup.procs";
    r.hint = "nothing to do; with a container runtime, a seccomp profile that allows clone3 helps";
  }
  return r;
}

CheckResult check_cgroup() { return assess_cgroup(detect_cgroup()); }

CheckResult check_seccomp() {
  CheckResult r{"seccomp", CheckStatus::ok, true, "", ""};
  int mode = ::prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
  if (mode < 0) {
    r.status = CheckStatus::missing;
    r.detail = std::string("prctl(PR_GET_SECCOMP): ") + std::strerror(errno);
    r.hint = "the kernel needs CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER";
    return r;
  }
  // SECCOMP_GET_ACTION_AVAIL (4.14+) answers without installing anything.
  auto avail = [](unsigned int action) {
    return ::syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0 ? 0 : errno;
  };
  int kill_err = avail(SECCOMP_RET_KILL_PROCESS);
  int notif_err = avail(SECCOMP_RET_USER_NOTIF);
  if (kill_err != 0) {
    r.status = CheckStatus::missing;
    r.detail = std::string("filter mode with SECCOMP_RET_KILL_PROCESS unavailable: ") + std::strerror(kill_err);
    r.hint = "needs Linux 4.14+ with CONFIG_SECCOMP_FILTER";
    return r;
  }
  r.detail = std::string("filter mode, KILL_PROCESS; USER_NOTIF ") + (notif_err == 0 ? "yes" : "no");
  if (mode == 2) r.detail += "; sbx itself already runs under a filter (container?)";
  return r;
}

CheckResult check_pidfd() {
  CheckResult r{"pidfd", CheckStatus::ok, true, "", ""};
  if (UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0))); fd.ok()) {
    r.detail = "pidfd_open works";
  } else {
    r.status = CheckStatus::missing;
    r.detail = std::string("pidfd_open: ") + std::strerror(errno);
    r.hint = "needs Linux 5.3+ (pidfd_open); in a container, allow it in the seccomp profile";
  }
  return r;
}

CheckResult check_landlock() {
  CheckResult r{"landlock", CheckStatus::ok, false, "", ""};
  long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi >= 1) {
    r.detail = "ABI version " + std::to_string(abi);
    return r;
  }
  int err = errno;
  r.status = CheckStatus::missing;
  if (err == EOPNOTSUPP) {
    r.detail = "built in but disabled at boot";
    r.hint = "add landlock to the lsm= kernel parameter";
  } else {
    r.detail = std::string("unsupported (") + std::strerror(err) + ")";
    r.hint = "needs Linux 5.13+ with CONFIG_SECURITY_LANDLOCK";
  }
  return r;
}

CheckResult check_identity() {
  CheckResult r{"identity", CheckStatus::ok, false, "", ""};
  struct utsname u {};
  std::string kernel = ::uname(&u) == 0 ? std::string(u.release) : "?";
  uid_t uid = ::geteuid();
  if (uid != 0) {
    r.detail = "rootless (uid " + std::to_string(uid) + ", maps to root inside the sandbox); kernel " + kernel;
    return r;
  }
  // Root of a user namespace (a pod with hostUsers: false, a podman --uidmap container): what a run
  // maps is what plan_identity decides from that namespace's own maps; the fix must be one that is
  // mappable there (a line in this container's /etc/subuid is not).
  static const RunSpec defaults;
  auto plan = plan_identity(defaults);
  const std::string more_ids =
      "give the container a range of ids besides its root: podman run --uidmap 0:HOST_ID:65537 (rootless podman: "
      "--uidmap 0:1:65536 with 65536 subordinate ids), or Kubernetes hostUsers: false";
  if (!plan) {
    r.status = CheckStatus::degraded;
    r.detail = "root; the sandbox's ids cannot be planned: " + plan.error().message + "; kernel " + kernel;
    r.hint = more_ids;
    return r;
  }
  if (plan->single_id_fallback) {
    r.status = CheckStatus::degraded;
    r.detail =
        "root of a user namespace that maps no id but its own: runs use a single-id map (the sandbox's root "
        "is this namespace's root); kernel " +
        kernel;
    r.hint = more_ids;
    return r;
  }
  if (plan->range_source.rfind("own user namespace", 0) == 0) {
    const IdMapping& m = plan->uid_map.front();
    r.detail = "root of a user namespace; sandbox users 0-" + std::to_string(m.count - 1) + " map to its ids " +
               std::to_string(m.outside) + "-" + std::to_string(m.outside + m.count - 1) + " (" + plan->range_source +
               ", never its own root); kernel " + kernel;
    if (m.count < kMappedRange - 1) {
      r.status = CheckStatus::degraded;
      r.hint = "images with users up to 65534 (nobody) need 65535 ids: " + more_ids;
    }
    return r;
  }
  auto uids = find_subid_range(slurp("/etc/subuid"), "sbx");
  auto gids = find_subid_range(slurp("/etc/subgid"), "sbx");
  if (uids && gids) {
    r.detail = "root; sandbox users map to /etc/subuid sbx range " + std::to_string(uids->start) + "+" +
               std::to_string(uids->count) + " (gid " + std::to_string(gids->start) + "+" +
               std::to_string(gids->count) + "); kernel " + kernel;
  } else {
    r.detail =
        "root; no sbx entry in /etc/subuid and /etc/subgid: sandbox users map to sbx's built-in "
        "unprivileged range; kernel " +
        kernel;
    r.hint =
        "optional: reserve a range for sbx by adding the line sbx:1000000:65536 to /etc/subuid and "
        "/etc/subgid (pick a range no other entry overlaps)";
  }
  return r;
}

namespace {

// The capabilities sbx itself holds, by libcap-ng (this process is sbx, single-threaded here).
std::string own_capabilities() {
  capng_clear(CAPNG_SELECT_BOTH);
  if (capng_get_caps_process() != 0) return "unknown (capng_get_caps_process failed)";
  switch (capng_have_capabilities(CAPNG_SELECT_CAPS)) {
    case CAPNG_FULL: return "all";
    case CAPNG_NONE: return "none";
    default: break;
  }
  // The shorter list: a container's root usually lacks a few.
  std::vector<std::string> held, lacked;
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap)
    (capng_have_capability(CAPNG_EFFECTIVE, static_cast<unsigned>(cap)) ? held : lacked)
        .push_back(capability_name(cap));
  if (held.empty()) return "none effective";
  return held.size() > lacked.size() ? "all but " + join_words(lacked, ", ") : join_words(held, ", ");
}

// What the program child does with a profile's kept set (child.cpp run_program), in a user
// namespace of our own: lock securebits, keep exactly `keep` in every set, ambient included.
Status keep_probe_body(CapMask keep) {
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWUSER) < 0) return sys_error(kStage, "unshare(CLONE_NEWUSER)");
  SBX_TRY(map_self(uid, gid));
  SBX_TRY(lock_securebits());
  return restrict_capabilities(keep);
}

}  // namespace

CheckResult check_capabilities() {
  CheckResult r{"capabilities", CheckStatus::ok, false, "", ""};
  std::string own =
      "sbx holds " + own_capabilities() + (::geteuid() == 0 ? "" : " (rootless: the user namespace grants them)");
  auto trusted = load_profile("trusted");
  auto spec = trusted ? spec_from_layers(*trusted, nullptr, "") : Result<RunSpec>(trusted.error());
  std::vector<std::string> keep = spec ? spec->capabilities.keep : std::vector<std::string>{};
  if (keep.empty()) {
    r.detail = own + "; the trusted profile keeps none";
    return r;
  }
  auto probe = ChildProbe::start("capabilities", [&] { return keep_probe_body(capability_mask(keep)); });
  Status st = probe.finish();
  if (st) {
    r.detail = own + "; a user namespace lets the program keep " + join_words(keep, ", ") + " (profile trusted)";
  } else {
    r.status = CheckStatus::degraded;
    r.detail = own + "; keeping " + join_words(keep, ", ") + " in a user namespace failed: " + st.error().describe();
    r.hint = "runs under profile trusted fail at setup; untrusted keeps no capability and is unaffected";
  }
  return r;
}

std::vector<CheckResult> run_host_checks() {
  // Children first, so they run while the in-process checks do; then collect in table order.
  auto userns = start_userns();
  auto rootless = start_userns_rootless();
  auto namespaces = start_namespaces();
  auto overlay = start_overlayfs();
  std::vector<CheckResult> out;
  out.push_back(check_identity());
  out.push_back(finish_userns(userns));
  out.push_back(finish_userns_rootless(rootless));
  out.push_back(finish_namespaces(namespaces));
  out.push_back(check_clone3());
  out.push_back(check_seccomp());
  out.push_back(check_pidfd());
  out.push_back(check_cgroup());
  out.push_back(finish_overlayfs(overlay));
  out.push_back(check_landlock());
  out.push_back(check_capabilities());
  return out;
}

}  // namespace sbx
