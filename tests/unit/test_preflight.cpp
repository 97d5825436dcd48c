#include <doctest/doctest.h>

#include <algorithm>

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
