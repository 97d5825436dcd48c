#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "runtime/base/paths.hpp"
#include "runtime/egress/egress_policy.hpp"
#include "runtime/model/environment.hpp"
#include "runtime/launch/preflight.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/base/suggest.hpp"

using namespace sbx;

namespace {
CgroupInfo hybrid_without_cpu() {
  CgroupInfo i;
  i.layout = "hybrid";
  i.mount = "/sys/fs/cgroup/unified";
  i.self_path = std::string(1, '/');  // GCC 12 misreports the literal "/" (-Wrestrict)
  i.controllers = {"hugetlb"};
  i.writable = true;
  return i;
}

std::string env_value(const std::vector<std::string>& env, const std::string& name) {
  for (auto& e : env)
    if (e.rfind(name + "=", 0) == 0) return e.substr(name.size() + 1);
  return "<unset>";
}
}  // namespace

TEST_CASE("require-limits: the error names the limit, the layer that set it and how to clear it") {
  auto profile = load_profile("untrusted");
  REQUIRE(profile.ok());
  Limits l;
  l.cpus = 1;
  l.pids = 64;
  auto plan = plan_limits(l, hybrid_without_cpu(), false, true);
  auto layers = limit_layers(*profile, nullptr, "", {});
  CHECK(layers["cpus"] == "profile 'untrusted'");
  auto e = require_limits_shortfall(plan, hybrid_without_cpu(), layers);
  REQUIRE(e.has_value());
  CHECK(e->message.find("cannot enforce cpus (1, set by profile 'untrusted': clear it with --cpus none)") !=
        std::string::npos);
  CHECK(e->message.find("pids") == std::string::npos);  // degraded (RLIMIT_NPROC) is enforced

  // Memory in the rlimit fallback is bounded per process only: a shortfall "in total".
  Limits mem;
  mem.memory_bytes = 1 << 20;
  auto m = require_limits_shortfall(plan_limits(mem, hybrid_without_cpu(), false, true), hybrid_without_cpu(), layers);
  REQUIRE(m.has_value());
  CHECK(m->message.find("cannot enforce memory in total (1M") != std::string::npos);  // as --memory spells it

  auto by_flag = limit_layers(*profile, nullptr, "", {"cpus"});
  CHECK(by_flag["cpus"] == "flag --cpus");
  e = require_limits_shortfall(plan, hybrid_without_cpu(), by_flag);
  REQUIRE(e.has_value());
  CHECK(e->message.find("set by flag --cpus: leave it out") != std::string::npos);

  nlohmann::json manifest = {{"limits", {{"cpus", 0.5}}}};
  auto from_manifest = limit_layers(*profile, &manifest, "p/pack.json", {});
  CHECK(from_manifest["cpus"] == "p/pack.json");
  CHECK(from_manifest["pids"] == "profile 'untrusted'");
  CHECK(from_manifest["cpu_time"] == "sbx's defaults");

  l.cpus.reset();  // cleared by --cpus none
  CHECK_FALSE(require_limits_shortfall(plan_limits(l, hybrid_without_cpu(), false, true), hybrid_without_cpu(), layers));
}

TEST_CASE("NO_PROXY leaves out the loopback names an allow rule sends to the host") {
  auto no_proxy = [](std::vector<std::string> allow) {
    RunSpec s;
    s.network.mode = "proxy";
    s.network.allow = std::move(allow);
    auto env = build_environment(s, nullptr, false);
    CHECK(env_value(env, "NO_PROXY") == env_value(env, "no_proxy"));
    return env_value(env, "NO_PROXY");
  };
  CHECK(no_proxy({"example.com"}) == "localhost,127.0.0.1,::1");
  CHECK(no_proxy({"127.0.0.1:8765"}) == "::1");
  CHECK(no_proxy({"[::1]:8080"}) == "127.0.0.1");
  CHECK(no_proxy({"127.0.0.0/8:*", "[::1]:80"}) == "");
  CHECK(no_proxy({"0.0.0.0/0:443"}) == "::1");
  CHECK(no_proxy({"10.0.0.0/8"}) == "localhost,127.0.0.1,::1");
  // A name rule for localhost never reaches the host (check_resolved refuses internal addresses
  // for names): localhost stays direct, inside the sandbox.
  CHECK(no_proxy({"localhost:3000"}) == "localhost,127.0.0.1,::1");
}

