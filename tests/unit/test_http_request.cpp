#include <doctest/doctest.h>

#include "runtime/egress/http_request.hpp"

using namespace sbx;

namespace {
HeadScan::State scan(std::string_view s) { return scan_request_head(s).state; }
}  // namespace

TEST_CASE("proxy request: the head ends at the first CRLFCRLF, arriving in pieces") {
  std::string req = "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\nBODY";
  CHECK(scan(req.substr(0, 10)) == HeadScan::State::incomplete);
  CHECK(scan(req.substr(0, 28)) == HeadScan::State::incomplete);  // ends on a CR: its LF may follow
  auto s = scan_request_head(req);
  CHECK(s.state == HeadScan::State::complete);
  CHECK(s.head_len == req.size() - 4);
}

TEST_CASE("proxy request: bare LF, bare CR and control bytes are refused as soon as they arrive") {
  auto s = scan_request_head("GET http://a.test/ HTTP/1.1\nHost: a");
  CHECK(s.state == HeadScan::State::bad);
  CHECK(s.error == "bare LF in request line 1 (lines end with CRLF)");
  CHECK(scan("GET http://a.test/ HTTP/1.1\r\nHost: a\n\n") == HeadScan::State::bad);
  CHECK(scan("GET http://a.test/ HTTP/1.1\r\nX: a\rb\r\n") == HeadScan::State::bad);
  CHECK(scan(std::string_view("CONNECT a.test\0.evil:443 HTTP/1.1\r\n", 35)) == HeadScan::State::bad);
  CHECK(scan("GET http://a.test/ HTTP/1.1\r\nX: a\x01z\r\n") == HeadScan::State::bad);
  CHECK(scan("GET http://a.test/ HTTP/1.1\r\nX: a\x7fz\r\n") == HeadScan::State::bad);
  CHECK(scan("GET http://a.test/ HTTP/1.1\r\nX: a\tz\r\n\r\n") == HeadScan::State::complete);
  CHECK(scan("\r\nGET / HTTP/1.1\r\n\r\n") == HeadScan::State::bad);
  // After the head, the body is the upstream's business.
  CHECK(scan(std::string_view("GET http://a.test/ HTTP/1.1\r\n\r\n\0\n", 33)) == HeadScan::State::complete);
}

TEST_CASE("proxy request: request line and headers") {
  auto r = parse_request_head("GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\nX-A:  v v \r\nContent-Length: 3\r\n\r\n");
  REQUIRE(r.ok());
  CHECK(r->method == "GET");
  CHECK(r->target == "http://a.test/x");
  CHECK(r->version == "HTTP/1.1");
  REQUIRE(r->headers.size() == 3);
  CHECK(r->headers[1].second == "v v");
  CHECK(r->content_length == 3);
  CHECK_FALSE(r->transfer_encoding);
  CHECK_FALSE(parse_request_head("GET http://a.test/ HTTP/1.1\r\nNoColonHere\r\n\r\n").ok());
  CHECK(parse_request_head("GET http://a.test/ HTTP/1.1\r\nNoColonHere\r\n\r\n").error().message ==
        "header line without ':' in request line 2");
  CHECK_FALSE(parse_request_head("GET http://a.test/ HTTP/1.1\r\nX : y\r\n\r\n").ok());
  CHECK_FALSE(parse_request_head("GET http://a.test/ HTTP/1.1\r\nX: y\r\n z\r\n\r\n").ok());
  CHECK_FALSE(parse_request_head("GET http://a.test/ HTTP/2\r\n\r\n").ok());
  CHECK_FALSE(parse_request_head("GET  HTTP/1.1\r\n\r\n").ok());
  CHECK_FALSE(parse_request_head("G(T http://a.test/ HTTP/1.1\r\n\r\n").ok());
}

TEST_CASE("proxy request: framing that two parsers could read differently is refused") {
  auto both = parse_request_head("POST http://a.test/ HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n");
  REQUIRE_FALSE(both.ok());
  CHECK(both.error().message == "both Content-Length and Transfer-Encoding (ambiguous framing)");
  CHECK_FALSE(parse_request_head("POST http://a.test/ HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n").ok());
  CHECK(parse_request_head("POST http://a.test/ HTTP/1.1\r\nContent-Length: 4\r\ncontent-length: 4\r\n\r\n").ok());
  CHECK_FALSE(parse_request_head("POST http://a.test/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n").ok());
  CHECK_FALSE(parse_request_head("POST http://a.test/ HTTP/1.1\r\nContent-Length: 1,1\r\n\r\n").ok());
  auto te = parse_request_head("POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  REQUIRE(te.ok());
  CHECK(te->transfer_encoding);
}
