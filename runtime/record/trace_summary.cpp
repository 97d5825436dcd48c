#include "runtime/record/trace_summary.hpp"

#include <algorithm>

#include "runtime/base/clock.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/json_scan.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/shell_quote.hpp"
#include "runtime/base/units.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "trace";

// Member lookups that tolerate absence and wrong types: a summary of an odd record is better than
// no summary (the record itself is still shown whole by `trace show`).
const nlohmann::json* member(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}
std::string string_member(const nlohmann::json& j, const char* key, std::string fallback = "") {
  auto* m = member(j, key);
  return m && m->is_string() ? m->get<std::string>() : fallback;
}
const nlohmann::json& object_member(const nlohmann::json& j, const char* key) {
  static const nlohmann::json empty = nlohmann::json::object();
  auto* m = member(j, key);
  return m && m->is_object() ? *m : empty;
}

std::string join_command(const nlohmann::json& argv) {
  std::vector<std::string> args;
  if (argv.is_array())
    for (auto& a : argv)
      if (a.is_string()) args.push_back(a.get<std::string>());
  return shell_join(args);
}

bool digits_in(std::string_view s, std::size_t at, std::size_t n, int lo, int hi) {
  if (at + n > s.size()) return false;
  int v = 0;
  for (std::size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  return v >= lo && v <= hi;
}

// "YYYY", "YYYY-MM", "YYYY-MM-DD", then optionally "THH:MM", ":SS", ".fff" (1 to 9 digits) and
// "Z": the length it takes (0 when it is not that). The fields are range-checked, not the day
// against its month.
std::size_t rfc3339_prefix(std::string_view s) {
  if (!digits_in(s, 0, 4, 0, 9999)) return 0;
  if (s.size() == 4) return 4;
  if (s[4] != '-' || !digits_in(s, 5, 2, 1, 12)) return 0;
  if (s.size() == 7) return 7;
  if (s.size() < 10 || s[7] != '-' || !digits_in(s, 8, 2, 1, 31)) return 0;
  std::size_t n = 10;
  if (n < s.size() && (s[n] == 'T' || s[n] == 't')) {
    if (!digits_in(s, n + 1, 2, 0, 23) || n + 3 >= s.size() || s[n + 3] != ':' || !digits_in(s, n + 4, 2, 0, 59))
      return 0;
    n += 6;
    if (n < s.size() && s[n] == ':') {
      if (!digits_in(s, n + 1, 2, 0, 60)) return 0;
      n += 3;
      if (n < s.size() && s[n] == '.') {
        std::size_t d = n + 1;
        while (d < s.size() && d - n <= 9 && s[d] >= '0' && s[d] <= '9') ++d;
        if (d == n + 1) return 0;
        n = d;
      }
    }
  }
  if (n < s.size() && (s[n] == 'Z' || s[n] == 'z')) ++n;
  return n;
}

}  // namespace

Result<std::string> since_bound(std::string_view text, std::int64_t now_unix_ms, std::string_view flag) {
  auto bad = [&](const std::string& why) {
    return make_error("usage",
                      std::string(flag) + " '" + std::string(text) + "'" + why +
                          ": use a duration before now (90s, 30m, 1h, 2d, 1w) or a UTC time in RFC 3339, "
                          "whole or cut after a field (2026, 2026-12-01, 2026-12-01T08:30, 2026-12-01T08:30:00Z)");
  };
  if (text.empty()) return bad(" is empty");
  if (std::size_t n = rfc3339_prefix(text); n == text.size()) {
    std::string t(text);
    if (t.size() > 10 && t[10] == 't') t[10] = 'T';
    // started_at always ends in 'Z' after its milliseconds: a bound that ends in 'Z' earlier
    // ("...:00Z") would sort after "...:00.123Z" of the same second.
    if (t.back() == 'Z' || t.back() == 'z') t.pop_back();
    return t;
  } else if (n > 0) {
    return bad(" has an offset or trailing text (times are UTC: end in Z or in nothing)");
  }
  std::int64_t ms = 0;
  std::string_view num = text;
  std::int64_t per = 0;
  if (text.back() == 'd') per = 86'400'000;
  if (text.back() == 'w') per = 7 * 86'400'000LL;
  if (per) {
    num.remove_suffix(1);
    if (num.empty() || num.find_first_not_of("0123456789") != std::string_view::npos || num.size() > 6)
      return bad(" is not a duration or a time");
    ms = std::stoll(std::string(num)) * per;
  } else {
    // A unit is required: "90" could be seconds or minutes (four digits are a year, above).
    if (text.find_first_not_of("0123456789.") == std::string_view::npos) return bad(" has no unit");
    auto d = parse_duration_ms(text);
    if (!d) return bad(" is not a duration or a time");
    ms = *d;
  }
  if (ms > now_unix_ms) ms = now_unix_ms;
  std::string t = rfc3339_us((now_unix_ms - ms) * 1'000'000LL);  // "...:SS.uuuuuuZ"
  t.erase(t.size() - 4, 3);                                      // to milliseconds, as started_at
  return t;
}

