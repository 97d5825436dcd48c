#pragma once
// `sbx doctor`'s checks for the common host settings that block sbx or weaken it, each with its
// fix: Ubuntu's AppArmor restriction of unprivileged user namespaces, user.max_user_namespaces=0,
// Debian's old kernel.unprivileged_userns_clone=0, no cgroup2 mounted, an incomplete sbx entry in
// /etc/subuid and /etc/subgid, and — rootless — whether a systemd user manager can delegate a
// cgroup (cli/systemd_scope.hpp). The facts are read under a root directory ("" for the host), so
// that every detection is tested on fixture trees (tests/fixtures/hostroot/); judging them is pure.
#include <sys/types.h>

#include <string>
#include <vector>

#include "runtime/linux/hostcheck.hpp"

namespace sbx {

struct BlockerFacts {
  bool rootless = true;
  UsernsSysctls sysctls;        // <root>/proc/sys/...
  std::string mounts;           // <root>/proc/self/mounts
  bool have_mounts = false;     // the file could be read (else nothing is said about cgroup2)
  std::string subuid, subgid;   // <root>/etc/subuid, /etc/subgid ("" when absent)
  bool have_newuidmap = false;  // <root>/usr/bin/newuidmap or <root>/bin/newuidmap
  std::string self_exe;         // sbx's own path, for the AppArmor profile in the fix
  // Rootless only: the user manager sbx would ask for a delegated scope.
  std::string runtime_dir;        // $XDG_RUNTIME_DIR or /run/user/<uid>, under <root>
  bool user_manager = false;      // <runtime_dir>/systemd/private or /bus answers (connect())
  bool have_systemd_run = false;  // <root>/usr/bin/systemd-run or <root>/bin/systemd-run
  std::string cgroup_layout;      // CgroupInfo::layout ("v2", "hybrid", ...)
  bool cgroup_usable = false;     // sbx's own cgroup v2 is writable with memory/pids/cpu (detect_cgroup)
  bool userns_probe_ok = true;    // the userns check created and used a user namespace
};

// Reads the facts under `root` ("" = this host). `uid`: whose view (0 = root). `user_manager` is
// probed by connect() only when `root` is "" (a fixture has no listener; tests set it).
BlockerFacts read_blocker_facts(const std::string& root, uid_t uid, const std::string& self_exe,
                                const std::string& runtime_dir);

// One CheckResult per blocker, in a fixed order: apparmor-userns, max-user-namespaces,
// userns-clone, cgroup2, subid, user-manager. None is required (the userns and namespaces probes
// decide whether sbx can run); a blocker that applies is "missing" (or "degraded" where sbx still
// runs, weaker), with the fix in `hint`.
std::vector<CheckResult> assess_blockers(const BlockerFacts& facts);

// Someone listens on the unix stream socket `path`: connect() on a unix socket completes at once
// (the listener's backlog takes it; no handshake), so this never blocks, and a socket file left by
// a manager that exited answers ECONNREFUSED. Doctor's user-manager row and sbx run's automatic
// systemd scope (cli/systemd_scope.cpp) ask the same question.
bool unix_socket_answers(const std::string& path);

}  // namespace sbx
