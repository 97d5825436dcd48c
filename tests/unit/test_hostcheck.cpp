#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "runtime/linux/hostcheck.hpp"

using namespace sbx;

namespace {
// A scratch directory that removes itself (files one level deep, dirs two levels).
struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/sbx-test-hostcheck-XXXXXX";
    REQUIRE(::mkdtemp(t) != nullptr);
    path = t;
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string write(const std::string& rel, const std::string& data) {
    std::string p = path + "/" + rel;
    std::ofstream(p) << data;
    return p;
  }
};
// Field by field, so that members added to CgroupInfo later do not break these tests.
CgroupInfo cg(std::string layout, std::string mount, std::string self, std::vector<std::string> ctl, bool writable) {
  CgroupInfo i;
  i.layout = std::move(layout);
  i.mount = std::move(mount);
  i.self_path = std::move(self);
  i.controllers = std::move(ctl);
  i.writable = writable;
  return i;
}
}  // namespace

TEST_CASE("parse_sysctl_int accepts one integer with surrounding whitespace only") {
  CHECK(parse_sysctl_int("1\n") == 1);
  CHECK(parse_sysctl_int("  96364 \n") == 96364);
  CHECK(parse_sysctl_int("-1") == -1);
  CHECK(parse_sysctl_int("0") == 0);
  CHECK_FALSE(parse_sysctl_int("").has_value());
  CHECK_FALSE(parse_sysctl_int("\n").has_value());
  CHECK_FALSE(parse_sysctl_int("1 2").has_value());
  CHECK_FALSE(parse_sysctl_int("yes").has_value());
  CHECK_FALSE(parse_sysctl_int("12abc").has_value());
}

TEST_CASE("read_sysctl_int reads a file, and says which path failed") {
  TempDir d;
  auto r = read_sysctl_int(d.write("v", "42\n"));
  REQUIRE(r.ok());
  CHECK(*r == 42);

  auto bad = read_sysctl_int(d.write("bad", "nope\n"));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("/bad") != std::string::npos);

  auto none = read_sysctl_int(d.path + "/absent");
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().err == ENOENT);
}

TEST_CASE("read_userns_sysctls reads the knobs that exist and leaves the others empty") {
  TempDir d;
  ::mkdir((d.path + "/user").c_str(), 0700);
  ::mkdir((d.path + "/kernel").c_str(), 0700);
  d.write("user/max_user_namespaces", "15000\n");
  d.write("kernel/apparmor_restrict_unprivileged_userns", "1\n");
  auto s = read_userns_sysctls(d.path);
  CHECK(s.max_user_namespaces == 15000);
  CHECK(s.apparmor_restrict == 1);
  CHECK_FALSE(s.unprivileged_userns_clone.has_value());
}

TEST_CASE("find_subid_range finds the named user's first valid line") {
  std::string f = "alice:100000:65536\n# comment\nsbx:bad:1\nsbx:1000000:65536\nsbx:2000000:10\n";
  auto r = find_subid_range(f, "sbx");
  REQUIRE(r.has_value());
  CHECK(r->start == 1000000);
  CHECK(r->count == 65536);
  CHECK_FALSE(find_subid_range(f, "sb").has_value());
  CHECK_FALSE(find_subid_range("", "sbx").has_value());
  CHECK_FALSE(find_subid_range("sbx:5:0", "sbx").has_value());
  CHECK(find_subid_range("sbx:7:3", "sbx")->start == 7);  // no trailing newline
}

TEST_CASE("assess_userns explains a failure with the most specific knob") {
  Status fail = make_error("doctor", "unshare(CLONE_NEWUSER)", EPERM);
  UsernsSysctls s;
  s.max_user_namespaces = 0;
  auto r = assess_userns("userns", fail, s, true, true);
  CHECK(r.status == CheckStatus::missing);
  CHECK(r.required);
  CHECK(r.hint.find("user.max_user_namespaces") != std::string::npos);

  s.max_user_namespaces = 1000;
  s.unprivileged_userns_clone = 0;
  CHECK(assess_userns("userns", fail, s, true, true).hint.find("unprivileged_userns_clone=1") != std::string::npos);

  s.unprivileged_userns_clone = 1;
  s.apparmor_restrict = 1;
  r = assess_userns("userns", fail, s, true, true);
  CHECK(r.hint.find("apparmor_restrict_unprivileged_userns=0") != std::string::npos);
  CHECK(r.hint.find("AppArmor profile") != std::string::npos);

  // The Debian/Ubuntu knobs do not restrict a privileged caller: the hint must not blame them.
  r = assess_userns("userns", fail, s, false, true);
  CHECK(r.hint.find("apparmor") == std::string::npos);

  r = assess_userns("userns", Status{}, s, true, true);
  CHECK(r.status == CheckStatus::ok);
  CHECK(r.hint.empty());
  CHECK(r.detail.find("apparmor_restrict_unprivileged_userns=1") != std::string::npos);
}

