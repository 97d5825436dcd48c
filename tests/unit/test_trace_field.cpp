#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/base/trace_field.hpp"

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
