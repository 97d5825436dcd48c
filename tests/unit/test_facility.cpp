#include <doctest/doctest.h>

#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "runtime/launch/facility.hpp"
#include "runtime/typed/schema_validate.hpp"

using namespace sbx;
using nlohmann::json;

namespace {

json trace_schema() {
  std::ifstream f(SBX_SOURCE_DIR "/schemas/trace.schema.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

std::set<std::string> keys_of(const json& object) {
  std::set<std::string> k;
  for (auto& [key, value] : object.items()) k.insert(key);
  return k;
}

std::set<std::string> strings_of(const json& array) {
  std::set<std::string> s;
  for (auto& v : array) s.insert(v.get<std::string>());
  return s;
}

CgroupInfo hybrid_host() {
  CgroupInfo i;
  i.layout = "hybrid";
  i.mount = "/sys/fs/cgroup/unified";
  i.self_path = std::string(1, '/');
  i.controllers = {"hugetlb"};
  return i;
}

RunRequest request() {
  RunRequest r;
  r.spec.argv = {"true"};
  r.spec.limits.memory_bytes = 64 << 20;  // the rlimit fallback on this cgroup layout: memory_fallback
  r.spec.limits.pids = 50;
  return r;
}

// A whole record from trace_record with `enforcement`, checked against the schema.
std::string schema_errors(const json& enforcement) {
  TraceParts p;
  p.run_id = "20261201T000000.000Z-00000000";
  p.started_at = p.ended_at = "2026-12-01T00:00:00.000Z";
  p.host = {{"kernel", "6.1.0"}, {"cgroup", {{"layout", "hybrid"}, {"mount", ""}, {"self_path", "/"}, {"controllers", json::array()}}}};
  p.invocation = {{"argv", {"sbx", "run", "--", "true"}}, {"cwd", "/"},
                  {"profile", {{"name", "default"}, {"origin", "builtin"}, {"sha256", std::string(64, 'a')}}},
                  {"pack", nullptr}, {"spec", json::object()}};
  p.image = {{"name", "host"}, {"digest", nullptr}, {"mounts", json::array()}};
  p.enforcement = enforcement;
  json record = trace_record(std::move(p));
  auto schema = CompiledSchema::compile(trace_schema(), "schemas/trace.schema.json");
  if (!schema) return "schema does not compile";
  std::string all;
  for (auto& e : schema->validate(record)) all += e.pointer + ": " + e.message + "\n";
  return all;
}

}  // namespace

TEST_CASE("facilities: in the order a run prepares them") {
  std::vector<std::string> names;
  for (auto* f : facilities()) names.push_back(f->name());
  CHECK(names == std::vector<std::string>{"namespaces", "identity", "gpu", "limits", "mounts", "image", "inputs", "seccomp",
                                          "capabilities", "network"});
}

TEST_CASE("facilities: a run that prepared nothing records exactly the schema's required enforcement members") {
  RunRequest req = request();
  std::string cwd = "/";
  CgroupInfo cg = hybrid_host();
  Result<IdentityPlan> identity = plan_identity(req.spec);
  RunContext ctx(req, cwd, cg, identity, false);
  json e = enforcement_record(ctx, nullptr);
  json schema = trace_schema();
  CHECK(keys_of(e) == strings_of(schema["properties"]["enforcement"]["required"]));
  CHECK(e["cgroup"] == "unavailable");
  CHECK(e["seccomp"]["note"] == "not installed: the run ended before the policy was prepared");
  CHECK(e["limits_applied"] == json::object());
  CHECK(e["limits_not_applied"] == json::array());
  CHECK_FALSE(e["capabilities"].contains("program"));  // only once the supervisor saw the program
  CHECK(schema_errors(e) == "");
}

TEST_CASE("facilities: the record after every prepare step has each facility's part, within the schema") {
  RunRequest req = request();
  std::string cwd = "/";
  CgroupInfo cg = hybrid_host();
  Result<IdentityPlan> identity = plan_identity(req.spec);
  REQUIRE(identity);
  RunContext ctx(req, cwd, cg, identity, true);  // a dry run: nothing created
  auto st = prepare_facilities(ctx);
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().describe()));
  SuperviseResult sup;
  json e = enforcement_record(ctx, &sup);
  json schema = trace_schema();
  auto members = keys_of(schema["properties"]["enforcement"]["properties"]);
  for (auto& k : keys_of(e)) CHECK_MESSAGE(members.count(k), k);
  for (auto& k : strings_of(schema["properties"]["enforcement"]["required"])) CHECK_MESSAGE(e.contains(k), k);
  CHECK(e["cgroup"] == "unavailable (hybrid)");
  CHECK(e.contains("gpu"));
  CHECK(e.contains("memory_fallback"));
  CHECK(e["limits_applied"].contains("pids"));
  CHECK(e["seccomp"]["mode"] == "filter");
  CHECK(e["capabilities"]["program"].is_null());  // the supervisor saw no program start
  CHECK(schema_errors(e) == "");
  // --dry-run's enforcement comes from the same facilities.
  json plan = enforcement_plan(ctx);
  CHECK(keys_of(plan) == std::set<std::string>{"limits", "kernel_quotas", "cgroup", "identity", "seccomp", "network",
                                               "image", "mounts", "gpu", "memory_fallback"});
  CHECK(plan["seccomp"] == e["seccomp"]);
  CHECK(plan["kernel_quotas"] == e["kernel_quotas"]);
  CHECK(e["kernel_quotas"].contains("sigpending"));  // the program's share (fixed_rlimits), once the limits are planned
  CHECK(plan["identity"] == e["identity"]);
  CHECK(plan["memory_fallback"] == e["memory_fallback"]);
}

