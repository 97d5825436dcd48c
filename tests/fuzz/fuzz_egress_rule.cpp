// The egress rule parser and matcher (runtime/egress/egress_policy.cpp). Input: lines; every line but
// the last is an --allow-host rule, the last is a requested authority (CONNECT form, or with a
// default port when the input's first byte is odd). Checked besides "no crash": a target that
// parsed has a key, and an allowed decision names a rule that exists.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/egress/egress_policy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (;;) {
    auto nl = text.find('\n', start);
    lines.push_back(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  std::string authority = lines.back();
  lines.pop_back();
  std::vector<sbx::AllowRule> rules;
  for (auto& l : lines)
    if (auto r = sbx::parse_allow_rule(l)) rules.push_back(*r);
  (void)sbx::parse_allow_rules(lines);
  std::optional<std::uint16_t> default_port;
  if (size > 0 && (data[0] & 1)) default_port = 80;
  auto t = sbx::parse_authority(authority, default_port);
  if (!t) return 0;
  if (sbx::target_key(*t).empty()) std::abort();
  auto d = sbx::check_egress(rules, *t);
  if (d.allowed && (d.rule < 0 || static_cast<std::size_t>(d.rule) >= rules.size())) std::abort();
  return 0;
}
