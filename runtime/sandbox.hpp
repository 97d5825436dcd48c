#pragma once
// Sandbox::run: the whole pipeline of one invocation (DESIGN.md):
//   1 prepare  2 spawn  3 supervise  4 collect  5 record  6 clean
// It reads only the RunSpec (plus where to write the record) and returns the outcome, the trace
// record and the exit status for `sbx run`.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/outcome.hpp"
#include "runtime/paths.hpp"
#include "runtime/profile.hpp"
#include "runtime/spec.hpp"

namespace sbx {

struct RunRequest {
  RunSpec spec;
  ProfileSource profile;                     // hashed into the trace
  std::vector<std::string> invocation_argv;  // sbx's own argv
  Dirs dirs;
  std::string trace_file;  // extra copy of the record ("" for none)
  // Limits given on the command line ("memory", "pids", "cpus", "cpu_time"): a shortfall in one
  // of these is a warning; in a profile default it is logged at info level (quiet by default).
  std::vector<std::string> explicit_limits;
};

struct RunReport {
  Outcome outcome;
  nlohmann::json trace;
  int exit_status = 125;
};

RunReport run_sandbox(const RunRequest& req);

}  // namespace sbx
