// The egress proxy's request-head parser (runtime/proxy.cpp, parse_request_head), which the proxy
// runs on what a sandboxed client sends and tests/fuzz/fuzz_proxy_request.cpp fuzzes.
#include <doctest/doctest.h>

#include "runtime/proxy.hpp"

using sbx::parse_request_head;

TEST_CASE("proxy request head: CONNECT keeps the authority, sends nothing upstream") {
  auto r = parse_request_head("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
  REQUIRE(r.ok());
  CHECK(r->is_connect);
  CHECK(r->authority == "example.com:443");
  CHECK_FALSE(r->default_port);
  CHECK(r->upstream_head.empty());
}

TEST_CASE("proxy request head: an absolute URI becomes origin-form with the allowed Host") {
  auto r = parse_request_head(
      "GET http://Example.com/a/b?c HTTP/1.1\r\nHost: evil.example\r\nProxy-Connection: keep-alive\r\n"
      "Proxy-Authorization: Basic eA==\r\nAccept: */*\r\n\r\n");
  REQUIRE(r.ok());
  CHECK_FALSE(r->is_connect);
  CHECK(r->authority == "Example.com");
  CHECK(r->default_port == 80);
  CHECK(r->upstream_head == "GET /a/b?c HTTP/1.1\r\nHost: Example.com\r\nAccept: */*\r\nConnection: close\r\n\r\n");
}

TEST_CASE("proxy request head: what the proxy refuses, and why") {
  CHECK(parse_request_head("GET\r\n\r\n").error().message == "malformed request line");
  CHECK(parse_request_head("GET http://user:pw@example.com/ HTTP/1.1\r\n\r\n").error().message ==
        "credentials in the URL are not supported");
  CHECK(parse_request_head("GET /local HTTP/1.1\r\n\r\n").error().message.starts_with("only CONNECT and absolute http://"));
  CHECK_FALSE(parse_request_head("CONNECT example.com:443 HTTP/1.1\r\n").ok());  // no blank line yet
}
