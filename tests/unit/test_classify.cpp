#include <doctest/doctest.h>

#include <set>

#include "runtime/model/classify.hpp"

using namespace sbx;
using nlohmann::json;

namespace {
Workload parse(const json& j) {
  auto w = workload_from_json(j, "test.json");
  INFO(j.dump());
  if (!w) FAIL(w.error().message);
  return *w;
}

bool fires(const std::string& id, const Workload& w) {
  for (auto& r : classify_rules())
    if (r.id == id) return r.fires(w);
  FAIL("no rule " << id);
  return false;
}

// One rule: `yes` fires it and is answered with `tier`; `no` (one answer changed) does not fire it.
void rule_case(const std::string& id, const json& yes, int tier, const json& no) {
  Workload wy = parse(yes), wn = parse(no);
  CHECK(fires(id, wy));
  CHECK_FALSE(fires(id, wn));
  auto c = classify(wy);
  REQUIRE(c.ok());
  CHECK(c->tier == tier);
  bool deciding = false;
  for (auto* r : c->reasons()) deciding |= r->id == id;
  CHECK(deciding);
}

json base(const std::string& code, const std::string& lifetime = "task") {
  return {{"code", code}, {"network", "none"}, {"lifetime", lifetime}};
}
json with(json j, const std::string& key, const json& v) {
  j[key] = v;
  return j;
}
}  // namespace

TEST_CASE("classify rule no-code: no code runs -> tier 0") {
  rule_case("no-code", base("none", "request"), 0, base("trusted", "request"));
}

TEST_CASE("classify rule trusted-in-request: trusted, done within the request -> tier 1") {
  rule_case("trusted-in-request", base("trusted", "request"), 1, base("trusted", "task"));
}

TEST_CASE("classify rule trusted-outlives-request: trusted background work -> tier 2") {
  rule_case("trusted-outlives-request", base("trusted", "long-lived"), 2, base("trusted", "request"));
}

TEST_CASE("classify rule trusted-needs-process: a shell for trusted code -> tier 3") {
  rule_case("trusted-needs-process", with(base("trusted"), "runtime", {{"shell", true}}), 3,
            with(base("trusted"), "runtime", {{"shell", false}}));
}

TEST_CASE("classify rule trusted-needs-limits: trusted code held to limits -> tier 3") {
  rule_case("trusted-needs-limits", with(base("trusted"), "limits", {{"memory", "1G"}}), 3,
            with(base("trusted"), "limits", {{"spend", "$1"}}));
}

TEST_CASE("classify rule untrusted-code: model-written code -> tier 4") {
  rule_case("untrusted-code", base("model-written"), 4, base("trusted"));
  CHECK(fires("untrusted-code", parse(base("untrusted"))));
}

TEST_CASE("classify rule kernel-features: mounts/modules -> tier 5 even for trusted code") {
  rule_case("kernel-features", with(base("trusted"), "runtime", {{"kernel_features", true}}), 5,
            with(base("trusted"), "runtime", {{"writable_fs", true}}));
}

TEST_CASE("classify rule untrusted-long-lived: untrusted and long-lived or persistent -> tier 5") {
  rule_case("untrusted-long-lived", base("untrusted", "long-lived"), 5, base("untrusted", "task"));
  CHECK(fires("untrusted-long-lived", parse(with(base("untrusted"), "state", "persistent"))));
  CHECK_FALSE(fires("untrusted-long-lived", parse(with(base("untrusted"), "state", "scratch"))));
}

TEST_CASE("classify rule untrusted-open-egress: public web or unlisted private services -> tier 5") {
  json pub = with(base("untrusted"), "network", "public");
  json listed = with(with(base("untrusted"), "network", "private"), "allow", {"10.0.0.5:5432"});
  rule_case("untrusted-open-egress", pub, 5, listed);
  CHECK(fires("untrusted-open-egress", parse(with(base("untrusted"), "network", "private"))));
  CHECK(classify(parse(listed))->tier == 4);
}

TEST_CASE("classify rule untrusted-gpu: untrusted code on a GPU -> tier 5") {
  rule_case("untrusted-gpu", with(base("untrusted"), "runtime", {{"gpu", true}}), 5,
            with(base("trusted"), "runtime", {{"gpu", true}}));
}

// A rule added to the table without a "classify rule ID" case above fails here.
TEST_CASE("classify table: every rule has its test case") {
  const std::set<std::string> with_case = {"no-code",          "trusted-in-request",  "trusted-outlives-request",
                                           "trusted-needs-process", "trusted-needs-limits", "untrusted-code",
                                           "kernel-features",  "untrusted-long-lived", "untrusted-open-egress",
                                           "untrusted-gpu"};
  std::set<std::string> in_table;
  for (auto& r : classify_rules()) in_table.insert(r.id);
  CHECK(in_table == with_case);
  CHECK(in_table.size() == classify_rules().size());  // ids are unique
}

