#pragma once
// Human units on the command line and in profiles: durations ("250ms", "2s", "1m", "1h", a bare
// number is seconds) and sizes ("512K", "64M", "1G", "1.5G", a bare number is bytes; binary units).
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/error.hpp"

namespace sbx {

Result<std::int64_t> parse_duration_ms(std::string_view text);
Result<std::int64_t> parse_size_bytes(std::string_view text);
std::string format_duration_ms(std::int64_t ms);  // "250ms", "2s", "1m30s"
std::string format_size(std::int64_t bytes);      // "512K", "64M", "1536"

}  // namespace sbx
