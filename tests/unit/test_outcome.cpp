#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "runtime/launch/outcome.hpp"
#include "runtime/launch/supervisor.hpp"

using namespace sbx;

namespace {
int exited(int code) { return (code & 0xff) << 8; }
int killed(int sig) { return sig & 0x7f; }
}  // namespace

TEST_CASE("the exit status table (man/sbx.1, EXIT STATUS)") {
  CHECK(exit_status_for(outcome_from_wait_status(exited(0))) == 0);
  CHECK(outcome_from_wait_status(exited(0)).status == RunStatus::ok);
  CHECK(exit_status_for(outcome_from_wait_status(exited(3))) == 3);
  CHECK(outcome_from_wait_status(exited(3)).status == RunStatus::exit_nonzero);
  // A child may exit 124-127 itself: its own code passes through, the trace status tells.
  CHECK(exit_status_for(outcome_from_wait_status(exited(124))) == 124);
  CHECK(exit_status_for(outcome_from_wait_status(killed(SIGKILL))) == 137);
  CHECK(exit_status_for(outcome_from_wait_status(killed(SIGTERM))) == 143);
  // A SIGSYS in the wait status is never sbx's policy (its kills are the supervisor's): signaled.
  auto sys = outcome_from_wait_status(killed(SIGSYS));
  CHECK(sys.status == RunStatus::signaled);
  CHECK(sys.reason.find("not from sbx's seccomp policy") != std::string::npos);
  CHECK(exit_status_for(sys) == 159);

  Outcome t;
  t.status = RunStatus::timeout;
  CHECK(exit_status_for(t) == 124);
  Outcome s;
  s.status = RunStatus::setup_error;
  s.error = Error{"mounts", ENOENT, "bind"};
  CHECK(exit_status_for(s) == 125);
  s.error = Error{"execve", ENOENT, "execute"};
  CHECK(exit_status_for(s) == 127);
  s.error = Error{"execve", EACCES, "execute"};
  CHECK(exit_status_for(s) == 126);
  Outcome io;
  io.status = RunStatus::output_invalid;
  CHECK(exit_status_for(io) == 65);
  Outcome oom;
  oom.status = RunStatus::oom;
  oom.signal = SIGKILL;
  CHECK(exit_status_for(oom) == 137);
  CHECK(std::string(to_string(RunStatus::seccomp_violation)) == "seccomp_violation");
}

TEST_CASE("errors describe themselves with stage and strerror") {
  Error e{"mounts", ENOENT, "bind source /x"};
  CHECK(e.describe() == "bind source /x: No such file or directory");
  CHECK(e.describe_with_stage() == "setup failed at mounts: bind source /x: No such file or directory");
  CHECK(Error{"usage", 0, "plain"}.describe() == "plain");
}

// decide_outcome (outcome.hpp): every status, and every pair of facts that can come together,
// resolved by the documented precedence.
namespace {

SuperviseResult program(int wait_status) {
  SuperviseResult s;
  s.program_wait_status = wait_status;
  return s;
}

RunFacts ran(const SuperviseResult& s) {
  RunFacts f;
  f.supervised = &s;
  f.kill_grace_ms = 2000;
  return f;
}

ChildMsg setup_msg(const char* stage, int err, const char* message) {
  ChildMsg m;
  m.kind = ChildMsg::kSetupError;
  m.err = err;
  std::strncpy(m.stage, stage, sizeof m.stage - 1);
  std::strncpy(m.message, message, sizeof m.message - 1);
  return m;
}

Outcome refused_input() {
  Outcome o;
  o.status = RunStatus::input_invalid;
  o.error = Error{"input", 0, "1 error(s) in in.json"};
  return o;
}

ContractVerdict bad_output() { return {RunStatus::output_invalid, Error{"output", 0, "1 error(s) in /out/result.json"}}; }

}  // namespace

