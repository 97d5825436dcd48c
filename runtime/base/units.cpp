#include "runtime/base/units.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>

namespace sbx {
namespace {

// Splits "1.5G" into 1.5 and "G"; fails on empty, negative, or non-numeric text.
bool split_number(std::string_view text, double& number, std::string_view& suffix) {
  if (text.empty()) return false;
  std::size_t i = 0;
  bool digits = false, dot = false;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c >= '0' && c <= '9') {
      digits = true;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!digits) return false;
  std::string num(text.substr(0, i));
  char* end = nullptr;
  number = std::strtod(num.c_str(), &end);
  if (end == num.c_str() || *end != '\0' || !std::isfinite(number)) return false;
  suffix = text.substr(i);
  return true;
}

}  // namespace

Result<std::int64_t> parse_duration_ms(std::string_view text) {
  double n = 0;
  std::string_view unit;
  auto bad = [&] {
    return make_error("usage", "bad duration '" + std::string(text) + "' (use e.g. 250ms, 2s, 1.5m, 1h)");
  };
  if (!split_number(text, n, unit)) return bad();
  double scale;
  if (unit.empty() || unit == "s") scale = 1000;
  else if (unit == "ms") scale = 1;
  else if (unit == "m" || unit == "min") scale = 60'000;
  else if (unit == "h") scale = 3'600'000;
  else return bad();
  double ms = n * scale;
  if (ms > 1e15) return bad();
  return static_cast<std::int64_t>(std::llround(ms));
}

Result<std::int64_t> parse_size_bytes(std::string_view text) {
  double n = 0;
  std::string_view unit;
  auto bad = [&] { return make_error("usage", "bad size '" + std::string(text) + "' (use e.g. 4096, 512K, 64M, 1G)"); };
  if (!split_number(text, n, unit)) return bad();
  // "64MB", "64MiB" and Kubernetes' "64Mi" all mean 64M (binary units, as M does).
  if (unit.size() > 1 && (unit.back() == 'B' || unit.back() == 'b')) unit.remove_suffix(1);
  if (unit.size() > 1 && unit.back() == 'i') unit.remove_suffix(1);
  double scale;
  if (unit.empty() || unit == "B" || unit == "b") scale = 1;
  else if (unit == "K" || unit == "k") scale = 1024.0;
  else if (unit == "M" || unit == "m") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t") scale = 1024.0 * 1024 * 1024 * 1024;
  else return bad();
  double bytes = n * scale;
  if (bytes > 9e18) return bad();
  return static_cast<std::int64_t>(std::llround(bytes));
}

std::string format_duration_ms(std::int64_t ms) {
  if (ms % 3'600'000 == 0 && ms >= 3'600'000) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0 && ms >= 60'000) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0 && ms >= 1000) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

std::string format_size(std::int64_t bytes) {
  static const char* units[] = {"T", "G", "M", "K"};
  static const std::int64_t scales[] = {1LL << 40, 1LL << 30, 1LL << 20, 1LL << 10};
  for (int i = 0; i < 4; ++i)
    if (bytes >= scales[i] && bytes % scales[i] == 0) return std::to_string(bytes / scales[i]) + units[i];
  return std::to_string(bytes);
}

bool key_names_unit(std::string_view key) { return key.ends_with("_ms") || key.ends_with("_bytes"); }

std::string bare_number_refusal(double n, QuantityUnit unit) {
  // The number the caller wrote, in the forms that would take it; a value no form takes
  // (negative, huge, fractional bytes) is shown with an example instead.
  auto shown = [](double v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  };
  bool usable = std::isfinite(n) && n > 0 && n < 1e9;
  if (unit == QuantityUnit::duration) {
    double secs = usable ? n : 10;
    return "a bare number is ambiguous; write a duration with its unit: \"" + shown(secs) + "s\" or \"" +
           shown(std::round(secs * 1000)) + "ms\"";
  }
  std::string v = usable && n == std::floor(n) ? shown(n) : "256";
  return "a bare number is ambiguous; write a size with its unit: \"" + v + "M\", \"" + v + "K\" or \"" + v +
         "B\" (bytes)";
}

}  // namespace sbx
