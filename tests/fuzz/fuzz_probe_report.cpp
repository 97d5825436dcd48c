// `sbx probe`'s reading of what its helper printed inside the sandbox (runtime/record/probe_report.hpp:
// parse_probe_output): untrusted text — a breached sandbox may print anything on that stream.
// Checked besides "no crash": at most kMaxProbeResults results; every name is [a-z0-9_.] and every
// status held|breached|skipped; the table for people has no control character but newlines and
// the JSON dumps (escaped evidence, bounded size).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/record/probe_report.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  sbx::ProbeOutput po = sbx::parse_probe_output(text);
  if (po.results.size() > sbx::kMaxProbeResults) std::abort();
  for (auto& r : po.results) {
    if (r.name.empty() || r.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_.") != std::string::npos)
      std::abort();
    if (r.status != "held" && r.status != "breached" && r.status != "skipped") std::abort();
    for (unsigned char ch : r.evidence)
      if (ch < 0x20 || ch == 0x7f) std::abort();
  }
  for (unsigned char ch : sbx::probe_table(po.results))
    if ((ch < 0x20 && ch != '\n') || ch == 0x7f) std::abort();
  (void)sbx::probe_json(po.results).dump();
  (void)sbx::probe_exit_status(po.results);
  return 0;
}