TraceSummary summarize_record(const std::string& id, const nlohmann::json& j) {
  TraceSummary s;
  s.run_id = id;
  s.started_at = string_member(j, "started_at");
  const auto& result = object_member(j, "result");
  s.status = string_member(result, "status", "?");
  if (auto* ec = member(result, "exit_code"); ec && ec->is_number_integer()) s.exit_code = ec->get<int>();
  if (auto* w = member(object_member(j, "usage"), "wall_ms"); w && w->is_number_integer())
    s.wall_ms = w->get<std::int64_t>();
  // The program's command (the spec's argv) is what a user recognises a run by; sbx's own argv
  // (invocation.argv) is the fallback for records without a spec.
  const auto& inv = object_member(j, "invocation");
  const nlohmann::json* argv = member(object_member(inv, "spec"), "argv");
  if (!argv || !argv->is_array()) argv = member(inv, "argv");
  if (argv) s.command = join_command(*argv);
  const auto& pack = object_member(inv, "pack");
  s.pack = string_member(pack, "name");
  s.pack_version = string_member(pack, "version");
  s.pack_digest = string_member(pack, "digest");
  const auto& image = object_member(j, "image");
  s.image = string_member(image, "name");
  s.image_digest = string_member(image, "digest");
  return s;
}

Result<TraceSummary> summarize_record_text(const std::string& id, std::string_view text) {
  // Only the members summarize_record reads are parsed into a DOM; the rest of the text is
  // scanned (json_scan.hpp), which refuses exactly what parse_json refuses, so a record is
  // refused here exactly when `trace show` would refuse it for its syntax, its bounds or a
  // duplicate key. Building the whole DOM of every record was most of the time a first listing of
  // a large ledger took (issue 30 #13).
  using Path = std::vector<std::string_view>;
  static const std::array<Path, 11> kRead = {Path{"started_at"},
                                             Path{"result", "status"},
                                             Path{"result", "exit_code"},
                                             Path{"usage", "wall_ms"},
                                             Path{"invocation", "argv"},
                                             Path{"invocation", "spec", "argv"},
                                             Path{"invocation", "pack", "name"},
                                             Path{"invocation", "pack", "version"},
                                             Path{"invocation", "pack", "digest"},
                                             Path{"image", "name"},
                                             Path{"image", "digest"}};
  std::vector<std::pair<const Path*, std::string_view>> kept;
  auto scan = scan_json(text, {kMaxTraceBytes}, 3, [&](const ScannedMember& m) {
    for (const Path& want : kRead)
      if (std::equal(want.begin(), want.end(), m.path.begin(), m.path.end())) kept.emplace_back(&want, m.raw);
  });
  if (!scan.ok) return make_error(kStage, "record: " + scan.problem + " (at byte " + std::to_string(scan.at) + ")");
  if (scan.root != '{') return make_error(kStage, "record: not a JSON object");
  nlohmann::json rec = nlohmann::json::object();
  for (auto& [path, raw] : kept) {
    nlohmann::json* at = &rec;
    for (std::string_view k : *path) at = &(*at)[std::string(k)];
    // Already checked to be JSON within the record's bounds; parsed again alone (small but for argv).
    *at = nlohmann::json::parse(raw, nullptr, /*allow_exceptions=*/false);
  }
  return summarize_record(id, rec);
}

std::string TraceFilter::digest_form(const std::string& s) { return is_sha256_hex(s) ? "sha256:" + s : s; }

}  // namespace sbx
