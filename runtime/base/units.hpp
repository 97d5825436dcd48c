#pragma once
// Human units on the command line and in profiles: durations ("250ms", "2s", "1m", "1h", a bare
// number is seconds) and sizes ("512K", "64M", "1G", "1.5G", a bare number is bytes; binary units).
//
// In a JSON document a caller writes (a profile, a pack manifest, an exec request, MCP run_code
// limits, a tenant file, a workload), a bare JSON number for a duration or a size is refused unless
// its key names the unit (timeout_ms, memory_bytes, idle_timeout_ms): the command line reads
// `--timeout 10` as seconds while JSON used to read `"timeout": 10` as 10 ms, and a model or a
// person writing the one after the other got a sandbox killed after 10 ms. A string with its unit
// ("10s", "256M") means the same everywhere.
#include <cstdint>
#include <optional>
#include <type_traits>
#include <string>
#include <string_view>

#include "runtime/base/error.hpp"

namespace sbx {

Result<std::int64_t> parse_duration_ms(std::string_view text);
Result<std::int64_t> parse_size_bytes(std::string_view text);
std::string format_duration_ms(std::int64_t ms);  // "250ms", "2s", "1m30s"
std::string format_size(std::int64_t bytes);      // "512K", "64M", "1536"

enum class QuantityUnit { duration, size };
// Whether a JSON key carries its unit in its name ("timeout_ms", "max_bytes"): only such a key
// takes a bare number for a duration or a size.
bool key_names_unit(std::string_view key);
// The refusal of a bare number `n` for a duration or a size, showing the accepted forms:
// 'a bare number is ambiguous; write a duration with its unit: "10s" or "10000ms"'.
std::string bare_number_refusal(double n, QuantityUnit unit);

// A limit as an error message shows it: "unlimited", a count, a CPU share without trailing
// zeros ("0.5"), or a duration/size through fmt (format_duration_ms, format_size). Profile
// ceilings (profile.cpp) and tenant ceilings (tenant.cpp) word their refusals alike.
template <typename T>
std::string shown_limit(const std::optional<T>& v, std::string (*fmt)(std::int64_t)) {
  if (!v) return "unlimited";
  if constexpr (std::is_same_v<T, double>) {
    std::string s = std::to_string(*v);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  } else {
    return fmt ? fmt(*v) : std::to_string(*v);
  }
}

}  // namespace sbx