TEST_CASE("decide_outcome: the program's own end") {
  auto s0 = program(exited(0));
  Outcome o = decide_outcome(ran(s0));
  CHECK(o.status == RunStatus::ok);
  CHECK(exit_status_for(o) == 0);
  CHECK(o.reason.empty());
  auto s3 = program(exited(3));
  o = decide_outcome(ran(s3));
  CHECK(o.status == RunStatus::exit_nonzero);
  CHECK(exit_status_for(o) == 3);
  auto st = program(killed(SIGTERM));
  o = decide_outcome(ran(st));
  CHECK(o.status == RunStatus::signaled);
  CHECK(exit_status_for(o) == 143);
  CHECK(o.reason.empty());
  auto sys = program(killed(SIGSYS));  // the program's own SIGSYS (kill, its own filter)
  o = decide_outcome(ran(sys));
  CHECK(o.status == RunStatus::signaled);
  CHECK(exit_status_for(o) == 159);
  sys.seccomp_kill = SeccompViolation{"mount", 165, "x86_64", "SCMP_ACT_KILL_PROCESS", 1, 0, true};
  CHECK(decide_outcome(ran(sys)).status == RunStatus::seccomp_violation);  // the policy's kill
}

TEST_CASE("decide_outcome: nothing ran and nothing said why is sbx's failure") {
  Outcome o = decide_outcome(RunFacts{});
  CHECK(o.status == RunStatus::setup_error);
  CHECK(exit_status_for(o) == 125);
}

TEST_CASE("decide_outcome: a caller's refusal beats everything") {
  auto s = program(exited(0));
  RunFacts f = ran(s);
  f.refused = refused_input();
  f.setup_error = Error{"mounts", ENOENT, "bind source /x"};
  f.signal_before_start = SIGINT;
  f.contract = bad_output();
  Outcome o = decide_outcome(f);
  CHECK(o.status == RunStatus::input_invalid);
  CHECK(exit_status_for(o) == 65);
  CHECK(o.error->stage == sbx::Stage("input"));
  // A contract that no longer compiles refuses as sbx's own failure.
  RunFacts g;
  g.refused = Outcome{};
  g.refused->error = Error{"pack", 0, "schema"};
  CHECK(exit_status_for(decide_outcome(g)) == 125);
}

TEST_CASE("decide_outcome: sbx's setup error beats a signal and the supervision") {
  auto s = program(exited(0));
  RunFacts f = ran(s);
  f.setup_error = Error{"mounts", ENOENT, "bind source /x"};
  f.signal_before_start = SIGINT;
  Outcome o = decide_outcome(f);
  CHECK(o.status == RunStatus::setup_error);
  CHECK(o.error->stage == sbx::Stage("mounts"));
  CHECK(exit_status_for(o) == 125);
  CHECK(o.error->hint.empty());  // the supervised hint is for a supervised error only
}

TEST_CASE("decide_outcome: a signal before the start: the program was not started") {
  auto s = program(exited(0));
  RunFacts f = ran(s);
  f.signal_before_start = SIGINT;
  Outcome o = decide_outcome(f);
  CHECK(o.status == RunStatus::signaled);
  CHECK(o.signal == SIGINT);
  CHECK(exit_status_for(o) == 130);
  CHECK(o.reason == "SIGINT received by sbx before the program started: it was not started");
}

TEST_CASE("decide_outcome: init's setup error, with its hint; execve's 126/127") {
  SuperviseResult s;
  s.setup_error = setup_msg("execve", ENOENT, "execute foo");
  s.init_wait_status = exited(1);
  RunFacts f = ran(s);
  f.setup_hint = "bind it";
  Outcome o = decide_outcome(f);
  CHECK(o.status == RunStatus::setup_error);
  CHECK(o.error->hint == "bind it");
  CHECK(exit_status_for(o) == 127);
  REQUIRE(supervision_error(s));
  CHECK(supervision_error(s)->message == "execute foo");
  s.setup_error = setup_msg("execve", EACCES, "execute foo");
  CHECK(exit_status_for(decide_outcome(ran(s))) == 126);
  // sbx's own failure while supervising comes before init's report, and keeps its own hint.
  s.error = Error{"cgroup", EINVAL, "read cpu.stat"};
  s.error->hint = "own";
  f = ran(s);
  f.setup_hint = "other";
  o = decide_outcome(f);
  CHECK(o.error->stage == sbx::Stage("cgroup"));
  CHECK(o.error->hint == "own");
  CHECK(exit_status_for(o) == 125);
  CHECK_FALSE(supervision_error(program(exited(0))));
}

TEST_CASE("decide_outcome: a setup error beats a timeout, an OOM kill and the program's status") {
  auto s = program(killed(SIGKILL));
  s.error = Error{"timeout", EINVAL, "timerfd_settime"};
  s.timed_out = true;
  RunFacts f = ran(s);
  f.oom_kills = 1;
  f.export_limit_hit = true;
  CHECK(decide_outcome(f).status == RunStatus::setup_error);
}

