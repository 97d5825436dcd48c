#include "runtime/record/probe_report.hpp"

#include <algorithm>

#include "runtime/base/text_escape.hpp"

namespace sbx {

namespace {
bool good_name(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
  });
}
}  // namespace

ProbeOutput parse_probe_output(std::string_view text) {
  ProbeOutput out;
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line == "END") {
      out.finished = true;
      continue;
    }
    if (line == "MEM") {
      out.reached_memory = true;
      continue;
    }
    if (line.starts_with("I\t")) {
      std::string_view rest = line.substr(2);
      auto tab = rest.find('\t');
      std::string_view key = rest.substr(0, tab);
      if (tab == std::string_view::npos || !good_name(key) || rest.size() - tab - 1 > 200 ||
          out.info.size() >= kMaxProbeInfo) {
        ++out.bad_lines;
        continue;
      }
      out.info.emplace(std::string(key), printable(rest.substr(tab + 1)));
      continue;
    }
    std::string_view f[4];
    std::size_t n = 0;
    while (n < 3) {
      auto tab = line.find('\t');
      if (tab == std::string_view::npos) break;
      f[n++] = line.substr(0, tab);
      line = line.substr(tab + 1);
    }
    f[n] = line;
    if (n != 3 || f[0] != "P" || !good_name(f[1]) || (f[2] != "held" && f[2] != "breached" && f[2] != "skipped") ||
        out.results.size() >= kMaxProbeResults) {
      ++out.bad_lines;
      continue;
    }
    out.results.push_back({std::string(f[1]), std::string(f[2]), printable(f[3].substr(0, 1000))});
  }
  return out;
}

int probe_exit_status(const std::vector<ProbeResult>& results) {
  return std::any_of(results.begin(), results.end(), [](auto& r) { return r.status == "breached"; }) ? 1 : 0;
}

std::string probe_table(const std::vector<ProbeResult>& results) {
  std::size_t w = 8;
  for (auto& r : results) w = std::max(w, r.name.size());
  std::string out = "BOUNDARY" + std::string(w - 8 + 2, ' ') + "RESULT    EVIDENCE\n";
  std::size_t held = 0, breached = 0, degraded = 0;
  for (auto& r : results) {
    out += r.name + std::string(w - r.name.size() + 2, ' ') + r.status +
           std::string(10 - std::min<std::size_t>(r.status.size(), 9), ' ') + r.evidence + "\n";
    held += r.status == "held";
    breached += r.status == "breached";
    degraded += r.status == "degraded";
  }
  out += std::to_string(held) + " held, " + (degraded ? std::to_string(degraded) + " degraded, " : "") +
         std::to_string(breached) + " breached, " + std::to_string(results.size() - held - breached - degraded) +
         " skipped\n";
  return out;
}

nlohmann::json probe_json(const std::vector<ProbeResult>& results) {
  nlohmann::json a = nlohmann::json::array();
  std::size_t held = 0, breached = 0, degraded = 0;
  for (auto& r : results) {
    a.push_back({{"probe", r.name},
                 {"area", r.name.substr(0, r.name.find('.'))},
                 {"result", r.status},
                 {"evidence", r.evidence}});
    held += r.status == "held";
    breached += r.status == "breached";
    degraded += r.status == "degraded";
  }
  return {{"held", held},
          {"degraded", degraded},
          {"breached", breached},
          {"skipped", results.size() - held - breached - degraded},
          {"probes", a}};
}

}  // namespace sbx
