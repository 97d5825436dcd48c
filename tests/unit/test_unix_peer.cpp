#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "runtime/linux/unix_peer.hpp"
#include "tests/unit/test_util.hpp"

using sbx::connect_unix_at;
using sbx::descends_from;
using sbx::parse_stat_ppid;
using sbx::UniqueFd;
using sbx::unix_peer;
using sbx::test::TempDir;

namespace {

// A SEQPACKET listener bound at `path` by this process (not ok() if it could not be made: no
// REQUIRE here, a forked child calls it too).
UniqueFd listen_at(const std::string& path) {
  UniqueFd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  struct sockaddr_un a {};
  a.sun_family = AF_UNIX;
  if (!s.ok() || path.size() >= sizeof a.sun_path) return UniqueFd();
  std::memcpy(a.sun_path, path.c_str(), path.size());
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(s.get(), 4) != 0) return UniqueFd();
  return s;
}

// A child that forks a grandchild and both wait until killed; the grandchild's pid comes back
// through a pipe.
struct Family {
  pid_t child = -1, grandchild = -1;
  Family() {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      pid_t g = ::fork();
      if (g == 0) {
        ::pause();
        ::_exit(0);
      }
      (void)!::write(p[1], &g, sizeof g);
      ::pause();
      ::_exit(0);
    }
    ::close(p[1]);
    REQUIRE(::read(p[0], &grandchild, sizeof grandchild) == static_cast<ssize_t>(sizeof grandchild));
    ::close(p[0]);
  }
  ~Family() {
    ::kill(grandchild, SIGKILL);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
};

}  // namespace

TEST_CASE("parse_stat_ppid: field 4, after a name that may hold spaces and parentheses") {
  CHECK(parse_stat_ppid("123 (sh) S 45 123 123 0 -1") == 45);
  CHECK(parse_stat_ppid("7 (a) b) 99 (c) R 1 7 7 0") == 1);  // the last ')' ends the name
  CHECK(parse_stat_ppid("1 (init) S 0 1 1") == 0);
  CHECK_FALSE(parse_stat_ppid("123 (sh S 45").has_value());  // a ')' inside the name only
  CHECK_FALSE(parse_stat_ppid("123 (sh) S").has_value());
  CHECK_FALSE(parse_stat_ppid("123 (sh) S x5 1").has_value());
  CHECK_FALSE(parse_stat_ppid("123 (sh) S -4 1").has_value());
  CHECK_FALSE(parse_stat_ppid("123 (sh) S 4x 1").has_value());
  CHECK_FALSE(parse_stat_ppid("").has_value());
}

TEST_CASE("descends_from: the process itself and its descendants, within the depth, and nothing else") {
  Family f;
  const pid_t me = ::getpid();
  CHECK(descends_from(me, me, 0));
  CHECK(descends_from(f.child, me, 1));
  CHECK(descends_from(f.grandchild, me, 2));
  CHECK(descends_from(f.grandchild, f.child, 1));
  CHECK_FALSE(descends_from(f.grandchild, me, 1));  // two generations down, one allowed
  CHECK_FALSE(descends_from(me, f.child, 8));       // a parent is no descendant
  CHECK_FALSE(descends_from(f.child, f.grandchild, 8));
  CHECK_FALSE(descends_from(0, me, 8));
  CHECK_FALSE(descends_from(-1, me, 8));
}

