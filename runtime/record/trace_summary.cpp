#include "runtime/record/trace_summary.hpp"

#include <algorithm>

#include "runtime/base/json_io.hpp"
#include "runtime/base/json_scan.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/shell_quote.hpp"

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

}  // namespace

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
