// sbx doctor's blocker checks, each on a fixture host tree (tests/fixtures/hostroot/), and the
// pure decisions behind the automatic systemd scope and the one-line limits warning.
#include <doctest/doctest.h>

#include <cerrno>
#include <string>

#include "runtime/linux/cgroup.hpp"
#include "runtime/linux/host_blockers.hpp"
#include "runtime/linux/limits_plan.hpp"
#include "runtime/model/scope_decision.hpp"

using namespace sbx;

namespace {

const std::string kRoots = SBX_SOURCE_DIR "/tests/fixtures/hostroot/";

CheckResult find(const std::vector<CheckResult>& v, const std::string& name) {
  for (auto& c : v)
    if (c.name == name) return c;
  FAIL("no check " << name);
  return v.front();
}

std::vector<CheckResult> assess(const std::string& fixture, uid_t uid, bool probe_ok = true) {
  BlockerFacts f = read_blocker_facts(kRoots + fixture, uid, "/usr/local/bin/sbx", "/run/user/1000");
  f.userns_probe_ok = probe_ok;
  f.cgroup_layout = "v2";
  return assess_blockers(f);
}

}  // namespace

TEST_CASE("doctor blockers: a healthy host reports every check ok") {
  for (uid_t uid : {0u, 1000u}) {
    auto v = assess("healthy", uid);
    CHECK(v.size() == 6);
    for (auto& c : v) {
      if (c.name == "user-manager") continue;  // rootless: no manager in a fixture (below)
      CHECK_MESSAGE(c.status == CheckStatus::ok, c.name << ": " << c.detail);
      CHECK(c.hint.empty());
      CHECK_FALSE(c.required);
    }
  }
  auto root = assess("healthy", 0);
  CHECK(find(root, "subid").detail.find("newuidmap present") != std::string::npos);
  CHECK(find(root, "cgroup2").detail == "cgroup2 at /sys/fs/cgroup");
}

TEST_CASE("doctor blockers: Ubuntu's apparmor_restrict_unprivileged_userns=1") {
  auto rootless = assess("ubuntu-apparmor", 1000, /*probe_ok=*/false);
  auto a = find(rootless, "apparmor-userns");
  CHECK(a.status == CheckStatus::missing);
  CHECK(a.detail.find("apparmor_restrict_unprivileged_userns=1") != std::string::npos);
  CHECK(a.hint.find("userns,") != std::string::npos);
  CHECK(a.hint.find("/usr/local/bin/sbx") != std::string::npos);  // the profile names this binary
  CHECK(a.hint.find("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0") != std::string::npos);
  // As root sbx itself runs; other users are the ones blocked.
  auto r = find(assess("ubuntu-apparmor", 0), "apparmor-userns");
  CHECK(r.status == CheckStatus::degraded);
  CHECK(r.detail.find("other users") != std::string::npos);
  // A profile that allows sbx: the knob is set, the probe worked, nothing to fix.
  auto ok = find(assess("ubuntu-apparmor", 1000, true), "apparmor-userns");
  CHECK(ok.status == CheckStatus::ok);
  CHECK(ok.hint.empty());
  // Elsewhere the knob is absent.
  CHECK(find(assess("healthy", 1000), "apparmor-userns").detail.find("not present") != std::string::npos);
}

TEST_CASE("doctor blockers: user.max_user_namespaces=0") {
  for (uid_t uid : {0u, 1000u}) {
    auto c = find(assess("maxuserns-zero", uid, false), "max-user-namespaces");
    CHECK(c.status == CheckStatus::missing);
    CHECK(c.detail.find("root included") != std::string::npos);
    CHECK(c.hint.rfind("sysctl -w user.max_user_namespaces=15000", 0) == 0);
  }
  CHECK(find(assess("healthy", 0), "max-user-namespaces").detail == "user.max_user_namespaces=63289");
}

TEST_CASE("doctor blockers: Debian's kernel.unprivileged_userns_clone=0") {
  auto c = find(assess("debian-clone-off", 1000, false), "userns-clone");
  CHECK(c.status == CheckStatus::missing);
  CHECK(c.hint.rfind("sysctl -w kernel.unprivileged_userns_clone=1", 0) == 0);
  CHECK(find(assess("debian-clone-off", 0), "userns-clone").status == CheckStatus::degraded);
  CHECK(find(assess("healthy", 1000), "userns-clone").status == CheckStatus::ok);
}

TEST_CASE("doctor blockers: no cgroup2 mounted") {
  auto c = find(assess("no-cgroup2", 0), "cgroup2");
  CHECK(c.status == CheckStatus::missing);
  CHECK(c.detail.find("cgroup v1 only") != std::string::npos);
  CHECK(c.hint.find("systemd.unified_cgroup_hierarchy=1") != std::string::npos);
  bool v1 = true;
  CHECK(cgroup2_mount_point("none /x cgroup2 rw 0 0\n", v1) == "/x");
  CHECK_FALSE(v1);
  CHECK(cgroup2_mount_point("garbage\n\n cgroup\n", v1).empty());
  // No mounts file at all: nothing is claimed.
  auto unk = find(assess("nonexistent-root", 0), "cgroup2");
  CHECK(unk.status == CheckStatus::degraded);
}

TEST_CASE("doctor blockers: sbx range in only one of /etc/subuid and /etc/subgid") {
  auto c = find(assess("subid-half", 0), "subid");
  CHECK(c.status == CheckStatus::degraded);
  CHECK(c.detail.find("only in /etc/subuid") != std::string::npos);
  CHECK(c.hint.find("/etc/subgid") != std::string::npos);
  CHECK(c.detail.find("newuidmap absent") != std::string::npos);
  // Rootless, neither matters: sbx maps only the caller's ids.
  auto r = find(assess("subid-half", 1000), "subid");
  CHECK(r.status == CheckStatus::ok);
  CHECK(r.detail.rfind("not needed", 0) == 0);
}

