#pragma once
// `sbx mcp --listen ADDR`: the MCP Streamable HTTP transport at /mcp, with bearer tokens that name
// tenants (http_tokens.hpp), /healthz, /readyz and /metrics (man sbx-mcp, "Over HTTP").
//
// Why a stdio `sbx mcp` child per MCP session instead of one server for all: a child runs with
// the tenant its token names (`--tenant`), so its calls, records, sessions and pool are that
// tenant's by construction: no request routed wrongly inside one process can reach another
// tenant's. The child is the stdio server every other client uses, with its bounds and its
// cancellation; this front end only authenticates, bounds and relays. A legacy-era client's
// `initialize` makes a session (Mcp-Session-Id, usable only with the token that made it); a
// modern-era request (2026-07-28, stateless) goes to its token's stateless child.
//
// The loop: one thread, Boost.Beast on Boost.Asio, every read and write asynchronous with a
// deadline, so a slow or hostile client holds a connection slot (bounded) and never the loop.
// Chosen over libmicrohttpd (TLS only through GnuTLS, whose static build lacks p11-kit here) and
// cpp-httplib (Debian ships it as a shared library, one thread per connection); TLS is OpenSSL's,
// whose static libssl and libcrypto sbx links already.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/server/http_tokens.hpp"

namespace sbx::mcp {

struct HttpConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (said on stderr)
  TokenTable tokens;
  bool no_auth = false;        // --no-auth: loopback only; every call runs as `no_auth_tenant`
  std::string no_auth_tenant;  // "" : untenanted
  // The stdio server a session runs: `sbx [--state-dir D] mcp ...` less its tenant, which is added.
  std::vector<std::string> child_argv;
  std::string state_dir;          // what /readyz checks is writable
  std::string tls_cert, tls_key;  // PEM files: TLS (1.2 or later) on every connection; "" : plain HTTP
  std::size_t max_connections = 256;
  std::size_t max_body_bytes = 4u << 20;
  std::size_t max_sessions = 64;  // MCP sessions open at once, all tenants
  std::size_t max_sessions_per_tenant = 16;
  std::size_t max_calls_per_tenant = 8;  // tools/call requests in flight per tenant
  // The profile's output limit per stream (mcp_server.hpp's ServerConfig::stream_limit_bytes):
  // what sizes the longest line a session's server may write, as it sizes its workers' responses.
  std::int64_t stream_limit_bytes = 64LL << 20;
  int header_timeout_ms = 10000;  // the request line and headers (slowloris)
  int body_timeout_ms = 30000;
  int idle_timeout_ms = 60000;  // between requests on a kept-alive connection
  int write_timeout_ms = 30000;
  int session_idle_ms = 30 * 60 * 1000;      // an MCP session unused this long is closed
  int grace_ms = 30000;                      // at SIGTERM: how long children get to record their calls
  std::vector<std::string> allowed_origins;  // besides the Host header's own and loopback names
  // /readyz's check that a sandbox can be built here with the server's profile: "" when it can,
  // else why. Run at start in a forked helper (it forks throwaway runs and waits for them: never on
  // the loop), and again after 5 s, doubling to a minute, while it fails; /readyz answers 503
  // until it has passed. Unset: no check.
  std::function<std::string()> ready_check;
};

// Whether `host` (an address as --listen gives it) is a loopback address.
bool is_loopback_host(const std::string& host);

// "HOST:PORT" or ":PORT" or "PORT" into cfg.host and cfg.port; false (with `why`) when it is not that.
bool parse_listen_address(const std::string& text, HttpConfig& cfg, std::string& why);

// Whether a browser's Origin may call: absent, a loopback origin, the Host header's own, or listed.
bool origin_allowed(const std::string& origin, const std::string& host_header, const std::vector<std::string>& allowed);

// Serves until SIGINT/SIGTERM/SIGHUP (blocked by the caller), then stops accepting, ends every
// session's child (each cancels and records its calls) within grace_ms, and returns 0; 125 when
// it cannot listen.
int serve_http(const HttpConfig& cfg);

}  // namespace sbx::mcp
