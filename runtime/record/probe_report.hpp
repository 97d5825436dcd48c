#pragma once
// sbx probe's results: what the helper inside the sandbox (probe/sbx_probe.c) printed, read as
// untrusted text (a breached sandbox may print anything on that stream), plus the checks made on
// the host after the run (cli/probe_cmd.cpp), as a table for people and JSON for CI.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace sbx {

struct ProbeResult {
  std::string name;  // "fs.writable": area.probe, [a-z0-9_.] only
  // held | breached | skipped, or degraded: held as far as the helper could try, by a mechanism
  // the record calls degraded (degraded_limits in runtime/launch/probe_host.hpp); host side only
  std::string status;
  std::string evidence;  // printable (escaped) text
};

struct ProbeOutput {
  std::vector<ProbeResult> results;
  bool reached_memory = false;  // "MEM": every probe before the memory probe ran
  bool finished = false;        // "END": every probe ran
  std::size_t bad_lines = 0;    // lines that were none of the above (ignored, counted)
  // "I\tKEY\tVALUE": facts the host side judges after the run (the sandbox's pid namespace, a
  // declared secret's byte count). Keys as probe names; values printable, at most 200 bytes; at
  // most kMaxProbeInfo kept (the first value of a key wins: a later line cannot replace it).
  std::map<std::string, std::string> info;
};
inline constexpr std::size_t kMaxProbeInfo = 64;

// Lines "P\tNAME\tSTATUS\tEVIDENCE", "I\tKEY\tVALUE", "MEM" and "END"; anything else is counted in bad_lines. At
// most kMaxProbeResults results are kept and evidence is cut at 1000 bytes.
inline constexpr std::size_t kMaxProbeResults = 100;
ProbeOutput parse_probe_output(std::string_view text);

// 0 when nothing was breached (degraded is not a breach: sbx doctor names it), 1 when something was.
int probe_exit_status(const std::vector<ProbeResult>& results);

std::string probe_table(const std::vector<ProbeResult>& results);
nlohmann::json probe_json(const std::vector<ProbeResult>& results);

}  // namespace sbx
