#include <doctest/doctest.h>

#include <algorithm>

#include "runtime/model/environment.hpp"
#include "runtime/linux/userns.hpp"

using namespace sbx;

TEST_CASE("environment is cleared, then defaults, passed and explicit variables") {
  const char* caller[] = {"TERM=xterm", "SECRET=1", "KEEP=yes", "PATH=/host/bin", nullptr};
  RunSpec s;
  s.env_pass = {"KEEP", "ABSENT"};
  s.env = {{"A", "b=c"}, {"LANG", "de_DE.UTF-8"}};
  auto env = build_environment(s, const_cast<char**>(caller), true);
  auto has = [&](const std::string& kv) { return std::find(env.begin(), env.end(), kv) != env.end(); };
  CHECK(has(std::string("PATH=") + kSandboxPath));
  CHECK(has("HOME=/tmp"));
  CHECK(has("TERM=xterm"));
  CHECK(has("KEEP=yes"));
  CHECK(has("A=b=c"));
  CHECK(has("LANG=de_DE.UTF-8"));
  for (auto& e : env) {
    CHECK(e.rfind("SECRET=", 0) != 0);
    CHECK(e.rfind("ABSENT=", 0) != 0);
  }
  auto piped = build_environment(s, const_cast<char**>(caller), false);
  CHECK(std::find(piped.begin(), piped.end(), "TERM=dumb") != piped.end());
}

TEST_CASE("identity: rootless maps the caller, root maps an unprivileged range, never host 0") {
  RunSpec s;
  s.uid = 1000;
  s.gid = 1000;
  auto rl = plan_identity(s, 4242, 4343, "", "");
  REQUIRE(rl.ok());
  CHECK(rl->rootless);
  REQUIRE(rl->uid_map.size() == 1);
  CHECK(rl->uid_map[0].inside == 1000);
  CHECK(rl->uid_map[0].outside == 4242);
  CHECK(rl->gid_map[0].outside == 4343);

  auto root = plan_identity(s, 0, 0, "", "");
  REQUIRE(root.ok());
  CHECK_FALSE(root->rootless);
  CHECK(root->uid_map[0].outside == kDefaultHostBase);
  CHECK(root->uid_map[0].count == kMappedRange);
  for (auto& m : root->uid_map) CHECK(m.outside > 0);

  auto sub = plan_identity(s, 0, 0, "alice:100000:65536\nsbx:500000:65536\n", "sbx:600000:70000\n");
  REQUIRE(sub.ok());
  CHECK(sub->uid_map[0].outside == 500000);
  CHECK(sub->gid_map[0].outside == 600000);
  // A range too small to hold 0-65535 is not used.
  auto small = plan_identity(s, 0, 0, "sbx:500000:1000\n", "sbx:600000:1000\n");
  REQUIRE(small.ok());
  CHECK(small->uid_map[0].outside == kDefaultHostBase);
  s.uid = 70000;
  CHECK_FALSE(plan_identity(s, 0, 0, "", "").ok());
}