TEST_CASE("did you mean: close words only") {
  std::vector<std::string> cmds = {"run", "profile", "trace", "doctor", "pack", "exec", "image"};
  CHECK(did_you_mean("rn", cmds) == " (did you mean 'run'?)");
  CHECK(did_you_mean("imgae", cmds) == " (did you mean 'image'?)");
  CHECK(did_you_mean("xyzzy", cmds).empty());
  CHECK(did_you_mean("r", cmds).empty());  // one letter is no typo of anything
  CHECK(closest_word(std::string(100000, 'a'), cmds).empty());
}

TEST_CASE("allow-host: a URL says which form is expected") {
  auto r = parse_allow_rule("http://example.com:8080/path");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("not a URL") != std::string::npos);
  CHECK(r.error().message.find("--allow-host example.com:8080") != std::string::npos);
}

TEST_CASE("state dir: refused when another user could write it or a directory on its way") {
  char tmpl[] = "/tmp/sbx-unit-private-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string base = tmpl;
  auto refused = [](const std::string& p) {
    auto st = check_private_dir(p, "sbx's state dir");
    return st ? std::string() : st.error().message;
  };
  REQUIRE(::chmod(base.c_str(), 0700) == 0);
  CHECK(refused(base + "/state").empty());  // missing parts are sbx's to create
  REQUIRE(::mkdir((base + "/state").c_str(), 0700) == 0);
  CHECK(refused(base + "/state").empty());
  CHECK(refused(base + "/state/../state/").empty());
  REQUIRE(::chmod((base + "/state").c_str(), 0770) == 0);
  CHECK(refused(base + "/state").find("group-writable (mode 0770)") != std::string::npos);
  CHECK(refused(base + "/state").find("chmod go-w " + base + "/state") != std::string::npos);
  REQUIRE(::chmod((base + "/state").c_str(), 0700) == 0);
  // An ancestor others can write: without the sticky bit refused, with it (like /tmp) fine.
  REQUIRE(::chmod(base.c_str(), 0777) == 0);
  CHECK(refused(base + "/state").find("world-writable") != std::string::npos);
  CHECK(refused(base + "/state/deeper/still").find(base + " is world-writable") != std::string::npos);
  REQUIRE(::chmod(base.c_str(), 01777) == 0);
  CHECK(refused(base + "/state").empty());
  // The state dir itself sticky and world-writable: refused all the same.
  REQUIRE(::chmod((base + "/state").c_str(), 01777) == 0);
  CHECK_FALSE(refused(base + "/state").empty());
  REQUIRE(::chmod((base + "/state").c_str(), 0700) == 0);
  // Through a symlink: the target's parts are checked.
  REQUIRE(::chmod(base.c_str(), 0700) == 0);
  REQUIRE(::mkdir((base + "/open").c_str(), 0700) == 0);
  REQUIRE(::chmod((base + "/open").c_str(), 0777) == 0);
  REQUIRE(::mkdir((base + "/open/st").c_str(), 0700) == 0);
  REQUIRE(::symlink((base + "/open/st").c_str(), (base + "/link").c_str()) == 0);
  CHECK(refused(base + "/link").find(base + "/open is world-writable") != std::string::npos);
  if (::geteuid() == 0) {  // owned by another user
    REQUIRE(::chown((base + "/state").c_str(), 65534, 65534) == 0);
    CHECK(refused(base + "/state").find("belongs to uid 65534") != std::string::npos);
  }
  CHECK(std::system(("chmod -R u+rwx " + base + "; rm -rf " + base).c_str()) == 0);
}

TEST_CASE("binds: none read-write over the state dir, the data dir or the config dir") {
  Dirs d;
  d.state = "/srv/sbx-unit/state";
  d.data = "/srv/sbx-unit/data";
  auto check = [&](const std::string& bind) {
    RunSpec s;
    s.binds.push_back(*parse_bind(bind));
    auto st = check_binds_spare_state(s, "/", d);
    return st ? std::string() : st.error().message;
  };
  CHECK(check("/srv/sbx-unit/state:/s:rw").find("is sbx's state dir") != std::string::npos);
  CHECK(check("/srv/sbx-unit/state/cache:/s:rw").find("is inside sbx's state dir") != std::string::npos);
  CHECK(check("/srv/sbx-unit:/s:rw").find("holds sbx's state dir") != std::string::npos);
  CHECK(check("/:/host:rw").find("holds sbx's state dir") != std::string::npos);
  CHECK(check("/srv/sbx-unit/data/images:/i:rw").find("sbx's data dir") != std::string::npos);
  CHECK(check("/srv/sbx-unit/state").empty());              // read-only: the program cannot write
  CHECK(check("/srv/sbx-unit/stateful:/s:rw").empty());     // a sibling with a common prefix
  CHECK(check("/srv/other:/o:rw").empty());
}
