// The poll loop's participants (poll_set.hpp) over real pipes and eventfds: each gets back exactly
// the entries it added, in the list's order, also when it added none or an fd < 0.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/poll_set.hpp"

using namespace sbx;

namespace {

struct Pipe {
  UniqueFd r, w;
  Pipe() {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
    r.reset(p[0]);
    w.reset(p[1]);
  }
};

UniqueFd eventfd_with(std::uint64_t n) {
  UniqueFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  REQUIRE(fd.ok());
  if (n) REQUIRE(::write(fd.get(), &n, sizeof n) == static_cast<ssize_t>(sizeof n));
  return fd;
}

}  // namespace

TEST_CASE("a pass registers every participant, polls once and dispatches each with its own entries, in order") {
  Pipe quiet, written;
  REQUIRE(::write(written.w.get(), "x", 1) == 1);
  UniqueFd fired = eventfd_with(1), idle = eventfd_with(0);
  std::vector<std::string> order;
  std::vector<short> hooks_seen;
  PollParticipants parts;
  parts.push_back(std::make_unique<PollFd>([&] { return quiet.r.get(); }, [&](short) { order.push_back("quiet"); }));
  parts.push_back(std::make_unique<PollFd>([&] { return fired.get(); }, [&](short rev) {
    CHECK((rev & POLLIN) != 0);
    order.push_back("fired");
  }));
  // Several entries, one of them not polled this pass (-1) and one asking for POLLOUT.
  parts.push_back(std::make_unique<PollHooks>(
      [&](PollSet& s) {
        s.add(idle.get());
        s.add(-1);
        s.add(written.r.get());
        s.add(written.w.get(), POLLOUT);
      },
      [&](std::span<const struct pollfd> mine) {
        order.push_back("hooks");
        REQUIRE(mine.size() == 4);
        CHECK(mine[0].fd == idle.get());
        CHECK(mine[1].fd == -1);
        CHECK(mine[2].fd == written.r.get());
        for (const auto& e : mine) hooks_seen.push_back(e.revents);
      }));
  // A participant with nothing to wait on is still dispatched, with no entries.
  std::size_t empty_seen = 99;
  parts.push_back(std::make_unique<PollHooks>([](PollSet&) {}, [&](std::span<const struct pollfd> mine) {
    order.push_back("empty");
    empty_seen = mine.size();
  }));
  parts.push_back(std::make_unique<PollFd>([] { return -1; }, [&](short) { order.push_back("never"); }));

  PollRound round(parts);
  CHECK(round.entries_of(*parts[0]).size() == 1);
  CHECK(round.entries_of(*parts[2]).size() == 4);
  CHECK(round.entries_of(*parts[3]).empty());
  PollFd stranger([] { return 0; }, [](short) {});
  CHECK(round.entries_of(stranger).empty());
  CHECK(round.wait(1000) == 3);  // the eventfd, the written pipe's both ends
  round.dispatch();
  CHECK(order == std::vector<std::string>{"fired", "hooks", "empty"});
  REQUIRE(hooks_seen.size() == 4);
  CHECK(hooks_seen[0] == 0);  // an eventfd at 0 is not readable
  CHECK(hooks_seen[1] == 0);  // poll() ignores an fd < 0
  CHECK(poll_readable(hooks_seen[2]));
  CHECK((hooks_seen[3] & POLLOUT) != 0);
  CHECK(empty_seen == 0);
}

TEST_CASE("each pass asks the participants again: what they add follows their state") {
  Pipe p;
  bool polled = false;
  int handled = 0;
  PollParticipants parts;
  parts.push_back(std::make_unique<PollFd>([&] { return polled ? p.r.get() : -1; }, [&](short) { ++handled; }));
  REQUIRE(::write(p.w.get(), "x", 1) == 1);
  {
    PollRound round(parts);
    CHECK(round.wait(0) == 0);  // ready, but not polled this pass
    round.dispatch();
  }
  CHECK(handled == 0);
  polled = true;
  {
    PollRound round(parts);
    CHECK(round.wait(1000) == 1);
    round.dispatch();
  }
  CHECK(handled == 1);
  // A hang-up (the writer gone) is readable too: the reader sees its EOF.
  char c;
  REQUIRE(::read(p.r.get(), &c, 1) == 1);
  p.w.reset();
  PollRound round(parts);
  CHECK(round.wait(1000) == 1);
  round.dispatch();
  CHECK(handled == 2);
}
