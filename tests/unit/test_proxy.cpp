// The egress proxy's per-connection state machine, driven the way the supervisor drives it
// (add_pollfds, poll, on_events) but without a sandbox: the listener init would send is a real
// socket on 127.0.0.1 handed over the same SEQPACKET socketpair, the "sandbox's program" is a
// client socket of the test, and the upstream a listening socket of the test. Rules name the
// upstream by address (127.0.0.1:PORT), so no name is ever looked up.
#include <doctest/doctest.h>

#include <sys/socket.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/fdpass.hpp"
#include "runtime/egress/proxy.hpp"
#include "tests/unit/test_util.hpp"

using namespace sbx;
using sbx::test::connect_loopback;
using sbx::test::listen_loopback;
using sbx::test::read_available;

namespace {

struct ProxyRig {
  std::unique_ptr<EgressProxy> proxy;
  std::uint16_t proxy_port = 0;     // where "the program" connects
  std::uint16_t upstream_port = 0;  // the test's own server
  UniqueFd upstream;                // its listener
  std::int64_t now_ms = 1000;       // the proxy's clock: moved by the test only
  std::vector<nlohmann::json> live_violations;

  explicit ProxyRig(std::vector<std::string> allow = {}, ProxyConfig cfg = {}) {
    upstream = listen_loopback(upstream_port);
    if (allow.empty()) allow.push_back("127.0.0.1:" + std::to_string(upstream_port));
    auto rules = parse_allow_rules(allow);
    REQUIRE(rules.ok());
    cfg.rules = *rules;
    cfg.start_ms = 1000;
    cfg.on_violation = [this](const nlohmann::json& v) { live_violations.push_back(v); };
    auto pair = sbx::test::make_socketpair(SOCK_SEQPACKET);
    proxy = std::make_unique<EgressProxy>(std::move(cfg), pair.a.release());
    // What init does: send the listener, close its own copy.
    UniqueFd listener = listen_loopback(proxy_port);
    REQUIRE(send_fd(pair.b.get(), listener.get(), 'L', Stage("network"), "the proxy listener").ok());
    listener.reset();
    for (int i = 0; i < 20 && !proxy->listener_received(); ++i) pump(1, 10);
    REQUIRE(proxy->listener_received());
  }

  // `rounds` turns of the supervisor's poll loop, each waiting at most `wait_ms`.
  void pump(int rounds = 10, int wait_ms = 5) {
    for (int r = 0; r < rounds; ++r) {
      std::vector<struct pollfd> p;
      proxy->add_pollfds(p);
      ::poll(p.data(), p.size(), wait_ms);
      proxy->on_events(p.data(), p.size(), now_ms);
    }
  }

  UniqueFd client() {
    UniqueFd c = connect_loopback(proxy_port);
    pump(2);
    return c;
  }

  // The upstream's end of the connection the proxy opened to it.
  UniqueFd accept_upstream() {
    struct pollfd p{upstream.get(), POLLIN, 0};
    for (int i = 0; i < 50 && ::poll(&p, 1, 0) == 0; ++i) pump(1, 10);
    UniqueFd fd(::accept4(upstream.get(), nullptr, nullptr, SOCK_CLOEXEC));
    REQUIRE(fd.ok());
    pump(2);
    return fd;
  }

  // What `fd` receives while the proxy runs, until `until` has come in or the rounds run out.
  std::string receive(int fd, const std::string& until = "", int rounds = 200) {
    std::string got;
    for (int i = 0; i < rounds; ++i) {
      pump(1, 5);
      got += read_available(fd);
      if (!until.empty() && got.find(until) != std::string::npos) break;
    }
    return got;
  }

  std::string connect_line() const { return "CONNECT 127.0.0.1:" + std::to_string(upstream_port) + " HTTP/1.1\r\n\r\n"; }
  std::string upstream_key() const { return "127.0.0.1:" + std::to_string(upstream_port); }
};

void send_str(int fd, const std::string& s) { REQUIRE(::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size())); }

// After a response the proxy closes the client's connection: EOF follows what it sent.
bool closed_by_peer(ProxyRig& rig, int fd) {
  for (int i = 0; i < 200; ++i) {
    rig.pump(1, 5);
    char b;
    ssize_t k = ::recv(fd, &b, 1, MSG_DONTWAIT);
    if (k == 0) return true;
    if (k < 0 && errno != EAGAIN) return true;
  }
  return false;
}