TEST_CASE("decide_outcome: a seccomp kill beats the signal it ends in, and a timeout") {
  auto s = program(killed(SIGKILL));
  s.seccomp_kill = SeccompViolation{"mount", 165, "x86_64", "SCMP_ACT_KILL_PROCESS", 1, 0, true};
  s.timed_out = true;
  RunFacts f = ran(s);
  f.oom_kills = 1;
  f.rlimit_cpu_ms = 100;
  f.cpu_used_ms = 100;
  Outcome o = decide_outcome(f);
  CHECK(o.status == RunStatus::seccomp_violation);
  CHECK(o.signal == SIGSYS);
  CHECK(exit_status_for(o) == 159);
  CHECK(o.reason == "killed by the seccomp policy: mount (x86_64, SCMP_ACT_KILL_PROCESS)");
}

TEST_CASE("decide_outcome: wall and CPU timeouts, and a timeout beats an OOM kill") {
  auto s = program(killed(SIGKILL));
  s.timed_out = true;
  RunFacts f = ran(s);
  f.oom_kills = 2;  // the timer's SIGKILL is not the OOM killer's, even when one acted too
  Outcome o = decide_outcome(f);
  CHECK(o.status == RunStatus::timeout);
  CHECK(o.reason == "wall");
  CHECK(exit_status_for(o) == 124);
  s.delivery_timed_out = true;
  CHECK(decide_outcome(ran(s)).reason == "wall: the program had ended, but its output was not all taken by the reader");
  SuperviseResult c = program(killed(SIGKILL));
  c.cpu_exceeded = true;
  o = decide_outcome(ran(c));
  CHECK(o.status == RunStatus::timeout);
  CHECK(o.reason == "cpu");
  // The wall timer wins when both budgets ran out.
  c.timed_out = true;
  CHECK(decide_outcome(ran(c)).reason == "wall");
}

TEST_CASE("decide_outcome: RLIMIT_CPU's kill is a CPU timeout once 80% of the budget shows in rusage") {
  for (int sig : {SIGKILL, SIGXCPU}) {
    auto s = program(killed(sig));
    RunFacts f = ran(s);
    f.rlimit_cpu_ms = 1000;
    f.cpu_used_ms = 800;
    Outcome o = decide_outcome(f);
    CHECK(o.status == RunStatus::timeout);
    CHECK(o.reason == "cpu");
    CHECK(exit_status_for(o) == 124);
    f.cpu_used_ms = 799;
    o = decide_outcome(f);
    CHECK(o.status == RunStatus::signaled);
    CHECK(exit_status_for(o) == 128 + sig);
  }
  // Another signal, or an exit, with the budget spent stays what it was.
  auto t = program(killed(SIGTERM));
  RunFacts f = ran(t);
  f.rlimit_cpu_ms = 1000;
  f.cpu_used_ms = 5000;
  CHECK(decide_outcome(f).status == RunStatus::signaled);
  auto e = program(exited(0));
  f = ran(e);
  f.rlimit_cpu_ms = 1000;
  f.cpu_used_ms = 5000;
  CHECK(decide_outcome(f).status == RunStatus::ok);
}

TEST_CASE("decide_outcome: an OOM kill needs the cgroup's count and a SIGKILL") {
  auto s = program(killed(SIGKILL));
  RunFacts f = ran(s);
  f.oom_kills = 1;
  Outcome o = decide_outcome(f);
  CHECK(o.status == RunStatus::oom);
  CHECK(o.signal == SIGKILL);
  CHECK(exit_status_for(o) == 137);
  f.oom_kills = 0;
  CHECK(decide_outcome(f).status == RunStatus::signaled);
  // A helper process OOM-killed while the program itself ended on its own terms.
  auto e = program(exited(1));
  f = ran(e);
  f.oom_kills = 1;
  CHECK(decide_outcome(f).status == RunStatus::exit_nonzero);
  auto t = program(killed(SIGTERM));
  f = ran(t);
  f.oom_kills = 1;
  CHECK(decide_outcome(f).status == RunStatus::signaled);
  // Killed by sbx after a forwarded signal (no report from init), with an OOM kill counted.
  SuperviseResult k;
  k.init_wait_status = killed(SIGKILL);
  f = ran(k);
  f.oom_kills = 1;
  CHECK(decide_outcome(f).status == RunStatus::oom);
}

