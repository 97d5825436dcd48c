#include "runtime/launch/outcome.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <cstring>
#include <string_view>
#include <vector>

#include "runtime/base/signals.hpp"
#include "runtime/base/suggest.hpp"
#include "runtime/launch/supervisor.hpp"
#include "runtime/base/units.hpp"

namespace sbx {

const char* to_string(RunStatus s) {
  switch (s) {
    case RunStatus::ok: return "ok";
    case RunStatus::exit_nonzero: return "exit_nonzero";
    case RunStatus::signaled: return "signaled";
    case RunStatus::timeout: return "timeout";
    case RunStatus::oom: return "oom";
    case RunStatus::seccomp_violation: return "seccomp_violation";
    case RunStatus::output_limit: return "output_limit";
    case RunStatus::input_invalid: return "input_invalid";
    case RunStatus::output_invalid: return "output_invalid";
    case RunStatus::setup_error: return "setup_error";
  }
  return "setup_error";
}

Result<RunStatus> parse_run_status(std::string_view text) {
  std::vector<std::string> names;
  for (auto st : {RunStatus::ok, RunStatus::exit_nonzero, RunStatus::signaled, RunStatus::timeout, RunStatus::oom,
                  RunStatus::seccomp_violation, RunStatus::output_limit, RunStatus::input_invalid,
                  RunStatus::output_invalid, RunStatus::setup_error}) {
    if (text == to_string(st)) return st;
    names.emplace_back(to_string(st));
  }
  std::string list;
  for (auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return make_error("usage", "unknown status '" + std::string(text) + "'" + did_you_mean(std::string(text), names) +
                                 ": one of " + list);
}

Outcome outcome_from_wait_status(int ws) {
  Outcome o;
  if (WIFEXITED(ws)) {
    o.exit_code = WEXITSTATUS(ws);
    o.status = *o.exit_code == 0 ? RunStatus::ok : RunStatus::exit_nonzero;
  } else if (WIFSIGNALED(ws)) {
    o.signal = WTERMSIG(ws);
    o.status = RunStatus::signaled;
    // sbx's policy never delivers SIGSYS: every refusing action of the installed filter is a
    // notification (seccomp_policy.cpp, notify_program), and a kill is the supervisor's, with the
    // call named (seccomp_kill, outcome_from_supervision). A SIGSYS is the program's own doing:
    // `kill -SYS $$` made a run read as a seccomp violation, with no violation recorded.
    if (*o.signal == SIGSYS)
      o.reason =
          "SIGSYS, not from sbx's seccomp policy (which ends a run itself and names the call): sent by "
          "the program, or by a seccomp filter of its own";
  }
  return o;
}

namespace {

// Who ended a run that a forwarded signal ended, for the record's reason.
std::string forwarded_reason(const SuperviseResult& s, bool killed_by_sbx, int kill_grace_ms) {
  std::string fwd = signal_name(s.forwarded_signal);
  if (!killed_by_sbx) return fwd + " received by sbx and forwarded to the program's process group";
  if (s.second_signal)
    return "killed by sbx (SIGKILL) at a second signal (" + signal_name(s.second_signal) + ") after forwarding " + fwd;
  return "killed by sbx (SIGKILL): still running " + std::to_string(kill_grace_ms) + " ms after sbx forwarded " + fwd;
}

}  // namespace

std::optional<Error> supervision_error(const SuperviseResult& s) {
  if (s.error) return *s.error;  // sbx could not enforce what it was asked to: the sandbox was killed
  if (s.setup_error) {
    // Init names the stage from kStages (InitEnd::report_setup_error), cut to ChildMsg::stage's
    // size: a name that does not read back is init's setup all the same.
    const ChildMsg& m = *s.setup_error;
    Stage stage =
        Stage::from_name(std::string_view(m.stage, ::strnlen(m.stage, sizeof m.stage))).value_or(Stage("prepare"));
    return Error{stage, m.err, m.message};
  }
  return std::nullopt;
}

Outcome outcome_from_supervision(const SuperviseResult& s, int kill_grace_ms) {
  Outcome o;
  if (auto e = supervision_error(s)) {
    o.status = RunStatus::setup_error;
    o.error = std::move(e);
    return o;
  }
  if (s.seccomp_kill) {
    // A kill action arrives as a notification: the supervisor named the call, then killed the
    // sandbox with the call still blocked. Reported like the kernel's SIGSYS kill (exit 159).
    o.status = RunStatus::seccomp_violation;
    o.signal = SIGSYS;
    o.reason = "killed by the seccomp policy: " + s.seccomp_kill->name + " (" + s.seccomp_kill->arch + ", " +
               s.seccomp_kill->action + ")";
    return o;
  }
  if (s.timed_out || s.cpu_exceeded) {
    o.status = RunStatus::timeout;
    o.reason = !s.timed_out           ? "cpu"
               : s.delivery_timed_out ? "wall: the program had ended, but its output was not all taken by the reader"
                                      : "wall";
    o.signal = SIGKILL;
    return o;
  }
  if (s.program_wait_status) {
    o = outcome_from_wait_status(*s.program_wait_status);
    // The program's own status: it ended before any SIGKILL of sbx's could reach it.
    if (s.forwarded_signal) o.reason = forwarded_reason(s, false, kill_grace_ms);
    else if (s.signal_after_end)
      o.reason = signal_name(s.signal_after_end) +
                 " received by sbx after the program had ended: its output still waiting for the reader was dropped";
    else if (o.signal == SIGPIPE && (s.out.reader_closed || s.err.reader_closed))
      o.reason = std::string("the reader of sbx's ") + (s.out.reader_closed ? "stdout" : "stderr") +
                 " closed it, and sbx closed the program's pipe";
    return o;
  }
  // Init died without reporting: killed by sbx after a forwarded signal, or by something else.
  o.status = RunStatus::signaled;
  o.signal = WIFSIGNALED(s.init_wait_status) ? WTERMSIG(s.init_wait_status) : SIGKILL;
  if (s.forwarded_signal) o.reason = forwarded_reason(s, s.killed_after_grace, kill_grace_ms);
  return o;
}

namespace {

// Steps 5-8 of decide_outcome (outcome.hpp): what the kernel's limits and the export left
// behind, read after the end rather than guessed from a signal.
void refine(Outcome& o, const RunFacts& f) {
  // Without a cgroup the CPU budget is RLIMIT_CPU, which the kernel enforces with SIGKILL (hard
  // limit): a program killed that way having used its budget ran out of CPU time. rusage
  // undercounts what the kernel's CPU timer saw (it samples ticks), hence the 80% margin.
  if (o.status == RunStatus::signaled && f.rlimit_cpu_ms && (o.signal == SIGKILL || o.signal == SIGXCPU) &&
      f.cpu_used_ms * 10 >= *f.rlimit_cpu_ms * 8) {
    o.status = RunStatus::timeout;
    o.reason = "cpu";
  }
  // The kernel's OOM killer acted: read from memory.events, not guessed from SIGKILL.
  if (o.status == RunStatus::signaled && o.signal == SIGKILL && f.oom_kills > 0) o.status = RunStatus::oom;
  // SIGXFSZ comes only from RLIMIT_FSIZE, which sbx never sets (limits_plan.cpp fallback_memory
  // says why): the program inherited it from sbx's caller. Said in the reason, since "signaled
  // 25" alone does not tell a user which limit bit, nor where it came from.
  if (o.status == RunStatus::signaled && o.signal == SIGXFSZ)
    o.reason =
        "SIGXFSZ: a file grew past RLIMIT_FSIZE, which sbx does not set: inherited from sbx's caller "
        "(ulimit -f), or set (or the signal sent) by the program itself";
  // The artifact export went over its caps: the program itself may still have succeeded.
  if (o.status == RunStatus::ok && f.export_limit_hit) {
    o.status = RunStatus::output_limit;
    o.reason = "artifact export caps reached (--output-max-bytes/--output-max-files)";
  }
}

}  // namespace

Outcome decide_outcome(const RunFacts& f) {
  if (f.refused) return *f.refused;
  Outcome o;  // status setup_error
  if (f.setup_error) {
    o.error = *f.setup_error;
    return o;
  }
  if (f.signal_before_start) {
    o.status = RunStatus::signaled;
    o.signal = f.signal_before_start;
    o.reason = signal_name(f.signal_before_start) + " received by sbx before the program started: it was not started";
    return o;
  }
  if (!f.supervised) return o;  // nothing ran and nothing said why: sbx's own failure
  o = outcome_from_supervision(*f.supervised, f.kill_grace_ms);
  if (o.error && o.error->hint.empty()) o.error->hint = f.setup_hint;
  refine(o, f);
  return with_verdict(std::move(o), f.contract);
}

Outcome refusal(const ContractVerdict& verdict) {
  Outcome o;
  o.status = verdict.status;
  o.error = verdict.error;
  return o;
}

Outcome with_verdict(Outcome o, const std::optional<ContractVerdict>& verdict) {
  if (o.status != RunStatus::ok || !verdict) return o;
  o.status = verdict->status;
  o.error = verdict->error;
  return o;
}

int exit_status_for(const Outcome& o) {
  switch (o.status) {
    case RunStatus::ok:
    case RunStatus::exit_nonzero: return o.exit_code.value_or(0);
    case RunStatus::signaled:
    case RunStatus::oom:
    case RunStatus::seccomp_violation: return 128 + o.signal.value_or(SIGKILL);
    case RunStatus::timeout: return 124;
    case RunStatus::input_invalid:
    case RunStatus::output_invalid: return 65;
    case RunStatus::output_limit:
      // Artifact export went over its caps: the program itself may still have succeeded.
      return o.exit_code.value_or(o.signal ? 128 + *o.signal : 125);
    case RunStatus::setup_error:
      // The entrypoint could not be started: shell conventions 127 (not found) / 126 (not executable).
      if (o.error && o.error->stage == "execve") return (o.error->err == ENOENT || o.error->err == ENOTDIR) ? 127 : 126;
      return 125;
  }
  return 125;
}

std::vector<LimitHit> limits_hit(const LimitFacts& f) {
  std::vector<LimitHit> hits;
  auto opt = [](const std::optional<std::int64_t>& v, std::string (*fmt)(std::int64_t)) {
    return v ? fmt(*v) : std::string();
  };
  auto count = [](std::int64_t v) { return std::to_string(v); };
  const Outcome* o = f.outcome;
  if (o && o->status == RunStatus::timeout) {
    if (o->reason == "cpu") hits.push_back({"cpu_time", opt(f.cpu_time_ms, format_duration_ms), "--cpu-time DURATION"});
    else hits.push_back({"timeout", opt(f.timeout_ms, format_duration_ms), "--timeout DURATION"});
  }
  // The OOM killer's kill, or reclaim that failed at memory.max (memory.events oom): an
  // allocation may have failed without a kill.
  if ((o && o->status == RunStatus::oom) || f.memory_oom_events > 0)
    hits.push_back({"memory", opt(f.memory_bytes, format_size), "--memory SIZE"});
  if (f.pids_max_events > 0) hits.push_back({"pids", f.pids ? count(*f.pids) : std::string(), "--pids N"});
  // RLIMIT_FSIZE is never sbx's (outcome.hpp, step 7): it came with sbx's caller, or the
  // program set it (or sent itself SIGXFSZ).
  if (o && o->status == RunStatus::signaled && o->signal == SIGXFSZ)
    hits.push_back({"file_size", "", "ulimit -f in the shell that runs sbx, if not the program's own"});
  if (f.output_truncated) hits.push_back({"output", opt(f.output_limit_bytes, format_size), "--output-limit SIZE"});
  if (o && o->status == RunStatus::output_limit)
    hits.push_back({"artifacts", "", "--output-max-bytes SIZE, --output-max-files N"});
  return hits;
}

std::string limits_hit_line(const std::vector<LimitHit>& hits) {
  std::string line;
  for (auto& h : hits) {
    if (h.name == "timeout" || h.name == "cpu_time" || h.name == "output") continue;
    line += line.empty() ? "limit hit: " : "; ";
    line += h.name + (h.value.empty() ? "" : " (" + h.value + ")") + ": raise it with " + h.fix;
  }
  return line;
}

}  // namespace sbx