TEST_CASE("connect_unix_at and unix_peer: the listener, through the directory held") {
  TempDir t;
  const std::string path = t.path + "/sock";
  UniqueFd dir(::open(t.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(dir.ok());

  SUBCASE("this process listens") {
    UniqueFd l = listen_at(path);
    REQUIRE(l.ok());
    auto c = connect_unix_at(dir.get(), "sock", "the test's socket", "template");
    REQUIRE(c);
    auto peer = unix_peer(c->get(), "template");
    REQUIRE(peer);
    CHECK(peer->pid == ::getpid());
    CHECK(peer->alive());
    // The same listener, the same identity; without the pid where the identity is known.
    auto c2 = connect_unix_at(dir.get(), "sock", "the test's socket", "template");
    REQUIRE(c2);
    auto again = unix_peer(c2->get(), "template", false);
    REQUIRE(again);
    CHECK(again->id == peer->id);
    if (peer->id != 0) CHECK(again->pid == 0);
    else MESSAGE("this kernel gives no pidfd's identity (SO_PEERPIDFD on pidfs: Linux 6.9): compared by pid");
  }
  SUBCASE("a child listens, and the pid is the child's, not the connecting process's") {
    int ready[2];
    REQUIRE(::pipe2(ready, O_CLOEXEC) == 0);
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      UniqueFd l = listen_at(path);
      (void)!::write(ready[1], l.ok() ? "x" : "-", 1);
      if (l.ok()) ::pause();
      ::_exit(0);
    }
    ::close(ready[1]);
    char b;
    REQUIRE(::read(ready[0], &b, 1) == 1);
    ::close(ready[0]);
    if (b != 'x') ::waitpid(child, nullptr, 0);
    REQUIRE(b == 'x');
    auto c = connect_unix_at(dir.get(), "sock", "the test's socket", "template");
    REQUIRE(c);
    auto peer = unix_peer(c->get(), "template");
    UniqueFd l = listen_at(t.path + "/mine");
    REQUIRE(l.ok());
    auto mine_c = connect_unix_at(dir.get(), "mine", "the test's socket", "template");
    REQUIRE(mine_c);
    auto mine = unix_peer(mine_c->get(), "template");
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    REQUIRE(peer);
    REQUIRE(mine);
    CHECK(peer->pid == child);
    if (peer->id != 0) CHECK(peer->id != mine->id);
  }
  SUBCASE("a listener that has ended: an error, never the pid it had, which another may have now") {
    // The socket made and bound here, listen()ed by a child that then ends: the socket stays
    // open here, listening, and the kernel's record of its listener is the child's.
    UniqueFd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    REQUIRE(s.ok());
    struct sockaddr_un a {};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.c_str(), path.size());
    REQUIRE(::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) ::_exit(::listen(s.get(), 4) == 0 ? 0 : 1);
    int ws = 0;
    REQUIRE(::waitpid(child, &ws, 0) == child);
    REQUIRE(WIFEXITED(ws));
    REQUIRE(WEXITSTATUS(ws) == 0);
    auto c = connect_unix_at(dir.get(), "sock", "the test's socket", "template");
    REQUIRE(c);
    int probe = -1;
    socklen_t len = sizeof probe;
    if (::getsockopt(c->get(), SOL_SOCKET, 77, &probe, &len) != 0 && errno == ENOPROTOOPT) {
      MESSAGE("this kernel has no SO_PEERPIDFD (Linux 6.5): a listener that ended is known by the pid it had");
    } else {
      if (probe >= 0) ::close(probe);
      auto peer = unix_peer(c->get(), "template");
      CHECK_FALSE(peer);
      auto by_id = unix_peer(c->get(), "template", false);
      // Its identity is still its own (never a live process's): a worker compares it alone.
      if (by_id) CHECK(by_id->id != 0);
    }
  }
  SUBCASE("the name renamed away: the directory held leads to what is there now") {
    UniqueFd l = listen_at(path);
    REQUIRE(l.ok());
    REQUIRE(::rename(path.c_str(), (t.path + "/moved").c_str()) == 0);
    auto c = connect_unix_at(dir.get(), "sock", "the test's socket", "template");
    REQUIRE_FALSE(c);
    CHECK(c.error().describe().find("the test's socket") != std::string::npos);
  }
  SUBCASE("no listener") {
    auto c = connect_unix_at(dir.get(), "nothing", "the test's socket", "template");
    CHECK_FALSE(c);
  }
}
