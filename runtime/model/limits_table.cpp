#include "runtime/model/limits_table.hpp"

#include <algorithm>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "runtime/base/units.hpp"

namespace sbx {
namespace {

// A count given as a string ("bad process count '12x'"): counts have no units.
template <const char* Noun>
Result<std::int64_t> no_unit(std::string_view t) {
  return make_error("spec", std::string("bad ") + Noun + " '" + std::string(t) + "'");
}
constexpr char kProcessCount[] = "process count", kFileCount[] = "file count";

using E = LimitEnforcement;
using U = LimitUnit;
using T = TenantCeiling;

}  // namespace

const std::vector<LimitKind>& limit_kinds() {
  // clang-format off
  static const std::vector<LimitKind> kinds = {
      {"timeout", "timeout_ms", "timeout", "--timeout", &Limits::timeout_ms, U::duration_ms, parse_duration_ms,
       nullptr, true, kMaxDurationMs, true, E::supervisor, nullptr, T::refuse_raise, "10s", {0, 0, 4, 0}},
      {"memory", "memory_bytes", "memory", "--memory", &Limits::memory_bytes, U::size_bytes, parse_size_bytes,
       nullptr, true, kMaxSizeBytes, true, E::plan, "memory", T::refuse_raise, "256M", {2, 2, 0, 3}},
      {"pids", "pids", "pids", "--pids", &Limits::pids, U::count, no_unit<kProcessCount>,
       kProcessCount, true, kMaxPids, true, E::plan, "pids", T::refuse_raise, nullptr, {3, 3, 1, 4}},
      {"cpus", "cpus", "cpus", "--cpus", &Limits::cpus, U::cpus, nullptr,
       "CPU count", true, kMaxCpus, true, E::plan, "cpu", T::refuse_raise, nullptr, {9, 4, 2, 5}},
      {"cpu_time", "cpu_time_ms", "cpu_time", "--cpu-time", &Limits::cpu_time_ms, U::duration_ms, parse_duration_ms,
       nullptr, true, kMaxDurationMs, true, E::plan, nullptr, T::refuse_raise, nullptr, {4, 1, 3, 1}},
      // Three spellings, all public: the manifest key and flag (output_limit), the RunSpec key
      // (output_limit_bytes), the plan's and the trace's enforcement name (output).
      {"output_limit", "output_limit_bytes", "output", "--output-limit", &Limits::output_limit_bytes, U::size_bytes,
       parse_size_bytes, nullptr, false, kMaxSizeBytes, true, E::supervisor, nullptr, T::refuse_raise, nullptr,
       {1, 5, 5, 2}},
      {"tmp_size", "tmp_size_bytes", nullptr, "", &Limits::tmp_size_bytes, U::size_bytes, parse_size_bytes,
       nullptr, true, kMaxSizeBytes, true, E::tmpfs, nullptr, T::lower, nullptr, {5, 6, -1, -1}},
      // "out_size" is how the ceiling's message names it; manifests take only out_size_bytes.
      {"out_size", "out_size_bytes", nullptr, "", &Limits::out_size_bytes, U::size_bytes, parse_size_bytes,
       nullptr, true, kMaxSizeBytes, false, E::tmpfs, nullptr, T::lower, nullptr, {6, 7, -1, -1}},
      {"output_max_bytes", "output_max_bytes", nullptr, "--output-max-bytes", &Limits::output_max_bytes,
       U::size_bytes, parse_size_bytes, nullptr, false, kMaxSizeBytes, false, E::export_cap, nullptr, T::lower,
       nullptr, {7, 8, -1, -1}},
      {"output_max_files", "output_max_files", nullptr, "--output-max-files", &Limits::output_max_files, U::count,
       no_unit<kFileCount>, kFileCount, false, kMaxCount, false, E::export_cap, nullptr, T::lower, nullptr,
       {8, 9, -1, -1}},
  };
  // clang-format on
  return kinds;
}

std::vector<const LimitKind*> limit_kinds_by(int LimitOrder::*column) {
  std::vector<const LimitKind*> out;
  for (auto& k : limit_kinds())
    if (k.order.*column >= 0) out.push_back(&k);
  std::sort(out.begin(), out.end(), [column](auto* a, auto* b) { return a->order.*column < b->order.*column; });
  return out;
}

const LimitKind* limit_kind_by_plan_name(std::string_view plan_name) {
  for (auto& k : limit_kinds())
    if (k.plan_name && plan_name == k.plan_name) return &k;
  return nullptr;
}

bool limit_set(const Limits& l, const LimitKind& k) {
  return std::visit(
      [&](auto m) {
    if constexpr (std::is_same_v<decltype(m), std::int64_t Limits::*>) return true;
    else return (l.*m).has_value();
      },
      k.member);
}

nlohmann::json limit_json(const Limits& l, const LimitKind& k) {
  return std::visit(
      [&](auto m) -> nlohmann::json {
        if constexpr (std::is_same_v<decltype(m), std::int64_t Limits::*>) return l.*m;
        else return l.*m ? nlohmann::json(*(l.*m)) : nlohmann::json(nullptr);
      },
      k.member);
}

LimitFormat limit_format(LimitUnit unit) {
  if (unit == LimitUnit::duration_ms) return format_duration_ms;
  if (unit == LimitUnit::size_bytes) return format_size;
  return nullptr;
}

bool has_clearable_flag(const LimitKind& k) { return k.order.flag >= 0; }

namespace {
// "none" and "unlimited" clear a limit that the profile or the manifest set: the operator's flags
// may raise a limit, so they may remove it too. "0" clears only --cpus (as for docker run); for a
// duration, a size or a count, 0 is more likely a slip than a wish for no limit, and stays an
// error (--output-limit 0 is a limit: nothing passes).
bool clears(const std::string& v, bool zero_clears) {
  return v == "none" || v == "unlimited" || (zero_clears && v == "0");
}

// The flag's value, in the member's type; errors name the flag.
template <typename V>
Result<V> flag_value(const LimitKind& k, const std::string& v) {
  const std::string flag = k.flag;
  char* end = nullptr;
  if constexpr (std::is_same_v<V, double>) {
    double n = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(n > 0) || n > static_cast<double>(k.max))
      return make_error("usage", flag + ": bad " + k.noun + " '" + v + "' (a positive number, e.g. 0.5, or none)");
    return n;
  } else {
    if (k.unit == LimitUnit::count) {
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n <= 0 || n > k.max)
        return make_error("usage", flag + ": bad " + k.noun + " '" + v + "' (a positive integer, or none)");
      return static_cast<V>(n);
    }
    auto r = k.parse(v);
    if (!r) return make_error("usage", flag + ": " + r.error().message);
    if (k.positive && *r <= 0) return make_error("usage", flag + ": must be greater than zero (or none for no limit)");
    return r;
  }
}
}  // namespace

Status apply_limit_flag(Limits& limits, const LimitKind& k, const std::string& text) {
  return std::visit(
      [&](auto m) -> Status {
        if constexpr (std::is_same_v<decltype(m), std::int64_t Limits::*>) {
          return make_error("usage", std::string(k.flag) + ": not a clearable limit flag");
        } else {
          if (!has_clearable_flag(k)) return make_error("usage", std::string(k.flag) + ": not a clearable limit flag");
          if (clears(text, k.unit == LimitUnit::cpus)) {
            (limits.*m).reset();
            return {};
          }
          using V = typename std::remove_reference_t<decltype(limits.*m)>::value_type;
          auto r = flag_value<V>(k, text);
          if (!r) return r.error();
          limits.*m = *r;
          return {};
        }
      },
      k.member);
}

}  // namespace sbx