TEST_CASE("facilities: prepare stops at the first failure; what never ran records what it did before") {
  RunRequest req = request();
  req.spec.seccomp = "/nonexistent/policy.json";
  req.spec.network.mode = "proxy";
  req.spec.network.allow = {"bad host name:99999"};  // never parsed: seccomp fails first
  std::string cwd = "/";
  CgroupInfo cg = hybrid_host();
  Result<IdentityPlan> identity = plan_identity(req.spec);
  REQUIRE(identity);
  RunContext ctx(req, cwd, cg, identity, true);
  auto st = prepare_facilities(ctx);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().stage == sbx::Stage("seccomp"));
  CHECK_FALSE(ctx.allow_rules.has_value());
  json e = enforcement_record(ctx, nullptr);
  CHECK(e["cgroup"] == "unavailable (hybrid)");  // the limits facility ran
  CHECK(e["seccomp"]["profile"] == "/nonexistent/policy.json");
  CHECK(e["seccomp"]["sha256"].is_null());
  CHECK(schema_errors(e) == "");
}

TEST_CASE("facilities: network in proxy mode parses the allow rules once, for the proxy and the plan") {
  RunRequest req = request();
  req.spec.network.mode = "proxy";
  req.spec.network.allow = {"example.com", "127.0.0.1:8080"};
  std::string cwd = "/";
  CgroupInfo cg = hybrid_host();
  Result<IdentityPlan> identity = plan_identity(req.spec);
  REQUIRE(identity);
  RunContext ctx(req, cwd, cg, identity, true);
  REQUIRE(network_facility().prepare(ctx).ok());
  REQUIRE(ctx.allow_rules.has_value());
  CHECK(ctx.allow_rules->size() == 2);
  json plan, record;
  network_facility().plan(ctx, plan);
  network_facility().record(ctx, nullptr, record);
  CHECK(plan["network"]["loopback_through_proxy"] == json::array({"localhost", "127.0.0.1"}));
  CHECK(record["network"]["proxy"]["listen"] == "127.0.0.1:3128");

  req.spec.network.allow = {"exa mple.com"};
  RunContext bad(req, cwd, cg, identity, false);
  auto st = network_facility().prepare(bad);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message == parse_allow_rules(req.spec.network.allow).error().message);
}
