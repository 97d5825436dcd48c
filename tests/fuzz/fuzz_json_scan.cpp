// Differential: scan_json (runtime/base/json_scan.hpp) must accept exactly what parse_json accepts,
// within the same bounds, and summarize_record_text (which scans) must summarise a record exactly as
// summarize_record does from parse_json's whole DOM. The first byte picks small bounds (so that the
// depth and value limits are reached by short inputs) or the record bounds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/base/json_io.hpp"
#include "runtime/base/json_scan.hpp"
#include "runtime/record/trace_store.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  sbx::JsonBounds bounds{sbx::kMaxTraceBytes};
  if (mode & 1) bounds = {size, 1u + (mode >> 1) % 8, 1u + (mode >> 4) * 4u};
  sbx::ParsedJson dom = sbx::parse_json(text, bounds);
  std::size_t members = 0;
  sbx::JsonScan scan = sbx::scan_json(text, bounds, 3, [&](const sbx::ScannedMember& m) {
    // Every reported member is a value of its own, inside the text.
    if (m.raw.data() < text.data() || m.raw.data() + m.raw.size() > text.data() + text.size()) std::abort();
    if (m.path.empty() || m.path.size() > 3) std::abort();
    ++members;
  });
  if (scan.ok != dom.ok()) std::abort();
  if (scan.ok && (scan.root == '{') != dom.value.is_object()) std::abort();
  if (scan.ok && scan.root != '{' && members != 0) std::abort();
  if (mode & 1) return 0;
  auto fast = sbx::summarize_record_text("id", text);
  if (fast.ok() != (dom.ok() && dom.value.is_object())) std::abort();
  if (fast) {
    sbx::TraceSummary whole = sbx::summarize_record("id", dom.value);
    if (fast->started_at != whole.started_at || fast->status != whole.status || fast->exit_code != whole.exit_code ||
        fast->wall_ms != whole.wall_ms || fast->command != whole.command || fast->pack != whole.pack ||
        fast->pack_version != whole.pack_version || fast->pack_digest != whole.pack_digest ||
        fast->image != whole.image || fast->image_digest != whole.image_digest)
      std::abort();
  }
  return 0;
}
