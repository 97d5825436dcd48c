#include <doctest/doctest.h>

#include <signal.h>

#include "runtime/base/sha256.hpp"
#include "runtime/launch/facility.hpp"
#include "runtime/launch/trace.hpp"

using namespace sbx;

TEST_CASE("run ids sort by time and are unique") {
  auto a = make_run_id();
  auto b = make_run_id();
  CHECK(a.size() == b.size());
  CHECK(a != b);
  CHECK(a.substr(0, 8) <= b.substr(0, 8));
  CHECK(rfc3339_now().back() == 'Z');
  // Microseconds, and zero-padded: the record's program_started_at.
  CHECK(rfc3339_us(1'796'173'431'000'042'999LL) == "2026-12-02T01:03:51.000042Z");
  CHECK(rfc3339_us(0) == "1970-01-01T00:00:00.000000Z");
}

TEST_CASE("trace record: members of sbx.trace/v1, limits split into applied and not applied") {
  TraceParts p;
  p.run_id = "20261130T000000.000Z-00000000";
  p.started_at = p.ended_at = "2026-11-30T00:00:00.000Z";
  add_limit_entries({{"timeout_ms", 1000, "supervisor timerfd", ""}, {"memory_bytes", 1024, "", "no controller"}}, p.enforcement);
  p.outcome.status = RunStatus::timeout;
  p.outcome.signal = SIGKILL;
  auto j = trace_record(std::move(p));
  for (const char* k : {"schema", "run_id", "started_at", "ended_at", "sbx", "host", "invocation", "image",
                        "enforcement", "inputs", "outputs", "stdout", "stderr", "result", "usage", "violations"})
    CHECK_MESSAGE(j.contains(k), k);
  CHECK(j["schema"] == "sbx.trace/v1");
  CHECK(j["enforcement"]["limits_applied"]["timeout_ms"]["mechanism"] == "supervisor timerfd");
  CHECK(j["enforcement"]["limits_not_applied"][0]["limit"] == "memory_bytes");
  CHECK(j["enforcement"]["limits_not_applied"][0]["reason"] == "no controller");
  CHECK(j["result"]["status"] == "timeout");
  CHECK(j["result"]["exit_code"].is_null());
  CHECK(j["stdout"]["sha256"] == sha256_hex(""));
  CHECK(j["usage"]["memory_peak_bytes"].is_null());
  // Round-trips through text unchanged.
  CHECK(nlohmann::json::parse(j.dump()) == j);
}
