#include <doctest/doctest.h>

#include "runtime/base/units.hpp"

using namespace sbx;

TEST_CASE("durations") {
  CHECK(*parse_duration_ms("250ms") == 250);
  CHECK(*parse_duration_ms("2s") == 2000);
  CHECK(*parse_duration_ms("2") == 2000);
  CHECK(*parse_duration_ms("1m") == 60000);
  CHECK(*parse_duration_ms("1.5m") == 90000);
  CHECK(*parse_duration_ms("1h") == 3600000);
  for (const char* bad : {"", "x", "-1s", "1x", "ms", "1.2.3s", "s1"}) {
    CAPTURE(bad);
    auto r = parse_duration_ms(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("bad duration") != std::string::npos);
  }
}

TEST_CASE("sizes") {
  CHECK(*parse_size_bytes("4096") == 4096);
  CHECK(*parse_size_bytes("512K") == 512 * 1024);
  CHECK(*parse_size_bytes("64M") == 64LL << 20);
  CHECK(*parse_size_bytes("1G") == 1LL << 30);
  CHECK(*parse_size_bytes("1.5G") == (3LL << 30) / 2);
  CHECK(*parse_size_bytes("64MiB") == 64LL << 20);
  // The forms docker (512m) and Kubernetes (512Mi) users write: binary units, as M is.
  CHECK(*parse_size_bytes("512Mi") == 512LL << 20);
  CHECK(*parse_size_bytes("512m") == 512LL << 20);
  CHECK(*parse_size_bytes("2Gi") == 2LL << 30);
  CHECK(*parse_size_bytes("64Ki") == 64LL << 10);
  CHECK(*parse_size_bytes("64KB") == 64LL << 10);
  CHECK_FALSE(parse_size_bytes("5i").ok());
  CHECK_FALSE(parse_size_bytes("5iB").ok());
  CHECK_FALSE(parse_size_bytes("12Q").ok());
  CHECK_FALSE(parse_size_bytes("-5").ok());
  CHECK_FALSE(parse_size_bytes("").ok());
}

TEST_CASE("formatting round-trips through parsing") {
  for (std::int64_t ms : {1LL, 250LL, 1000LL, 90000LL, 3600000LL}) CHECK(*parse_duration_ms(format_duration_ms(ms)) == ms);
  for (std::int64_t b : {1LL, 1000LL, 1024LL, 64LL << 20, 3LL << 30}) CHECK(*parse_size_bytes(format_size(b)) == b);
}

TEST_CASE("a bare JSON number for a duration or a size is refused with the forms that would take it") {
  CHECK(bare_number_refusal(10, QuantityUnit::duration) ==
        R"(a bare number is ambiguous; write a duration with its unit: "10s" or "10000ms")");
  CHECK(bare_number_refusal(1.5, QuantityUnit::duration) ==
        R"(a bare number is ambiguous; write a duration with its unit: "1.5s" or "1500ms")");
  CHECK(bare_number_refusal(256, QuantityUnit::size) ==
        R"(a bare number is ambiguous; write a size with its unit: "256M", "256K" or "256B" (bytes))");
  // A number no form takes is shown as an example instead of echoed.
  CHECK(bare_number_refusal(-1, QuantityUnit::size).find(R"("256M")") != std::string::npos);
  CHECK(bare_number_refusal(1e308, QuantityUnit::duration).find(R"("10s")") != std::string::npos);
  CHECK(key_names_unit("timeout_ms"));
  CHECK(key_names_unit("memory_bytes"));
  CHECK_FALSE(key_names_unit("timeout"));
  CHECK_FALSE(key_names_unit("memory"));
}