TEST_CASE("decide_outcome: SIGXFSZ names RLIMIT_FSIZE and where it came from") {
  auto s = program(killed(SIGXFSZ));
  RunFacts f = ran(s);
  Outcome o = decide_outcome(f);
  CHECK(o.status == RunStatus::signaled);
  CHECK(exit_status_for(o) == 128 + SIGXFSZ);
  CHECK(o.reason ==
        "SIGXFSZ: a file grew past RLIMIT_FSIZE, which sbx does not set: inherited from sbx's caller (ulimit -f), or set (or the signal sent) by the program itself");
}

TEST_CASE("decide_outcome: the output limit applies to a run that succeeded only") {
  auto s = program(exited(0));
  RunFacts f = ran(s);
  f.export_limit_hit = true;
  Outcome o = decide_outcome(f);
  CHECK(o.status == RunStatus::output_limit);
  CHECK(o.reason == "artifact export caps reached (--output-max-bytes/--output-max-files)");
  CHECK(exit_status_for(o) == 0);  // the program's own code
  auto e = program(exited(3));
  f = ran(e);
  f.export_limit_hit = true;
  o = decide_outcome(f);
  CHECK(o.status == RunStatus::exit_nonzero);
  CHECK(exit_status_for(o) == 3);
  auto k = program(killed(SIGTERM));
  f = ran(k);
  f.export_limit_hit = true;
  CHECK(decide_outcome(f).status == RunStatus::signaled);
}

TEST_CASE("decide_outcome: the typed-IO verdict applies to a run that succeeded only") {
  auto s = program(exited(0));
  RunFacts f = ran(s);
  f.contract = bad_output();
  Outcome o = decide_outcome(f);
  CHECK(o.status == RunStatus::output_invalid);
  CHECK(o.error->stage == sbx::Stage("output"));
  CHECK(exit_status_for(o) == 65);
  // The output limit came first: the run did not succeed, its output is not judged.
  f.export_limit_hit = true;
  CHECK(decide_outcome(f).status == RunStatus::output_limit);
  auto e = program(exited(2));
  f = ran(e);
  f.contract = bad_output();
  o = decide_outcome(f);
  CHECK(o.status == RunStatus::exit_nonzero);
  CHECK_FALSE(o.error);
  CHECK(exit_status_for(o) == 2);
  auto t = program(killed(SIGKILL));
  t.timed_out = true;
  f = ran(t);
  f.contract = bad_output();
  CHECK(decide_outcome(f).status == RunStatus::timeout);
}

TEST_CASE("decide_outcome: who ended the run, in the reason") {
  auto s = program(killed(SIGTERM));
  s.forwarded_signal = SIGTERM;
  Outcome o = decide_outcome(ran(s));
  CHECK(o.status == RunStatus::signaled);
  CHECK(exit_status_for(o) == 143);
  CHECK(o.reason == "SIGTERM received by sbx and forwarded to the program's process group");
  SuperviseResult k;
  k.forwarded_signal = SIGINT;
  k.killed_after_grace = true;
  k.init_wait_status = killed(SIGKILL);
  o = decide_outcome(ran(k));
  CHECK(exit_status_for(o) == 137);
  CHECK(o.reason == "killed by sbx (SIGKILL): still running 2000 ms after sbx forwarded SIGINT");
  k.second_signal = SIGTERM;
  CHECK(decide_outcome(ran(k)).reason == "killed by sbx (SIGKILL) at a second signal (SIGTERM) after forwarding SIGINT");
  auto p = program(killed(SIGPIPE));
  p.out.reader_closed = true;
  o = decide_outcome(ran(p));
  CHECK(exit_status_for(o) == 141);
  CHECK(o.reason == "the reader of sbx's stdout closed it, and sbx closed the program's pipe");
  auto a = program(exited(0));
  a.signal_after_end = SIGINT;
  o = decide_outcome(ran(a));
  CHECK(o.status == RunStatus::ok);
  CHECK(o.reason == "SIGINT received by sbx after the program had ended: its output still waiting for the reader was dropped");
}

