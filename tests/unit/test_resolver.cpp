#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "runtime/egress/resolver.hpp"

using namespace sbx;

namespace {
// Drives the resolver the way the proxy does (its sockets in a poll set, timeouts from it) until
// an answer arrives or `limit_ms` passes.
std::vector<Resolver::Answer> drive(Resolver& r, int limit_ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  std::vector<Resolver::Answer> got;
  while (got.empty() && std::chrono::steady_clock::now() < end) {
    std::vector<struct pollfd> p;
    r.add_pollfds(p);
    std::int64_t t = r.ms_until_timeout();
    ::poll(p.data(), p.size(), t < 0 || t > 100 ? 100 : static_cast<int>(t));
    r.on_events(p.data(), p.size());
    got = r.take_answers();
  }
  return got;
}
}  // namespace

TEST_CASE("resolver: a name from /etc/hosts answers without a name server") {
  Resolver r(4, 2000);
  REQUIRE(r.init_error().empty());
  std::uint64_t id = r.start("localhost", 8080);
  auto got = drive(r, 2000);
  REQUIRE(got.size() == 1);
  CHECK(got[0].id == id);
  REQUIRE(got[0].ok);
  REQUIRE_FALSE(got[0].addrs.empty());
  bool loopback = false;
  for (auto& ss : got[0].addrs) {
    if (ss.ss_family == AF_INET) {
      auto* s4 = reinterpret_cast<const struct sockaddr_in*>(&ss);
      loopback |= ntohl(s4->sin_addr.s_addr) == INADDR_LOOPBACK;
      CHECK(ntohs(s4->sin_port) == 8080);
    } else if (ss.ss_family == AF_INET6) {
      loopback |= IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const struct sockaddr_in6*>(&ss)->sin6_addr);
    }
  }
  CHECK(loopback);
  CHECK(r.in_flight() == 0);
}

TEST_CASE("resolver: shut down, it refuses new lookups and drops pending answers") {
  Resolver r(1, 1000);
  r.shutdown();
  CHECK_FALSE(r.can_start());
  CHECK_FALSE(r.init_error().empty());
  CHECK(r.take_answers().empty());
}

TEST_CASE("resolver: lookups in flight are bounded, and a silent server times out without blocking") {
  // A name server that never answers: a bound UDP socket nobody reads (queries queue in it
  // instead of drawing ICMP port unreachable).
  int silent = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  REQUIRE(silent >= 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(silent, reinterpret_cast<struct sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::getsockname(silent, reinterpret_cast<struct sockaddr*>(&a), &len) == 0);
  std::string server = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));

  Resolver r(3, 600, server);
  REQUIRE(r.init_error().empty());
  int started = 0;
  for (int i = 0; i < 10 && r.can_start(); ++i, ++started) {
    std::string name = std::to_string(i);
    name.append(".silent.test");  // (built in steps: GCC 12's -Wrestrict misfires on "n" + ... + "...")
    r.start(name, 80);
  }
  CHECK(started == 3);
  CHECK(r.in_flight() == 3);
  CHECK_FALSE(r.can_start());
  // c-ares gives up after its tries (1.5 x the 600 ms): every lookup answers, timed out.
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Resolver::Answer> all;
  while (all.size() < 3 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    auto got = drive(r, 5000);
    all.insert(all.end(), got.begin(), got.end());
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(all.size() == 3);
  for (auto& ans : all) {
    CHECK_FALSE(ans.ok);
    CHECK(ans.timed_out);
  }
  CHECK(ms < 3000);
  CHECK(r.in_flight() == 0);
  CHECK(r.can_start());
  ::close(silent);
}