// A copy: usage_json() makes a new document each time.
std::optional<nlohmann::json> host_entry(const nlohmann::json& usage, const std::string& key) {
  for (auto& h : usage["hosts"])
    if (h["host"] == key) return h;
  return std::nullopt;
}

}  // namespace

TEST_CASE("egress proxy: an allowed CONNECT is answered 200 and relays both ways, counted per host") {
  ProxyRig rig;
  UniqueFd c = rig.client();
  send_str(c.get(), rig.connect_line());
  UniqueFd up = rig.accept_upstream();
  CHECK(rig.receive(c.get(), "\r\n\r\n") == "HTTP/1.1 200 Connection established\r\n\r\n");
  send_str(c.get(), "ping from the sandbox");
  CHECK(rig.receive(up.get(), "sandbox") == "ping from the sandbox");
  send_str(up.get(), "pong");
  CHECK(rig.receive(c.get(), "pong") == "pong");

  auto usage = rig.proxy->usage_json();
  CHECK(usage["connections"] == 1);
  CHECK(usage["denied"] == 0);
  CHECK(usage["bytes_out"] == 21);
  CHECK(usage["bytes_in"] == 4);
  CHECK(usage["peak_concurrent"] == 1);
  auto h = host_entry(usage, rig.upstream_key());
  REQUIRE(h);
  CHECK((*h)["connections"] == 1);
  CHECK((*h)["bytes_out"] == 21);
  CHECK((*h)["bytes_in"] == 4);
  CHECK(rig.proxy->violations_json().empty());
}

TEST_CASE("egress proxy: a denied destination gets 403 with its reason, one violation, one denied count") {
  ProxyRig rig;
  UniqueFd c = rig.client();
  send_str(c.get(), "CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n");
  std::string got = rig.receive(c.get(), "\n");
  got += rig.receive(c.get(), "", 5);
  CHECK(got.rfind("HTTP/1.1 403 Forbidden\r\n", 0) == 0);
  CHECK(got.find("X-Sbx-Deny-Reason: ") != std::string::npos);
  CHECK(got.find("\r\n\r\nsbx egress proxy: ") != std::string::npos);
  CHECK(closed_by_peer(rig, c.get()));

  auto v = rig.proxy->violations_json();
  REQUIRE(v.size() == 1);
  CHECK(v[0]["kind"] == "network");
  CHECK(v[0]["host"] == "127.0.0.1");
  CHECK(v[0]["port"] == 1);
  CHECK(v[0]["time_ms"] == 0);  // now_ms - start_ms
  CHECK(rig.live_violations.size() == 1);
  auto usage = rig.proxy->usage_json();
  CHECK(usage["denied"] == 1);
  CHECK(usage["connections"] == 0);
  auto h = host_entry(usage, "127.0.0.1:1");
  REQUIRE(h);
  CHECK((*h)["denied"] == 1);
  // The upstream saw nothing: a denied request opens no socket towards the world.
  struct pollfd p{rig.upstream.get(), POLLIN, 0};
  CHECK(::poll(&p, 1, 0) == 0);
}