TEST_CASE("with_verdict: the contract's verdict is step 9 of decide_outcome, for an ok run only") {
  // A pack or exec run that succeeded and wrote a result that breaks the contract: 65, whatever
  // the program's own exit code (0) says. The caller judged it seeing status ok.
  auto s = program(exited(0));
  RunFacts f = ran(s);
  Outcome seen = decide_outcome(f);
  REQUIRE(seen.status == RunStatus::ok);
  Outcome o = with_verdict(seen, bad_output());
  CHECK(o.status == RunStatus::output_invalid);
  CHECK(o.exit_code == 0);
  CHECK(exit_status_for(o) == 65);
  CHECK(o.error->describe() == "1 error(s) in /out/result.json");
  CHECK(with_verdict(seen, std::nullopt).status == RunStatus::ok);
  // The two ways give the same outcome, for every end a verdict can meet.
  std::vector<RunFacts> ends;
  ends.push_back(ran(s));
  auto e = program(exited(3));
  ends.push_back(ran(e));
  auto k = program(killed(SIGKILL));
  ends.push_back(ran(k));
  ends.back().oom_kills = 1;
  auto t = program(killed(SIGKILL));
  t.timed_out = true;
  ends.push_back(ran(t));
  auto sc = program(killed(SIGSYS));
  ends.push_back(ran(sc));
  ends.push_back(ran(s));
  ends.back().export_limit_hit = true;
  ends.push_back(ran(s));
  ends.back().signal_before_start = SIGTERM;
  ends.push_back(ran(s));
  ends.back().setup_error = Error{"mounts", ENOENT, "bind source /x"};
  ends.push_back(ran(s));
  ends.back().refused = refused_input();
  for (auto& end : ends) {
    Outcome plain = decide_outcome(end);
    end.contract = bad_output();
    Outcome both = decide_outcome(end);
    Outcome stepwise = with_verdict(plain, end.contract);
    CHECK(both.status == stepwise.status);
    CHECK(exit_status_for(both) == exit_status_for(stepwise));
    CHECK(both.reason == stepwise.reason);
    // Only the ok run changes; every failure keeps its status and exit status.
    if (plain.status == RunStatus::ok) {
      CHECK(both.status == RunStatus::output_invalid);
    } else {
      CHECK(both.status == plain.status);
    }
  }
}

TEST_CASE("decide_outcome: a contract verdict against each failure it can meet") {
  auto oom = program(killed(SIGKILL));
  RunFacts f = ran(oom);
  f.oom_kills = 1;
  f.contract = bad_output();
  CHECK(decide_outcome(f).status == RunStatus::oom);
  CHECK(exit_status_for(decide_outcome(f)) == 137);
  auto sys = program(killed(SIGSYS));
  f = ran(sys);
  f.contract = bad_output();
  CHECK(exit_status_for(decide_outcome(f)) == 159);
  auto cpu = program(killed(SIGKILL));
  f = ran(cpu);
  f.rlimit_cpu_ms = 1000;
  f.cpu_used_ms = 1000;
  f.contract = bad_output();
  CHECK(decide_outcome(f).status == RunStatus::timeout);
  CHECK(exit_status_for(decide_outcome(f)) == 124);
  RunFacts g;
  g.signal_before_start = SIGINT;
  g.contract = bad_output();
  CHECK(exit_status_for(decide_outcome(g)) == 130);
  RunFacts h;
  h.setup_error = Error{"execve", ENOENT, "execute /nope"};
  h.contract = bad_output();
  CHECK(exit_status_for(decide_outcome(h)) == 127);
  // An input refused by the caller: its own verdict (input_invalid) stands.
  RunFacts r;
  r.refused = refused_input();
  r.contract = bad_output();
  CHECK(decide_outcome(r).status == RunStatus::input_invalid);
}

TEST_CASE("decide_outcome: the output limit against an exit code, a timeout and a seccomp kill") {
  auto s = program(exited(0));
  RunFacts f = ran(s);
  f.export_limit_hit = true;
  f.contract = bad_output();  // 8 before 9: the export's caps, and the output is not judged
  CHECK(decide_outcome(f).status == RunStatus::output_limit);
  auto t = program(killed(SIGKILL));
  t.timed_out = true;
  f = ran(t);
  f.export_limit_hit = true;
  CHECK(decide_outcome(f).status == RunStatus::timeout);
  auto sc = program(killed(SIGKILL));
  sc.seccomp_kill = SeccompViolation{"mount", 165, "x86_64", "SCMP_ACT_KILL_PROCESS", 1, 0, true};
  f = ran(sc);
  f.export_limit_hit = true;
  CHECK(decide_outcome(f).status == RunStatus::seccomp_violation);
}

