#pragma once
// The egress proxy's request parser (proxy.hpp): a request line and headers from the sandbox,
// read strictly. Pure (no sockets), unit-tested in tests/unit/test_egress_policy.cpp.
//
// Why strict: the proxy and the upstream must agree on where a request starts and ends and what
// it says, or the sandbox can smuggle a second request past the policy (one the proxy never
// checked, e.g. for another Host behind the same allowed address). So anything two HTTP parsers
// could read differently is refused with 400 instead of being guessed at:
//   - a line ending other than CRLF (a bare LF or a bare CR), as soon as it arrives — not after
//     the idle timeout, which is what waiting for CRLFCRLF would cost;
//   - NUL or any other control byte (HTAB excepted, in header values) in the request line or a
//     header;
//   - a header line without ':', with whitespace before the ':', or folded (obs-fold);
//   - Content-Length together with Transfer-Encoding, or Content-Lengths that disagree.
// The body's framing is left to the caller (Content-Length bytes; see proxy.cpp).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/base/error.hpp"

namespace sbx {

// What the bytes received so far look like: more needed, a complete head, or refused.
struct HeadScan {
  enum class State { incomplete, complete, bad };
  State state = State::incomplete;
  std::size_t head_len = 0;  // complete: bytes up to and including the blank line
  std::string error;         // bad: what and where
};
HeadScan scan_request_head(std::string_view buf);

struct ProxyRequest {
  std::string method, target, version;
  std::vector<std::pair<std::string, std::string>> headers;  // name as sent, value trimmed
  std::optional<std::int64_t> content_length;
  bool transfer_encoding = false;
};
// `head`: a complete head as scan_request_head found it (ending in CRLFCRLF).
Result<ProxyRequest> parse_request_head(std::string_view head);

// A plain HTTP request as it goes upstream: origin-form (`path`), hop-by-hop and proxy headers
// dropped, Host set to `authority` (the URL's: the policy allowed that name, and a different Host
// header would reach another virtual host behind the same address, e.g. on a CDN), and
// Connection: close (one request per connection).
std::string origin_form(const ProxyRequest& req, const std::string& path, const std::string& authority);

}  // namespace sbx