TEST_CASE("classify: a tier up names the next tier's rules that did not fire") {
  auto c = classify(parse(base("untrusted")));
  REQUIRE(c.ok());
  std::set<std::string> up;
  for (auto* r : c->up) {
    CHECK(r->tier == 5);
    up.insert(r->id);
  }
  CHECK(up == std::set<std::string>{"kernel-features", "untrusted-long-lived", "untrusted-open-egress", "untrusted-gpu"});
  auto top = classify(parse(base("untrusted", "long-lived")));
  CHECK(top->up.empty());
}

TEST_CASE("classify: tiers 3-4 carry a profile with the answers filled in; 0-2 and 5 none") {
  json j = {{"name", "x"},
            {"code", "model-written"},
            {"credentials", {"API_TOKEN"}},
            {"network", "allowlist"},
            {"allow", {"api.example.com"}},
            {"lifetime", "task"},
            {"limits", {{"memory", "256M"}, {"processes", 16}, {"timeout", "20s"}, {"cpus", 0.5}, {"output", "1M"}}}};
  auto c = classify(parse(j));
  REQUIRE(c.ok());
  const json& p = c->profile;
  CHECK(p["tier"] == 4);
  CHECK(p["limits"]["memory"] == "256M");
  CHECK(p["limits"]["pids"] == 16);
  CHECK(p["limits"]["timeout"] == "20s");
  CHECK(p["limits"]["cpus"] == 0.5);
  CHECK(p["limits"]["output_limit"] == "1M");
  CHECK(p["network"]["mode"] == "proxy");
  CHECK(p["network"]["allow"] == json::array({"api.example.com"}));
  CHECK(p["env_pass"] == json::array({"API_TOKEN"}));
  CHECK(p["capabilities"]["keep"].empty());
  auto t3 = classify(parse(with(base("trusted"), "runtime", {{"package_install", true}})));
  CHECK(t3->profile["capabilities"]["keep"].size() == 5);  // built on 'trusted'
  CHECK(t3->profile["network"]["mode"] == "none");
  CHECK(classify(parse(base("trusted")))->profile.is_null());
  CHECK(classify(parse(base("untrusted", "long-lived")))->profile.is_null());
}

TEST_CASE("classify: bad workloads are refused with the JSON path") {
  auto err = [](const json& j) {
    auto w = workload_from_json(j, "w.json");
    REQUIRE_FALSE(w.ok());
    return w.error().message;
  };
  CHECK(err(json::array()).find("w.json: must be a JSON object") == 0);
  CHECK(err({{"network", "none"}, {"lifetime", "task"}}).find("w.json: /code: missing") == 0);
  CHECK(err(with(base("trusted"), "code", "trustd")).find("/code: 'trustd' is not one of") != std::string::npos);
  CHECK(err(with(base("trusted"), "netwrk", "none")).find("/netwrk: unknown key (did you mean 'network'") != std::string::npos);
  CHECK(err(with(base("trusted"), "runtime", {{"shel", true}})).find("/runtime/shel: unknown key") != std::string::npos);
  CHECK(err(with(base("trusted"), "runtime", {{"gpu", "yes"}})).find("/runtime/gpu: must be true or false") != std::string::npos);
  CHECK(err(with(base("none"), "runtime", {{"shell", true}})).find("/runtime/shell: code is none") != std::string::npos);
  CHECK(err(with(base("trusted"), "credentials", {"A-B"})).find("/credentials/0:") != std::string::npos);
  CHECK(err(with(base("trusted"), "allow", {"x.com"})).find("/allow: network is none") != std::string::npos);
  CHECK(err(with(base("trusted"), "network", "allowlist")).find("/allow: network allowlist needs") != std::string::npos);
  CHECK(err(with(with(base("trusted"), "network", "allowlist"), "allow", {"a b"})).find("/allow/0:") != std::string::npos);
  CHECK(err(with(base("trusted"), "limits", {{"memory", "lots"}})).find("/limits/memory:") != std::string::npos);
  CHECK(err(with(base("trusted"), "limits", {{"processes", -1}})).find("/limits/processes:") != std::string::npos);
  CHECK(err(with(base("trusted"), "limits", {{"timeout", true}})).find("/limits/timeout:") != std::string::npos);
  CHECK(err(with(base("trusted"), "name", std::string(2000, 'x'))).find("/name:") != std::string::npos);
}
