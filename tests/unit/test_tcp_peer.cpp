#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

#include "runtime/base/fsutil.hpp"
#include "runtime/linux/tcp_peer.hpp"
#include "tests/unit/test_util.hpp"

using sbx::test::connect_loopback;
using sbx::test::listen_loopback;

TEST_CASE("tcp_peer: a loopback peer of this process is local and ours") {
  std::uint16_t port = 0;
  auto listener = listen_loopback(port);
  auto client = connect_loopback(port);
  sbx::UniqueFd accepted(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  REQUIRE(accepted.ok());
  auto peer = sbx::tcp_peer(accepted.get());
  REQUIRE_MESSAGE(peer, (peer ? "" : peer.error().describe()));
  CHECK(peer->is == sbx::TcpPeer::Is::socket);
  CHECK(peer->uid == ::geteuid());
  // A client bound to a device is not found by an exact lookup without an interface: it must come
  // back as not found on a local address (the relay refuses it), never as a remote client.
  sbx::UniqueFd bound(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const char lo[] = "lo";
  if (::setsockopt(bound.get(), SOL_SOCKET, SO_BINDTODEVICE, lo, sizeof lo) == 0) {
    struct sockaddr_in a {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    REQUIRE(::connect(bound.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) == 0);
    sbx::UniqueFd second(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    REQUIRE(second.ok());
    auto hidden = sbx::tcp_peer(second.get());
    REQUIRE(hidden);
    if (hidden->is == sbx::TcpPeer::Is::socket)
      CHECK(hidden->uid == ::geteuid());
    else
      CHECK(hidden->local_address);
  }
  // A socket that is not connected has no peer to ask about.
  sbx::UniqueFd lone(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  CHECK_FALSE(sbx::tcp_peer(lone.get()));
}

TEST_CASE("is_local_address: loopback and this host's own addresses, not another host's") {
  struct in_addr a {};
  a.s_addr = htonl(0x7f000001);
  CHECK(sbx::is_local_address(a));
  a.s_addr = htonl(0x7f0a0b0c);  // all of 127.0.0.0/8
  CHECK(sbx::is_local_address(a));
  a.s_addr = htonl(0xc0000201);  // 192.0.2.1, TEST-NET-1: no host's (unless ip_nonlocal_bind)
  std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_nonlocal_bind", "r");
  int nonlocal = 0;
  if (f) {
    if (std::fscanf(f, "%d", &nonlocal) != 1) nonlocal = 0;
    std::fclose(f);
  }
  if (!nonlocal) CHECK_FALSE(sbx::is_local_address(a));
}
