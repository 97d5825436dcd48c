#include "runtime/linux/host_blockers.hpp"

#include "runtime/base/fsutil.hpp"
#include "runtime/linux/cgroup.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sbx {

namespace {

// At most 1 MiB of a host file (/etc/subuid is a few lines): a fixture or a hostile file cannot
// make doctor read more. /proc/self/mounts is read as detect_cgroup reads it (read_proc_prefix).
constexpr std::size_t kMaxFile = 1 << 20;

std::string read_or_empty(const std::string& path, bool* ok = nullptr) { return read_file_prefix(path, kMaxFile, ok); }

bool executable(const std::string& root, const char* name) {
  for (const char* dir : {"/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/"})
    if (::access((root + dir + name).c_str(), X_OK) == 0) return true;
  return false;
}

bool has_line_for(const std::string& subid, const char* user) { return find_subid_range(subid, user).has_value(); }

}  // namespace

BlockerFacts read_blocker_facts(const std::string& root, uid_t uid, const std::string& self_exe,
                                const std::string& runtime_dir) {
  BlockerFacts f;
  f.rootless = uid != 0;
  f.sysctls = read_userns_sysctls(root + "/proc/sys");
  f.mounts = read_proc_prefix(root + "/proc/self/mounts", &f.have_mounts);
  f.subuid = read_or_empty(root + "/etc/subuid");
  f.subgid = read_or_empty(root + "/etc/subgid");
  f.have_newuidmap = executable(root, "newuidmap");
  f.have_systemd_run = executable(root, "systemd-run");
  f.self_exe = self_exe;
  f.runtime_dir = runtime_dir;
  if (root.empty() && f.rootless && !runtime_dir.empty())
    f.user_manager = unix_socket_answers(runtime_dir + "/systemd/private") || unix_socket_answers(runtime_dir + "/bus");
  return f;
}