TEST_CASE("egress proxy: garbage, a bare LF and oversized headers are refused before any upstream") {
  SUBCASE("a request line that is not HTTP: 400") {
    ProxyRig rig;
    UniqueFd c = rig.client();
    send_str(c.get(), "GARBAGE\r\n\r\n");
    CHECK(rig.receive(c.get(), "\r\n\r\n").rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
    CHECK(rig.proxy->violations_json().size() == 1);
  }
  SUBCASE("a bare LF is refused as it arrives, not after the idle timeout") {
    ProxyRig rig;
    UniqueFd c = rig.client();
    send_str(c.get(), "CONNECT a:1 HTTP/1.1\n");
    CHECK(rig.receive(c.get(), "\r\n\r\n").rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
  }
  SUBCASE("a plain-HTTP method other than an absolute URI: 400 naming it") {
    ProxyRig rig;
    UniqueFd c = rig.client();
    send_str(c.get(), "GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string got = rig.receive(c.get(), "\n", 50) + rig.receive(c.get(), "", 5);
    CHECK(got.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
    CHECK(got.find("only CONNECT and absolute http:// URIs are proxied (got 'GET /index.html')") != std::string::npos);
  }
  SUBCASE("headers past 16 KiB without an end: 431") {
    ProxyRig rig;
    UniqueFd c = rig.client();
    send_str(c.get(), "CONNECT 127.0.0.1:1 HTTP/1.1\r\n");
    std::string filler = "X-Filler: " + std::string(1000, 'a') + "\r\n";
    std::string got;
    for (int i = 0; i < 20 && got.empty(); ++i) {
      ::send(c.get(), filler.data(), filler.size(), MSG_NOSIGNAL);
      got = rig.receive(c.get(), "\r\n\r\n", 3);
    }
    got += rig.receive(c.get(), "", 5);
    CHECK(got.rfind("HTTP/1.1 431 Request Header Fields Too Large\r\n", 0) == 0);
    CHECK(got.find("request headers too large") != std::string::npos);
  }
  SUBCASE("bytes after a plain-HTTP request (pipelining): 400") {
    ProxyRig rig;
    UniqueFd c = rig.client();
    send_str(c.get(), "GET http://127.0.0.1:" + std::to_string(rig.upstream_port) + "/ HTTP/1.1\r\nHost: x\r\n\r\nGET");
    CHECK(rig.receive(c.get(), "\r\n\r\n").rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
  }
}

TEST_CASE("egress proxy: plain HTTP goes upstream in origin-form with Connection: close") {
  ProxyRig rig;
  UniqueFd c = rig.client();
  send_str(c.get(), "GET http://127.0.0.1:" + std::to_string(rig.upstream_port) +
                        "/a?b HTTP/1.1\r\nHost: 127.0.0.1\r\nProxy-Connection: keep-alive\r\n\r\n");
  UniqueFd up = rig.accept_upstream();
  std::string req = rig.receive(up.get(), "\r\n\r\n");
  CHECK(req.rfind("GET /a?b HTTP/1.1\r\n", 0) == 0);
  CHECK(req.find("Connection: close\r\n") != std::string::npos);
  CHECK(req.find("Proxy-Connection") == std::string::npos);
  send_str(up.get(), "HTTP/1.1 204 No Content\r\n\r\n");
  up.reset();
  CHECK(rig.receive(c.get(), "\r\n\r\n") == "HTTP/1.1 204 No Content\r\n\r\n");
  CHECK(closed_by_peer(rig, c.get()));
}

TEST_CASE("egress proxy: a half-close is passed on, the other direction keeps flowing") {
  ProxyRig rig;
  UniqueFd c = rig.client();
  send_str(c.get(), rig.connect_line());
  UniqueFd up = rig.accept_upstream();
  REQUIRE(rig.receive(c.get(), "\r\n\r\n").size() > 0);
  send_str(c.get(), "last words");
  REQUIRE(::shutdown(c.get(), SHUT_WR) == 0);
  CHECK(rig.receive(up.get(), "words") == "last words");
  // The upstream sees EOF, and can still answer.
  bool eof = false;
  for (int i = 0; i < 50 && !eof; ++i) {
    rig.pump(1, 5);
    char b;
    eof = ::recv(up.get(), &b, 1, MSG_DONTWAIT) == 0;
  }
  CHECK(eof);
  send_str(up.get(), "the reply after the client's EOF");
  CHECK(rig.receive(c.get(), "EOF") == "the reply after the client's EOF");
  REQUIRE(::shutdown(up.get(), SHUT_WR) == 0);
  CHECK(closed_by_peer(rig, c.get()));
}

TEST_CASE("egress proxy: a client that never reads holds bounded buffers, and the upstream is held back") {
  ProxyRig rig;
  UniqueFd c = rig.client();
  int small = 4096;
  ::setsockopt(c.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  send_str(c.get(), rig.connect_line());
  UniqueFd up = rig.accept_upstream();
  REQUIRE(rig.receive(c.get(), "\r\n\r\n").size() > 0);
  ::setsockopt(up.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  sbx::test::set_nonblocking(up.get());
  // The upstream writes as long as it can; the client reads nothing. What the upstream gets rid
  // of is bounded by the sockets' buffers and the proxy's one pipe per direction.
  std::string chunk(64 * 1024, 'x');
  std::size_t written = 0, before = 0;
  int still_rounds = 0;
  for (int round = 0; round < 400 && still_rounds < 20; ++round) {
    ssize_t k;
    while ((k = ::send(up.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL)) > 0) written += static_cast<std::size_t>(k);
    rig.pump(2, 0);
    still_rounds = written == before ? still_rounds + 1 : 0;
    before = written;
  }
  CHECK(still_rounds >= 20);         // the upstream is blocked: backpressure reached it
  CHECK(written < 64u * 1024 * 1024);  // far less than it would have sent
  // And nothing was lost: the client, reading at last, gets every byte.
  sbx::test::set_nonblocking(c.get());
  // Bounded by progress, not by a round count: a loaded machine (CI's ctest -j2 beside the
  // integration suites) moved ~220 bytes a round here, and 2000 rounds were not enough.
  std::size_t got = 0;
  for (int idle = 0; idle < 1000 && got < written;) {
    std::size_t k = rig.receive(c.get(), "", 1).size();
    got += k;
    idle = k == 0 ? idle + 1 : 0;
  }
  CHECK(got == written);
  auto h = host_entry(rig.proxy->usage_json(), rig.upstream_key());
  REQUIRE(h);
  CHECK((*h)["bytes_in"] == static_cast<std::int64_t>(written));
}

TEST_CASE("egress proxy: past max_connections a client gets 503") {
  ProxyConfig cfg;
  cfg.max_connections = 1;
  ProxyRig rig({}, cfg);
  UniqueFd first = rig.client();
  UniqueFd second = rig.client();
  std::string got = rig.receive(second.get(), "\n") + rig.receive(second.get(), "", 5);
  CHECK(got.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0) == 0);
  CHECK(got.find("too many concurrent connections (network.max_connections = 1)") != std::string::npos);
  CHECK(rig.proxy->usage_json()["peak_concurrent"] == 1);
}

TEST_CASE("egress proxy: a request never completed gets 408 at the idle timeout; a silent relay is closed") {
  ProxyConfig cfg;
  cfg.idle_timeout_ms = 500;
  ProxyRig rig({}, cfg);
  UniqueFd silent = rig.client();
  send_str(silent.get(), "CONNECT 127.0");
  UniqueFd relay = rig.client();
  send_str(relay.get(), rig.connect_line());
  UniqueFd up = rig.accept_upstream();
  REQUIRE(rig.receive(relay.get(), "\r\n\r\n").size() > 0);
  CHECK(rig.proxy->ms_until_next_expiry(rig.now_ms) == 500);
  rig.now_ms += 500;
  rig.proxy->expire_idle(rig.now_ms);
  std::string got = rig.receive(silent.get(), "\n") + rig.receive(silent.get(), "", 5);
  CHECK(got.rfind("HTTP/1.1 408 Request Timeout\r\n", 0) == 0);
  CHECK(got.find("no traffic for 500 ms (network.idle_timeout_ms)") != std::string::npos);
  CHECK(closed_by_peer(rig, relay.get()));
  auto usage = rig.proxy->usage_json();
  CHECK(usage["idle_closed"] == 2);
  auto h = host_entry(usage, rig.upstream_key());
  REQUIRE(h);
  CHECK((*h)["idle_closed"] == 1);
  CHECK(rig.proxy->violations_json().empty());  // a timeout is no policy decision
}

TEST_CASE("egress proxy: an allowed destination that refuses the connection is a 502, counted as failed") {
  std::uint16_t dead_port = 0;
  { UniqueFd gone = listen_loopback(dead_port); }  // a port nobody listens on any more
  ProxyRig rig({"127.0.0.1:" + std::to_string(dead_port)});
  UniqueFd c = rig.client();
  send_str(c.get(), "CONNECT 127.0.0.1:" + std::to_string(dead_port) + " HTTP/1.1\r\n\r\n");
  std::string got = rig.receive(c.get(), "\n") + rig.receive(c.get(), "", 5);
  CHECK(got.rfind("HTTP/1.1 502 Bad Gateway\r\n", 0) == 0);
  CHECK(got.find("cannot connect to 127.0.0.1:" + std::to_string(dead_port) + ": Connection refused") != std::string::npos);
  auto h = host_entry(rig.proxy->usage_json(), "127.0.0.1:" + std::to_string(dead_port));
  REQUIRE(h);
  CHECK((*h)["failed"] == 1);
  CHECK((*h)["connections"] == 1);
  CHECK(rig.proxy->violations_json().empty());
}
