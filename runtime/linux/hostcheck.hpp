#pragma once
// Host checks for `sbx doctor`: can this kernel, in this configuration, give sbx what it needs?
// Each probe is a function returning one CheckResult. Probes that need a namespace do their work
// in a short-lived forked child (so the caller's namespaces and mounts never change), clean up
// after themselves, and together take a few milliseconds. The judgement of raw facts (sysctl
// values, cgroup layout) is split from the gathering, so it can be tested without root.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/linux/cgroup.hpp"
#include "runtime/base/error.hpp"

namespace sbx {

// ok: present and usable. missing: absent or blocked. degraded: usable with less than sbx wants
// (e.g. cgroup v2 without the memory controller: limits fall back to rlimits). Required checks
// only ever report ok or missing.
enum class CheckStatus { ok, missing, degraded };
std::string_view to_string(CheckStatus s);

struct CheckResult {
  std::string name;  // stable id, e.g. "userns", "cgroup"
  CheckStatus status = CheckStatus::missing;
  bool required = false;  // sbx cannot run without it
  std::string detail;     // what was found, in one line
  std::string hint;       // how to fix it; empty when there is nothing to fix
};

// ---- pure helpers (no kernel state; unit-tested) -------------------------------------------

// A sysctl file's value as an integer ("1\n" -> 1). Errors carry the path and errno (ENOENT when
// this kernel has no such sysctl, which for distro-specific knobs is normal).
Result<long> read_sysctl_int(const std::string& path);
// Strict integer parse of a sysctl value: optional surrounding whitespace, nothing else.
std::optional<long> parse_sysctl_int(std::string_view text);

// A subordinate id range from /etc/subuid or /etc/subgid contents ("name:start:count" lines).
struct SubidRange {
  unsigned long start = 0;
  unsigned long count = 0;
};
std::optional<SubidRange> find_subid_range(std::string_view contents, std::string_view user);

// The user-namespace sysctls, read where they exist (std::nullopt: this kernel lacks the knob).
struct UsernsSysctls {
  std::optional<long> max_user_namespaces;        // user.max_user_namespaces (all kernels)
  std::optional<long> unprivileged_userns_clone;  // kernel.unprivileged_userns_clone (Debian)
  std::optional<long> apparmor_restrict;          // kernel.apparmor_restrict_unprivileged_userns (Ubuntu)
};
UsernsSysctls read_userns_sysctls(const std::string& proc_sys = "/proc/sys");

// Judge a user-namespace probe. `probe` is what creating one (and using its capabilities) did;
// `unprivileged` says whether the probe ran without host privileges, which is when the Debian
// and Ubuntu knobs apply. The sysctls explain a failure and choose the hint.
CheckResult assess_userns(std::string name, const Status& probe, const UsernsSysctls& sysctls, bool unprivileged,
                          bool required);

// Judge the cgroup layout: ok with a delegated v2 cgroup offering memory, cpu and pids; degraded
// otherwise (sbx then enforces what it can with rlimits). Never required.
CheckResult assess_cgroup(const CgroupInfo& info);

// Judge the throwaway sandbox `sbx doctor` runs (`sbx run -- /bin/true`, the real run path, so
// that whatever fails every run fails this row): ok on exit 0, and on 126/127 (built, but the image
// has no runnable /bin/true); else missing (required), with the
// run's own last "sbx: " line of `err` (its error, whose "(...)" says how to fix it), or the exit
// status when it printed none. `killed`: doctor stopped it at its time bound.
CheckResult assess_sandbox_run(int status, std::string_view err, bool killed);
// The last "sbx: ..." line of a re-run sbx's stderr, less its prefix ("" when none): its error.
std::string_view last_sbx_line(std::string_view err);

// Output: a fixed-width table (one row per check, a "fix:" line under each row with a hint, then a
// verdict line), and the JSON object {ok, checks: [{name, status, required, detail, hint}]}.
std::string render_table(const std::vector<CheckResult>& checks);
nlohmann::json checks_to_json(const std::vector<CheckResult>& checks);
// sbx can run here: every required check is ok.
bool host_can_run(const std::vector<CheckResult>& checks);

// ---- probes (touch the kernel; each returns one check) -----------------------------------

CheckResult check_userns();           // required: unshare(CLONE_NEWUSER) as the caller
CheckResult check_userns_rootless();  // info: as root, the same from an unprivileged uid
CheckResult check_namespaces();       // required: all seven namespaces sbx creates
CheckResult check_clone3();           // info: clone3 exists (sbx falls back to clone)
CheckResult check_cgroup();           // optional: cgroup v2 controllers, delegation
CheckResult check_overlayfs();
CheckResult
check_capabilities();  // info: what sbx holds (libcap-ng); the trusted set is keepable         // optional: overlay mount inside a user namespace
CheckResult check_seccomp();   // required: filter mode, KILL_PROCESS (USER_NOTIF noted)
CheckResult check_pidfd();     // required: pidfd_open
CheckResult check_landlock();  // info: Landlock ABI version
CheckResult check_identity();  // info: root or rootless, and the sbx subordinate range

// All of the above, in a fixed order.
std::vector<CheckResult> run_host_checks();

}  // namespace sbx