namespace {

const std::string kPersist = " (and persist it in /etc/sysctl.d/)";

// Ubuntu 23.10+: unshare(CLONE_NEWUSER) succeeds, but the namespace holds no capabilities.
CheckResult check_apparmor_userns(const BlockerFacts& f) {
  const auto& s = f.sysctls;
  CheckResult r{"apparmor-userns", CheckStatus::ok, false, "", ""};
  if (!s.apparmor_restrict) {
    r.detail = "kernel.apparmor_restrict_unprivileged_userns: not present (no AppArmor restriction)";
  } else if (*s.apparmor_restrict == 0) {
    r.detail = "kernel.apparmor_restrict_unprivileged_userns=0";
  } else if (f.rootless && f.userns_probe_ok) {
    r.detail = "kernel.apparmor_restrict_unprivileged_userns=" + std::to_string(*s.apparmor_restrict) +
               ", but a user namespace was created and used: an AppArmor profile allows sbx";
  } else {
    r.status = f.rootless ? CheckStatus::missing : CheckStatus::degraded;
    r.detail = "kernel.apparmor_restrict_unprivileged_userns=" + std::to_string(*s.apparmor_restrict) + ": " +
               (f.rootless ? "unprivileged user namespaces get no capabilities: rootless sbx cannot run"
                           : "other users cannot run sbx rootless (root is not restricted)");
    std::string exe = f.self_exe.empty() ? "/usr/bin/sbx" : f.self_exe;
    r.hint = "allow sbx alone: write /etc/apparmor.d/sbx with 'abi <abi/4.0>, include <tunables/global> profile sbx " +
             exe +
             " flags=(unconfined) { userns, }' and run apparmor_parser -r /etc/apparmor.d/sbx; or lift it for "
             "all: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0" +
             kPersist;
  }
  return r;
}

CheckResult check_max_user_namespaces(const BlockerFacts& f) {
  const auto& s = f.sysctls;
  CheckResult r{"max-user-namespaces", CheckStatus::ok, false, "", ""};
  if (!s.max_user_namespaces) {
    r.detail = "user.max_user_namespaces: not readable (kernel without CONFIG_USER_NS?)";
    r.status = CheckStatus::missing;
    r.hint = "the kernel needs CONFIG_USER_NS";
  } else if (*s.max_user_namespaces <= 0) {
    r.status = CheckStatus::missing;
    r.detail = "user.max_user_namespaces=" + std::to_string(*s.max_user_namespaces) +
               ": nobody, root included, may create a user namespace";
    r.hint = "sysctl -w user.max_user_namespaces=15000" + kPersist;
  } else {
    r.detail = "user.max_user_namespaces=" + std::to_string(*s.max_user_namespaces);
  }
  return r;
}

// Debian before 11 (and some hardened kernels): off for everyone but root.
CheckResult check_userns_clone(const BlockerFacts& f) {
  const auto& s = f.sysctls;
  CheckResult r{"userns-clone", CheckStatus::ok, false, "", ""};
  if (!s.unprivileged_userns_clone) {
    r.detail = "kernel.unprivileged_userns_clone: not present (upstream kernel behaviour: allowed)";
  } else if (*s.unprivileged_userns_clone != 0) {
    r.detail = "kernel.unprivileged_userns_clone=" + std::to_string(*s.unprivileged_userns_clone);
  } else {
    r.status = f.rootless ? CheckStatus::missing : CheckStatus::degraded;
    r.detail = std::string("kernel.unprivileged_userns_clone=0: ") +
               (f.rootless ? "unprivileged user namespaces are off: rootless sbx cannot run"
                           : "other users cannot run sbx rootless (root is not restricted)");
    r.hint = "sysctl -w kernel.unprivileged_userns_clone=1" + kPersist;
  }
  return r;
}

CheckResult check_cgroup2(const BlockerFacts& f) {
  CheckResult r{"cgroup2", CheckStatus::ok, false, "", ""};
  bool v1 = false;
  std::string at = cgroup2_mount_point(f.mounts, v1);
  if (!f.have_mounts) {
    r.status = CheckStatus::degraded;
    r.detail = "/proc/self/mounts is not readable: cannot tell";
    r.hint = "mount /proc";
  } else if (at.empty()) {
    r.status = CheckStatus::missing;
    r.detail = std::string("no cgroup2 file system is mounted") + (v1 ? " (cgroup v1 only)" : "") +
               ": memory, pids and cpu limits fall back to per-process rlimits";
    r.hint = v1 ? "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2)"
                : "mount -t cgroup2 cgroup2 /sys/fs/cgroup (or boot with systemd.unified_cgroup_hierarchy=1)";
  } else {
    r.detail = "cgroup2 at " + at + (v1 ? " beside cgroup v1 hierarchies (hybrid; see the cgroup check)" : "");
  }
  return r;
}

CheckResult check_subid(const BlockerFacts& f) {
  // sbx never runs newuidmap: rootless it maps only the caller's own uid and gid (which the
  // kernel allows unprivileged), as root it writes uid_map itself (runtime/linux/userns.hpp). The
  // subordinate ranges matter only as root, for the `sbx` entry; one file with it and the
  // other without makes sbx ignore both (plan_identity).
  CheckResult r{"subid", CheckStatus::ok, false, "", ""};
  std::string nu = std::string("newuidmap ") + (f.have_newuidmap ? "present" : "absent") + ", not used by sbx";
  if (f.rootless) {
    r.detail = "not needed: rootless sbx maps only your own uid and gid (" + nu + ")";
  } else {
    bool u = has_line_for(f.subuid, "sbx"), g = has_line_for(f.subgid, "sbx");
    if (u && g) {
      r.detail = "sbx has ranges in /etc/subuid and /etc/subgid (" + nu + ")";
    } else if (u != g) {
      r.status = CheckStatus::degraded;
      r.detail = std::string("an sbx range only in ") + (u ? "/etc/subuid" : "/etc/subgid") +
                 ": sbx ignores it and maps sandboxes to its built-in range (" + nu + ")";
      r.hint = std::string("add the same kind of line (sbx:START:65536, a range no other entry overlaps) to ") +
               (u ? "/etc/subgid" : "/etc/subuid");
    } else {
      // Root of a user namespace that does not map the built-in range uses its own ids instead:
      // the identity row says which (plan_identity).
      r.detail =
          "no sbx range in /etc/subuid and /etc/subgid: the built-in range is used where this user namespace "
          "maps it, else its own ids (see identity; " +
          nu + ")";
    }
  }
  return r;
}

CheckResult check_user_manager(const BlockerFacts& f) {
  CheckResult r{"user-manager", CheckStatus::ok, false, "", ""};
  if (!f.rootless) {
    r.detail = "root: run cgroups need no delegation";
  } else if (f.cgroup_usable) {
    r.detail = "your cgroup v2 is delegated to you: no systemd scope needed";
  } else if (f.cgroup_layout != "v2") {
    r.detail = "cgroup layout " + f.cgroup_layout +
               ": a systemd scope would offer no cgroup v2 controllers "
               "either (see the cgroup check)";
  } else if (f.user_manager && f.have_systemd_run) {
    r.detail = "a systemd user manager answers at " + f.runtime_dir +
               ": sbx run re-executes itself in a delegated scope (systemd-run --user --scope -p Delegate=yes) "
               "when a limit needs cgroup v2";
  } else {
    r.status = CheckStatus::degraded;
    r.detail = f.user_manager ? "a systemd user manager answers, but systemd-run is not installed"
                              : "no systemd user manager answers at " +
                                    (f.runtime_dir.empty() ? std::string("$XDG_RUNTIME_DIR") : f.runtime_dir) +
                                    " (systemd/private, bus): rootless limits fall back to rlimits";
    r.hint = f.user_manager ? "install systemd (systemd-run)"
                            : "log in through systemd-logind (pam_systemd), or keep a manager running with "
                              "loginctl enable-linger $USER; set XDG_RUNTIME_DIR=/run/user/$(id -u)";
  }
  return r;
}

}  // namespace

std::vector<CheckResult> assess_blockers(const BlockerFacts& f) {
  return {check_apparmor_userns(f), check_max_user_namespaces(f), check_userns_clone(f), check_cgroup2(f),
          check_subid(f),           check_user_manager(f)};
}

bool unix_socket_answers(const std::string& path) {
  struct sockaddr_un sa {};
  if (path.size() >= sizeof sa.sun_path) return false;
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.ok()) return false;
  // EAGAIN: a full backlog, but someone is there.
  return ::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&sa), sizeof sa) == 0 || errno == EAGAIN;
}

}  // namespace sbx
