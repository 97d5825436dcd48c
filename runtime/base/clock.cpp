#include "runtime/base/clock.hpp"

#include <sys/random.h>
#include <time.h>

#include <cstdio>
#include <ctime>

namespace sbx {
namespace {

// `sec` in UTC by fmt_date, then fmt_tail with that text and `fraction` (its sub-second digits).
std::string utc(time_t sec, int fraction, const char* fmt_date, const char* fmt_tail) {
  struct tm tm;
  ::gmtime_r(&sec, &tm);
  char date[32], out[64];
  std::strftime(date, sizeof date, fmt_date, &tm);
  std::snprintf(out, sizeof out, fmt_tail, date, fraction);
  return out;
}

// The realtime clock now, with milliseconds.
std::string utc_now(const char* fmt_date, const char* fmt_tail) {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return utc(ts.tv_sec, static_cast<int>(ts.tv_nsec / 1'000'000), fmt_date, fmt_tail);
}

}  // namespace

std::int64_t monotonic_ms() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1'000'000;
}

std::int64_t monotonic_us() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000LL + ts.tv_nsec / 1000;
}

std::string make_run_id() {
  unsigned char rnd[4] = {};
  if (::getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd)) {
    struct timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    for (int i = 0; i < 4; ++i) rnd[i] = static_cast<unsigned char>(ts.tv_nsec >> (8 * i));
  }
  char hex[9];
  std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
  return utc_now("%Y%m%dT%H%M%S", "%s.%03dZ-") + hex;
}

std::string rfc3339_now() { return utc_now("%Y-%m-%dT%H:%M:%S", "%s.%03dZ"); }

std::string rfc3339_us(long long realtime_ns) {
  return utc(static_cast<time_t>(realtime_ns / 1'000'000'000LL), static_cast<int>(realtime_ns % 1'000'000'000LL / 1000),
             "%Y-%m-%dT%H:%M:%S", "%s.%06dZ");
}

}  // namespace sbx
