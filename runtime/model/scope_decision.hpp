#pragma once
// Whether a rootless `sbx run` re-executes itself in a delegated systemd user scope
// (cli/systemd_scope.hpp does it): the decision alone, from facts gathered elsewhere, so that
// every case can be unit-tested without a user manager.
#include <string>

namespace sbx {

enum class ScopeMode { automatic, always, never };

// What decides a re-exec, gathered from the host (gather_scope_facts) or given by a test.
struct ScopeFacts {
  bool rootless = true;
  bool in_scope = false;           // we are the re-executed sbx
  bool cgroup_usable = false;      // plan_limits would use a cgroup here, and it holds no one else
  bool own_cgroup_busy = false;    // writable, but other processes are in it (for the reason)
  std::string layout;              // CgroupInfo::layout
  bool wants_cgroup = false;       // the run has a memory, pids, cpus or cpu_time limit
  std::string user_manager;        // the socket a user manager answered on ("" = none)
  std::string user_manager_probe;  // what was tried, for the message when none answered
  bool have_systemd_run = false;   // systemd-run on PATH
};

struct ScopeDecision {
  bool reexec = false;
  bool error = false;  // --systemd-scope could not be honoured: exit 125 with `why`
  std::string why;     // one line: why (not) re-executed
};

// Pure: the decision for `mode` given `facts` (unit-tested).
ScopeDecision decide_systemd_scope(ScopeMode mode, const ScopeFacts& facts);

}  // namespace sbx
