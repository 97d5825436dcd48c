#pragma once
// Time and run ids, for every layer: the monotonic clock that deadlines and progress use, and
// the wall-clock stamps a record carries.
#include <cstdint>
#include <string>

namespace sbx {

// CLOCK_MONOTONIC in milliseconds: never steps with the wall clock.
std::int64_t monotonic_ms();
// The same clock in microseconds (timings a record keeps finer than a millisecond; the pool's
// hand-out stamps, which a worker and its server compare).
std::int64_t monotonic_us();
// Time-sortable and unique: "20261130T075512.123Z-3fa9c1d2".
std::string make_run_id();
// RFC 3339 UTC with milliseconds: "2026-11-30T07:55:12.123Z".
std::string rfc3339_now();
// A realtime clock reading (ns since the epoch) as RFC 3339 UTC with microseconds.
std::string rfc3339_us(long long realtime_ns);

}  // namespace sbx
