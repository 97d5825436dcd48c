#pragma once
// run_sandbox: the whole pipeline of one invocation (docs/ARCHITECTURE.md, "A run, phase by phase"):
//   1 prepare  2 spawn  3 supervise  4 collect  5 record  6 clean
// It reads only the RunRequest (run_request.hpp: the RunSpec, plus where to write the record) and
// returns the outcome, the trace record and the exit status for `sbx run`.
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/launch/outcome.hpp"
#include "runtime/launch/run_request.hpp"

namespace sbx {

struct RunReport {
  Outcome outcome;
  nlohmann::json trace;
  int exit_status = 125;
  // Whether the record reached the ledger durably; when not, why (a caller that releases a
  // result only with its record, pack run and exec, withholds it: no result without a record).
  bool recorded = false;
  std::string record_error;
  std::uint64_t record_seq = 0;  // the record's ledger line, when recorded
  std::string record_hash;
  // A pooled sandbox discarded before any call was handed to it (RunRequest::pool.await_call):
  // no record. When its build failed before it could wait for a call, outcome.error says why.
  bool discarded = false;
};

RunReport run_sandbox(const RunRequest& req);

}  // namespace sbx
