#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/base/fsutil.hpp"
#include "runtime/linux/tcp_peer.hpp"

namespace {

sbx::UniqueFd tcp_socket() { return sbx::UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)); }

}  // namespace

TEST_CASE("tcp_peer: a loopback peer of this process is local and ours") {
  auto listener = tcp_socket();
  REQUIRE(listener.ok());
  struct sockaddr_in a {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(listener.get(), 4) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(listener.get(), reinterpret_cast<struct sockaddr*>(&a), &len) == 0);
  auto client = tcp_socket();
  REQUIRE(::connect(client.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) == 0);
  sbx::UniqueFd accepted(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  REQUIRE(accepted.ok());
  auto peer = sbx::tcp_peer(accepted.get());
  REQUIRE_MESSAGE(peer, (peer ? "" : peer.error().describe()));
  CHECK(peer->local);
  CHECK(peer->uid == ::geteuid());
  // A socket that is not connected has no peer to ask about.
  auto lone = tcp_socket();
  CHECK_FALSE(sbx::tcp_peer(lone.get()));
}
