// The profile / RunSpec reader: a profile's JSON text, layered over the defaults the way
// runtime/model/profile.cpp (parse_profile) does, then through spec_from_json and validate_spec.
// Property checked besides "no crash, no sanitizer report": a spec that parsed survives the round
// trip through spec_to_json unchanged (the trace embeds that JSON as the record of what ran).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/model/spec.hpp"

using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  json j;
  try {  // even with exceptions off, nlohmann 3.11 throws out_of_range for a number like 1e999
    j = json::parse(text, nullptr, false);
  } catch (const json::exception&) {
    return 0;
  }
  if (j.is_discarded() || !j.is_object()) return 0;
  json probe = sbx::spec_to_json(sbx::RunSpec{});
  sbx::merge_patch(probe, j);
  auto spec = sbx::spec_from_json(probe, "fuzz.json");
  if (!spec) {
    (void)spec.error().describe();
    return 0;
  }
  (void)sbx::validate_spec(*spec);
  auto again = sbx::spec_from_json(sbx::spec_to_json(*spec), "round trip");
  if (!again || !(*again == *spec)) std::abort();
  return 0;
}
