// `sbx classify`'s workload description (runtime/model/classify.hpp): the JSON read the way
// cli/classify_cmd.cpp reads it (parse_json_doc with the same bounds), then workload_from_json,
// classify, and both renderings. Checked besides "no crash": a workload that parsed classifies
// to a tier 0-5 with at least one reason; the text for people holds no control character but
// newlines (names from the workload are escaped for the terminal); the --json document dumps.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/model/classify.hpp"
#include "runtime/base/json_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto doc = sbx::parse_json_doc(text, {sbx::kMaxWorkloadBytes, 16, 10000}, "usage", "stdin");
  if (!doc) {
    (void)doc.error().describe();
    return 0;
  }
  auto w = sbx::workload_from_json(*doc, "stdin");
  if (!w) {
    (void)w.error().describe();
    return 0;
  }
  auto c = sbx::classify(*w);
  if (!c) {
    (void)c.error().describe();
    return 0;
  }
  if (c->tier < 0 || c->tier > 5 || c->reasons().empty()) std::abort();
  for (unsigned char ch : sbx::classification_to_text(*w, *c))
    if ((ch < 0x20 && ch != '\n') || ch == 0x7f) std::abort();
  (void)sbx::classification_to_json(*w, *c).dump();
  (void)sbx::tier_advice(c->tier);
  return 0;
}