TEST_CASE("assess_cgroup: ok only with a writable v2 cgroup offering memory, cpu and pids") {
  CgroupInfo v2 = cg("v2", "/sys/fs/cgroup", "/user.slice/x", {"cpuset", "cpu", "io", "memory", "pids"}, true);
  auto r = assess_cgroup(v2);
  CHECK(r.status == CheckStatus::ok);
  CHECK_FALSE(r.required);
  CHECK(r.detail.find("memory") != std::string::npos);

  CgroupInfo hybrid = cg("hybrid", "/sys/fs/cgroup/unified", "/", {"hugetlb"}, true);
  r = assess_cgroup(hybrid);
  CHECK(r.status == CheckStatus::degraded);
  CHECK(r.detail.find("missing memory,cpu,pids") != std::string::npos);
  CHECK(r.hint.find("systemd.unified_cgroup_hierarchy=1") != std::string::npos);

  v2.writable = false;
  r = assess_cgroup(v2);
  CHECK(r.status == CheckStatus::degraded);
  CHECK(r.hint.find("Delegate=yes") != std::string::npos);

  r = assess_cgroup(cg("v1", "", "", {}, false));
  CHECK(r.status == CheckStatus::degraded);
  CHECK_FALSE(r.hint.empty());
}

TEST_CASE("render_table and checks_to_json: rows, hints, verdict") {
  std::vector<CheckResult> checks = {
      {"userns", CheckStatus::ok, true, "created", ""},
      {"cgroup", CheckStatus::degraded, false, "hybrid", "boot with X"},
  };
  CHECK(host_can_run(checks));
  std::string t = render_table(checks);
  CHECK(t.rfind("CHECK", 0) == 0);
  CHECK(t.find("userns  ok") != std::string::npos);
  CHECK(t.find("required") != std::string::npos);
  CHECK(t.find("fix: boot with X\n") != std::string::npos);
  CHECK(t.find("sbx can run on this host (1 optional feature missing or degraded") != std::string::npos);

  auto j = checks_to_json(checks);
  CHECK(j["ok"] == true);
  REQUIRE(j["checks"].size() == 2);
  CHECK(j["checks"][1]["name"] == "cgroup");
  CHECK(j["checks"][1]["status"] == "degraded");
  CHECK(j["checks"][1]["required"] == false);
  CHECK(j["checks"][1]["detail"] == "hybrid");
  CHECK(j["checks"][1]["hint"] == "boot with X");

  checks.push_back({"pidfd", CheckStatus::missing, true, "ENOSYS", "upgrade"});
  CHECK_FALSE(host_can_run(checks));
  CHECK(checks_to_json(checks)["ok"] == false);
  CHECK(render_table(checks).find("sbx cannot run on this host") != std::string::npos);
}

TEST_CASE("run_host_checks: every probe answers, fast, and leaves nothing behind") {
  auto before = std::chrono::steady_clock::now();
  auto checks = run_host_checks();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - before).count();
  MESSAGE("host checks took " << ms << " ms");
  CHECK(ms < 1000);  // the budget is 100 ms; generous here for loaded CI machines

  std::set<std::string> names;
  for (auto& c : checks) {
    INFO(c.name << ": " << to_string(c.status) << " " << c.detail);
    CHECK_FALSE(c.name.empty());
    CHECK(names.insert(c.name).second);
    CHECK_FALSE(c.detail.empty());
    bool known = c.status == CheckStatus::ok || c.status == CheckStatus::missing || c.status == CheckStatus::degraded;
    CHECK(known);
    if (c.required) CHECK(c.status != CheckStatus::degraded);
    if (c.status == CheckStatus::missing && c.required) CHECK_FALSE(c.hint.empty());
  }
  for (const char* want :
       {"userns", "namespaces", "clone3", "cgroup", "overlayfs", "seccomp", "pidfd", "landlock", "identity"})
    CHECK(names.count(want) == 1);

  // The overlay probe's scratch directory is gone.
  std::string leftovers;
  if (FILE* p = ::popen("ls -d /tmp/sbx-doctor-?????? 2>/dev/null", "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) leftovers += buf;
    ::pclose(p);
  }
  CHECK(leftovers.empty());
}

TEST_CASE("sandbox row: ok on exit 0, else the run's own last error line, required") {
  auto ok = assess_sandbox_run(0, "", false);
  CHECK(ok.name == "sandbox");
  CHECK(ok.status == CheckStatus::ok);
  CHECK(ok.required);
  CHECK(ok.hint.empty());
  auto failed = assess_sandbox_run(
      125, "sbx: warning: something\nsbx: setup failed at mounts: proc on /proc: Operation not permitted (fix it)\n",
      false);
  CHECK(failed.status == CheckStatus::missing);
  CHECK(failed.detail ==
        "a throwaway sandbox running /bin/true failed: setup failed at mounts: proc on /proc: "
        "Operation not permitted (fix it)");
  CHECK(!failed.hint.empty());
  CHECK(!host_can_run({failed}));
  CHECK(assess_sandbox_run(1, "no sbx line", false).detail.find("exit status 1") != std::string::npos);
  CHECK(assess_sandbox_run(137, "", true).detail.find("did not finish in time") != std::string::npos);
  // An image without /bin/true (an empty root holding only sbx's package): the sandbox was built.
  auto no_true = assess_sandbox_run(127, "", false);
  CHECK(no_true.status == CheckStatus::ok);
  CHECK(no_true.detail.find("no runnable /bin/true: exit 127") != std::string::npos);
  CHECK(assess_sandbox_run(125, "sbx: setup failed at x", false).status == CheckStatus::missing);
}