TEST_CASE("doctor blockers: the user manager for rootless limits") {
  BlockerFacts f = read_blocker_facts(kRoots + "healthy", 1000, "", "/run/user/1000");
  f.cgroup_layout = "v2";
  CHECK_FALSE(f.user_manager);  // a fixture root is never connect()ed to
  auto none = find(assess_blockers(f), "user-manager");
  CHECK(none.status == CheckStatus::degraded);
  CHECK(none.hint.find("loginctl enable-linger") != std::string::npos);
  f.user_manager = true;
  f.have_systemd_run = true;
  auto yes = find(assess_blockers(f), "user-manager");
  CHECK(yes.status == CheckStatus::ok);
  CHECK(yes.detail.find("re-executes itself in a delegated scope") != std::string::npos);
  f.cgroup_layout = "hybrid";
  CHECK(find(assess_blockers(f), "user-manager").detail.find("would offer no cgroup v2 controllers") != std::string::npos);
  f.cgroup_usable = true;
  CHECK(find(assess_blockers(f), "user-manager").status == CheckStatus::ok);
}

TEST_CASE("systemd scope: when a rootless run re-executes itself") {
  ScopeFacts f;
  f.rootless = true;
  f.layout = "v2";
  f.wants_cgroup = true;
  f.user_manager = "/run/user/1000/systemd/private";
  f.have_systemd_run = true;
  CHECK(decide_systemd_scope(ScopeMode::automatic, f).reexec);
  CHECK(decide_systemd_scope(ScopeMode::always, f).reexec);
  CHECK_FALSE(decide_systemd_scope(ScopeMode::never, f).reexec);
  CHECK(decide_systemd_scope(ScopeMode::never, f).why == "--no-systemd-scope");

  SUBCASE("no loop: the re-executed sbx stays") {
    f.in_scope = true;
    CHECK_FALSE(decide_systemd_scope(ScopeMode::automatic, f).reexec);
    CHECK_FALSE(decide_systemd_scope(ScopeMode::always, f).reexec);
  }
  SUBCASE("root and a usable cgroup need nothing") {
    ScopeFacts g = f;
    g.rootless = false;
    CHECK_FALSE(decide_systemd_scope(ScopeMode::automatic, g).reexec);
    g = f;
    g.cgroup_usable = true;
    CHECK_FALSE(decide_systemd_scope(ScopeMode::always, g).reexec);
    CHECK_FALSE(decide_systemd_scope(ScopeMode::always, g).error);
  }
  SUBCASE("automatic only where a scope helps: pure v2 and a cgroup limit") {
    f.layout = "hybrid";
    auto d = decide_systemd_scope(ScopeMode::automatic, f);
    CHECK_FALSE(d.reexec);
    CHECK(d.why.find("hybrid") != std::string::npos);
    CHECK(decide_systemd_scope(ScopeMode::always, f).reexec);  // the flag insists
    f.layout = "v2";
    f.wants_cgroup = false;
    CHECK_FALSE(decide_systemd_scope(ScopeMode::automatic, f).reexec);
  }
  SUBCASE("no user manager: automatic degrades, the flag is an error") {
    f.user_manager.clear();
    f.user_manager_probe = "/run/user/1000/systemd/private, /run/user/1000/bus";
    auto a = decide_systemd_scope(ScopeMode::automatic, f);
    CHECK_FALSE(a.reexec);
    CHECK_FALSE(a.error);
    CHECK(a.why.find("no systemd user manager answers") != std::string::npos);
    auto b = decide_systemd_scope(ScopeMode::always, f);
    CHECK(b.error);
    CHECK(b.why.rfind("--systemd-scope:", 0) == 0);
  }
  SUBCASE("no systemd-run") {
    f.have_systemd_run = false;
    CHECK_FALSE(decide_systemd_scope(ScopeMode::automatic, f).reexec);
    CHECK(decide_systemd_scope(ScopeMode::always, f).error);
  }
}

TEST_CASE("limits warning: the cause in a few words") {
  CgroupInfo hybrid{"hybrid", "/sys/fs/cgroup/unified", "/user.slice", {}, false, false};
  CHECK(cgroup_gap_short(hybrid, true, nullptr) == "cgroup v1/v2 hybrid host");
  CgroupInfo v2{"v2", "/sys/fs/cgroup", "/user.slice/user-1000.slice/session-1.scope", {"memory", "pids", "cpu"}, false, false};
  CHECK(cgroup_gap_short(v2, true, nullptr) == "cgroup not delegated to you");
  Error busy = make_error("cgroup", std::string(400, 'x'), EBUSY);
  std::string s = cgroup_gap_short(v2, false, &busy);
  CHECK(s == "cgroup v2 setup failed: its cgroup holds other processes");
  CgroupInfo none{"v1", "", "", {}, false, false};
  CHECK(cgroup_gap_short(none, false, nullptr) == "no cgroup v2 mounted");
  // In a container whose cgroup namespace root holds its processes: the one line names the fix.
  CgroupInfo ctr = v2;
  ctr.self_path.assign(1, '/');  // not = "/": GCC 12 -Wrestrict false positive
  ctr.namespace_root = true;
  ctr.namespace_root_procs = 3;
  CHECK(cgroup_gap_short(ctr, false, &busy) ==
        "the container's cgroup namespace root holds its processes: run 'sbx cgroup-init' once");
  ctr.namespace_root_procs = 0;  // after cgroup-init: whatever failed is not that
  CHECK(cgroup_gap_short(ctr, false, &busy) == "cgroup v2 setup failed: its cgroup holds other processes");
}
