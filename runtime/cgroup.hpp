#pragma once
// cgroup v2: finding where sbx may create cgroups, one cgroup per run with limits written before
// the program starts, and usage read back. This host is a v1/v2 hybrid whose v2 offers no
// memory/cpu/pids controllers: sbx detects that and degrades honestly (see limits in the trace).
#include <string>
#include <vector>

namespace sbx {

struct CgroupInfo {
  std::string layout;        // "v2" (unified), "hybrid" (v1 + v2), "v1", or "none"
  std::string mount;         // where cgroup2 is mounted ("" if nowhere)
  std::string self_path;     // our cgroup v2 path from /proc/self/cgroup ("0::/..."), "" if none
  std::vector<std::string> controllers;  // cgroup.controllers of our cgroup v2
  bool writable = false;     // we may create child cgroups under our cgroup v2
};

CgroupInfo detect_cgroup();

}  // namespace sbx
