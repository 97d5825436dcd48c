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

TEST_CASE("cut_list: a prefix within the count and the bytes, whichever is reached first") {
  using nlohmann::json;
  json a = json::array();
  for (int i = 0; i < 100; ++i) a.push_back(std::string(8, 'x'));  // "xxxxxxxx": 10 bytes each
  json b = a;
  auto c = cut_list(b, 7, 1 << 20);
  CHECK(c.total == 100);
  CHECK(c.listed == 7);
  CHECK(c.truncated());
  CHECK(b.size() == 7);
  json d = a;
  c = cut_list(d, 1000, 2 + 10 * 5 + 4);  // [ + five entries + four commas + ]
  CHECK(c.listed == 5);
  CHECK(d.dump().size() <= 2 + 10 * 5 + 4);
  json e = a;
  c = cut_list(e, 1000, 1 << 20);
  CHECK_FALSE(c.truncated());
  CHECK(e == a);
  json s = "not a list";
  c = cut_list(s, 0, 0);
  CHECK(c.total == 0);
  CHECK(s == "not a list");
}

namespace {
nlohmann::json big_record(std::size_t files, std::size_t name_bytes) {
  TraceParts p;
  p.run_id = "20261130T000000.000Z-00000000";
  p.started_at = p.ended_at = "2026-11-30T00:00:00.000Z";
  p.outcome.status = RunStatus::ok;
  p.outcome.exit_code = 0;
  auto j = trace_record(std::move(p));
  for (std::size_t i = 0; i < files; ++i)
    j["outputs"].push_back({{"path", "/out/" + std::string(name_bytes, 'n') + std::to_string(i)}, {"bytes", 0}, {"sha256", sha256_hex("")}});
  return j;
}
}  // namespace

TEST_CASE("bound_record: a record under the bound is untouched; one over it is cut where it is big, flagged, and fits") {
  using nlohmann::json;
  auto small = big_record(3, 10);
  json copy = small;
  CHECK(bound_record(small, 1 << 20));
  CHECK(small == copy);
  CHECK_FALSE(small.contains("record_truncated"));

  const std::size_t bound = 64 * 1024;
  auto j = big_record(2000, 200);  // ~600 KB of outputs
  j["invocation"]["argv"] = json::array({"/bin/true"});
  CHECK(j.dump().size() > bound);
  REQUIRE(bound_record(j, bound));
  std::string text = j.dump();
  CHECK(text.size() <= bound);
  // The members a reader needs are whole; the cut one keeps what fits, and the note says so.
  CHECK(j["schema"] == "sbx.trace/v1");
  CHECK(j["run_id"] == "20261130T000000.000Z-00000000");
  CHECK(j["result"]["status"] == "ok");
  CHECK(j["invocation"]["argv"][0] == "/bin/true");
  REQUIRE(j.contains("record_truncated"));
  auto& note = j["record_truncated"];
  CHECK(note["max_bytes"] == bound);
  CHECK(note["bytes"].get<std::size_t>() > bound);
  REQUIRE(note["cut"].size() >= 1);
  CHECK(note["cut"][0]["pointer"] == "/outputs");
  CHECK(note["cut"][0]["kept_bytes"].get<std::size_t>() < note["cut"][0]["bytes"].get<std::size_t>());
  CHECK(j["outputs"].is_array());
  CHECK(j["outputs"].size() > 0);  // a prefix kept, not emptied
  CHECK(j["outputs"].size() < 2000);
}

TEST_CASE("bound_record: one huge string deep down is cut to a prefix, the rest of its object kept") {
  using nlohmann::json;
  auto j = big_record(1, 10);
  j["validation"] = {{"errors", json::array({{{"pointer", "/a"}, {"message", std::string(200000, 'm')}}})}, {"valid", false}};
  const std::size_t bound = 32 * 1024;
  REQUIRE(bound_record(j, bound));
  CHECK(j.dump().size() <= bound);
  CHECK(j["record_truncated"]["cut"][0]["pointer"] == "/validation/errors/0/message");
  CHECK(j["validation"]["valid"] == false);
  CHECK(j["validation"]["errors"][0]["pointer"] == "/a");
  CHECK(j["outputs"].size() == 1);
}

TEST_CASE("trace_text: the stored line is within kMaxRecordBytes whatever the record holds") {
  auto j = big_record(5000, 16000);  // ~80 MB of outputs: more than any reader takes
  std::string line = trace_text(j, -1);
  CHECK(line.size() <= kMaxRecordBytes);
  CHECK(line.size() <= kMaxTraceBytes);
  auto back = nlohmann::json::parse(line);
  CHECK(back["run_id"] == "20261130T000000.000Z-00000000");
  CHECK(back["record_truncated"]["cut"][0]["pointer"] == "/outputs");
  // The pretty form (--trace-file) obeys the same bound.
  std::string pretty = trace_text(j, 2);
  CHECK(pretty.size() <= kMaxRecordBytes + 1);
}