TEST_CASE("refusal: a caller's verdict on the input, before anything was created") {
  Outcome o = refusal({RunStatus::input_invalid, Error{"input", 0, "2 error(s) in in.json against schemas/in.json"}});
  CHECK(o.status == RunStatus::input_invalid);
  CHECK(exit_status_for(o) == 65);
  CHECK_FALSE(o.exit_code);
  RunFacts f;
  f.refused = o;
  CHECK(decide_outcome(f).error->message == "2 error(s) in in.json against schemas/in.json");
}

// `sbx trace ls --status timout` listed nothing and said nothing: a typo read as a filter.
TEST_CASE("a status filter names the statuses and suggests the one meant") {
  CHECK(parse_run_status("timeout").ok());
  CHECK(*parse_run_status("seccomp_violation") == RunStatus::seccomp_violation);
  auto bad = parse_run_status("timout");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("did you mean 'timeout'?") != std::string::npos);
  CHECK(bad.error().message.find("one of ok, exit_nonzero,") != std::string::npos);
  CHECK_FALSE(parse_run_status("").ok());
  CHECK_FALSE(parse_run_status("OK").ok());
}

namespace {
std::vector<std::string> hit_names(const LimitFacts& f) {
  std::vector<std::string> v;
  for (auto& h : limits_hit(f)) v.push_back(h.name);
  return v;
}
}  // namespace

TEST_CASE("limits_hit: each limit from what shows it, in a fixed order") {
  Outcome ok;
  ok.status = RunStatus::ok;
  LimitFacts f;
  f.outcome = &ok;
  CHECK(limits_hit(f).empty());
  CHECK(limits_hit_line(limits_hit(f)).empty());

  // The cgroup's pids.events max: forks were refused, whatever the program made of it.
  f.pids = 64;
  f.pids_max_events = 3;
  auto hits = limits_hit(f);
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].name == "pids");
  CHECK(limits_hit_line(hits) == "limit hit: pids (64): raise it with --pids N");

  // memory.events oom without a kill (an allocation failed at memory.max) is a hit too.
  f.memory_bytes = 1LL << 30;
  f.memory_oom_events = 1;
  f.output_truncated = true;
  f.output_limit_bytes = 1 << 20;
  CHECK(hit_names(f) == std::vector<std::string>{"memory", "pids", "output"});
  // The output limit has its own line (tell_user); the rest share one.
  CHECK(limits_hit_line(limits_hit(f)) ==
        "limit hit: memory (1G): raise it with --memory SIZE; pids (64): raise it with --pids N");
}

TEST_CASE("limits_hit: from the outcome: timeouts, OOM kill, SIGXFSZ, the export caps") {
  LimitFacts f;
  Outcome o;
  f.outcome = &o;
  f.timeout_ms = 30000;
  o.status = RunStatus::timeout;
  o.reason = "wall";
  CHECK(hit_names(f) == std::vector<std::string>{"timeout"});
  CHECK(limits_hit(f)[0].value == "30s");
  CHECK(limits_hit_line(limits_hit(f)).empty());  // the wall-time line says it already
  o.reason = "cpu";
  CHECK(hit_names(f) == std::vector<std::string>{"cpu_time"});
  o = Outcome{};
  o.status = RunStatus::oom;
  CHECK(hit_names(f) == std::vector<std::string>{"memory"});
  CHECK(limits_hit_line(limits_hit(f)) == "limit hit: memory: raise it with --memory SIZE");
  o.status = RunStatus::signaled;
  o.signal = SIGXFSZ;
  CHECK(hit_names(f) == std::vector<std::string>{"file_size"});
  o.signal = SIGKILL;  // a SIGKILL alone names no limit: without memory.events it is no OOM kill
  CHECK(limits_hit(f).empty());
  o.status = RunStatus::output_limit;
  o.signal.reset();
  CHECK(hit_names(f) == std::vector<std::string>{"artifacts"});
  // In the rlimit fallback a refused fork or allocation leaves no fact: nothing is guessed.
  o.status = RunStatus::exit_nonzero;
  f.pids = 8;
  CHECK(limits_hit(f).empty());
}
