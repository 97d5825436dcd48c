#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>

#include "runtime/launch/outcome.hpp"

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
  auto sys = outcome_from_wait_status(killed(SIGSYS));
  CHECK(sys.status == RunStatus::seccomp_violation);
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
