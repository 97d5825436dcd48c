#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/trace_field.hpp"
#include "runtime/launch/facility.hpp"
#include "runtime/launch/trace.hpp"
#include "runtime/linux/memory_fallback.hpp"
#include "runtime/linux/seccomp_notify.hpp"
#include "runtime/linux/userns.hpp"

using nlohmann::json;
using sbx::TraceField;

TEST_CASE("trace fields: the generated table is sorted and unique, its paths well formed") {
  REQUIRE(sbx::kTraceFieldCount > 100);
  for (std::size_t i = 0; i < sbx::kTraceFieldCount; ++i) {
    std::string_view p = sbx::kTraceFields[i];
    CAPTURE(p);
    if (i > 0) CHECK(std::string_view(sbx::kTraceFields[i - 1]) < p);  // the binary search's order
    CHECK(!p.empty());
    CHECK(p.front() != '/');
    CHECK(p.back() != '/');
    CHECK(p.find("//") == std::string_view::npos);
    CHECK(!p.ends_with("/[]"));  // an array's items are no member of their own
  }
}

TEST_CASE("trace fields: a field is its path; its name is the member written in the parent") {
  constexpr TraceField f = "usage/network/hosts_summary";
  CHECK(f.path() == "usage/network/hosts_summary");
  CHECK(f.name() == "hosts_summary");
  CHECK(TraceField("schema").name() == "schema");
  CHECK(TraceField("usage/network/hosts/[]/host").name() == "host");
  CHECK(TraceField("enforcement/limits_applied/*/mechanism").name() == "mechanism");
  CHECK(f == TraceField("usage/network/hosts_summary"));
  CHECK(!(f == TraceField("usage/network/hosts")));
  // TraceField("usage/network/host_summary") or TraceField("enforcement/limits_applied/*") would
  // not compile (the consteval constructor throws): that is the point, and not testable here.
}

TEST_CASE("trace fields: put and at write the member in the object given, as plain JSON") {
  json record = json::object();
  sbx::put(record, "schema", "sbx.trace/v1");
  json& usage = sbx::at(record, "usage");
  sbx::put(usage, "usage/wall_ms", 12);
  sbx::put(sbx::at(usage, "usage/network"), "usage/network/denied", 0);
  json host = json::object();
  sbx::put(host, "usage/network/hosts/[]/host", "example.org");
  sbx::at(usage, "usage/network")["hosts"].push_back(host);
  json limits = json::object();
  sbx::put(limits, "enforcement/limits_applied/*", "memory_bytes",
           sbx::trace_object({{"enforcement/limits_applied/*/value", 1024}, {"enforcement/limits_applied/*/mechanism", "cgroup"}}));
  sbx::put(sbx::at(record, "enforcement"), "enforcement/limits_applied", std::move(limits));
  CHECK(record == json::parse(R"({"schema": "sbx.trace/v1",
                                  "usage": {"wall_ms": 12, "network": {"denied": 0, "hosts": [{"host": "example.org"}]}},
                                  "enforcement": {"limits_applied": {"memory_bytes": {"value": 1024, "mechanism": "cgroup"}}}})"));
  // The same text as the object built with literal keys: the builder changes no byte.
  json plain = {{"result", {{"status", "ok"}, {"exit_code", 0}, {"error", nullptr}}}};
  json built = json::object();
  sbx::put(built, "result",
           sbx::trace_object({{"result/status", "ok"}, {"result/exit_code", 0}, {"result/error", nullptr}}));
  CHECK(built.dump() == plain.dump());
}

namespace {
bool in_table(const std::string& path) {
  for (std::size_t i = 0; i < sbx::kTraceFieldCount; ++i)
    if (path == sbx::kTraceFields[i]) return true;
  return false;
}
bool has_members(const std::string& path) {  // the schema names members under it
  for (std::size_t i = 0; i < sbx::kTraceFieldCount; ++i)
    if (std::string_view(sbx::kTraceFields[i]).starts_with(path + "/")) return true;
  return false;
}
// Every member of `v` (at `path`) that the table does not name: a write that went around the builder.
void unnamed(const json& v, const std::string& path, std::vector<std::string>& out) {
  if (v.is_array()) {
    for (auto& item : v) unnamed(item, path + "/[]", out);
    return;
  }
  if (!v.is_object() || (!path.empty() && !has_members(path))) return;  // a leaf, or free-form (invocation.spec)
  bool map = in_table(path + "/*");
  for (auto& [k, sub] : v.items()) {
    std::string p = path.empty() ? k : path + "/" + (map ? "*" : k);
    if (!in_table(p)) out.push_back(p);
    else unnamed(sub, p, out);
  }
}
}  // namespace

TEST_CASE("trace fields: a record made of the real parts names only members of the table") {
  sbx::TraceParts p;
  p.run_id = "20261130T000000.000Z-00000000";
  p.started_at = p.ended_at = "2026-11-30T00:00:00.000Z";
  sbx::add_limit_entries({{"timeout_ms", 1000, "supervisor timerfd", ""}, {"memory_bytes", 1024, "", "no controller"}},
                         p.enforcement);
  sbx::IdentityPlan id;
  id.uid_map = id.gid_map = {{0, 100000, 65536}};
  sbx::put(p.enforcement, "enforcement/identity", sbx::identity_to_json(id));
  sbx::TmpfsBudget budget;
  budget.shares = {{"tmp_size", "/tmp", 1024, false}};
  sbx::put(p.enforcement, "enforcement/memory_fallback", sbx::memory_fallback_json(budget, 4096, false));
  sbx::SeccompViolation v;
  v.name = "mount";
  p.violations = sbx::violations_json({v});
  sbx::put(p.violations_summary, "violations_summary/seccomp", sbx::violation_totals_json({}, 1));
  auto record = sbx::trace_record(std::move(p));
  std::vector<std::string> out;
  unnamed(record, "", out);
  CHECK_MESSAGE(out.empty(), "not in kTraceFields: " << nlohmann::json(out).dump());
  CHECK(record["enforcement"]["limits_applied"].contains("timeout_ms"));  // a map's key is data
}
