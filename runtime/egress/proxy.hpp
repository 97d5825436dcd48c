#pragma once
// The egress proxy: a filtering HTTP proxy served by the supervisor's poll loop, outside the
// sandbox, reachable inside at 127.0.0.1:kProxyPort (spec.hpp).
//
// How the listening socket gets into the sandbox's network namespace: sbx's init (child.cpp)
// creates it after bringing lo up — so it is bound in the sandbox's netns, on the sandbox's
// loopback — and sends it to the supervisor over a SOCK_SEQPACKET socketpair made before clone
// (SCM_RIGHTS), then closes its own copy *before* forking the program. Race-free: the socket is
// listening before the program exists, connections queue in its backlog until the supervisor has
// received the fd, and the program never holds the listener. No thread, no setns (which a
// rootless supervisor could not do: it lacks CAP_SYS_ADMIN in its own user namespace), no process
// inside the sandbox serving it. Every socket the proxy opens towards the world is opened by the
// supervisor, in the host's network namespace, and only after the policy allowed it.
//
// Requests: `CONNECT host:port` (TLS and anything else, relayed as bytes) and absolute-URI plain
// HTTP (`GET http://host[:port]/path`, forwarded as origin-form with `Connection: close`, one
// request per connection so that a keep-alive connection cannot switch hosts: exactly the
// Content-Length body bytes are passed on, nothing after them). Requests are parsed strictly
// (http_request.hpp). A name's resolved addresses are checked again at connect time
// (egress_policy.hpp, check_resolved): internal addresses need an explicit address rule. Denied requests get
// `403 Forbidden` with the reason in the body and an `X-Sbx-Deny-Reason` header, and are recorded.
//
// Names are resolved by the proxy with c-ares on the same poll loop (resolver.hpp): a resolver
// that never answers holds up only the connections waiting for it, never the supervisor. At most
// kMaxLookups lookups are in flight (the other connections wait their turn in state resolving);
// each connection gives its lookup min(5 s, network.idle_timeout_ms), then answers 504 and counts
// it (usage: failed, lookups_timed_out). Only names the policy allowed are ever looked up;
// literals need no lookup.
//
// Relaying: non-blocking sockets, one 64 KiB buffer per direction with backpressure (a side is
// read only while the buffer towards the other side has room), half-close passed on with
// shutdown(SHUT_WR). Limits: concurrent connections (503 past it), total bytes per run (every
// relay is closed when it is reached) and an idle timeout per connection (network.idle_timeout_ms).
#include <poll.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/egress/egress_policy.hpp"
#include "runtime/egress/resolver.hpp"
#include "runtime/base/fsutil.hpp"

namespace sbx {

struct ProxyConfig {
  std::vector<AllowRule> rules;
  std::int64_t max_connections = 64;
  std::optional<std::int64_t> max_bytes;
  std::int64_t idle_timeout_ms = 60000;  // a connection with no traffic for this long is closed
  std::int64_t start_ms = 0;             // CLOCK_MONOTONIC ms of the run's start (violations' time_ms)
  // Called for every denied attempt, listed in the record or not (live events: events.hpp).
  std::function<void(const nlohmann::json&)> on_violation;
};

struct HostUsage {
  std::int64_t connections = 0;  // allowed and attempted
  std::int64_t denied = 0;
  std::int64_t failed = 0;             // allowed but the upstream could not be reached
  std::int64_t idle_closed = 0;        // closed by the idle timeout
  std::int64_t lookups_timed_out = 0;  // the name did not resolve within the lookup timeout
  std::int64_t bytes_in = 0;           // upstream -> sandbox
  std::int64_t bytes_out = 0;          // sandbox -> upstream
  std::string last_failure;            // why the latest failed connection failed (the 502/504 text)
};

class EgressProxy {
 public:
  // Destinations ("host:port") with their own usage entry. A program chooses how many distinct
  // names it asks for (each denied one used to add an entry: 78 MB of record): past this many,
  // what the others do is added up in one entry, and the record counts and flags it
  // (usage.network.hosts_summary). Bounds the table in memory and in the record.
  static constexpr std::size_t kMaxListedHosts = 1000;

  // `handoff_sock`: the supervisor's end of the socketpair on which init sends the listener.
  EgressProxy(ProxyConfig cfg, int handoff_sock);
  ~EgressProxy();
  EgressProxy(const EgressProxy&) = delete;
  EgressProxy& operator=(const EgressProxy&) = delete;

  // The poll loop's side: append this proxy's descriptors, then hand back the same slice.
  void add_pollfds(std::vector<struct pollfd>& p);
  void on_events(const struct pollfd* p, std::size_t n, std::int64_t now_ms);
  // Closes the listener and every connection (the run has ended).
  void close_all();
  // Idle connections: how long the poll loop may sleep before the next one expires (-1: none),
  // and closing those that have (a request never completed gets 408; a silent relay or a connect
  // that never finishes is closed). Without it a client that connects and stays silent would
  // hold a connection slot for the whole run.
  std::int64_t ms_until_next_expiry(std::int64_t now_ms) const;
  void expire_idle(std::int64_t now_ms);

  bool listener_received() const { return listen_fd_.ok() || got_listener_; }
  nlohmann::json usage_json() const;
  nlohmann::json violations_json() const;

  struct Conn;

 private:
  void accept_new(std::int64_t now_ms);
  void handle_request(Conn& c, std::size_t head_len, std::int64_t now_ms);
  void deny(Conn& c, int code, const std::string& status, const std::string& host, int port, const std::string& reason,
            std::int64_t now_ms);
  void start_lookups(std::int64_t now_ms);
  void on_answers(std::int64_t now_ms);
  void lookup_timed_out(Conn& c, std::int64_t now_ms);
  void fail(Conn& c, int code, const std::string& status, const std::string& reason);
  bool address_allowed(Conn& c, const struct sockaddr_storage& ss, std::int64_t now_ms);
  void start_connect(Conn& c, std::int64_t now_ms);
  void on_connected(Conn& c, std::int64_t now_ms);
  void relay(Conn& c, short crev, short urev, std::int64_t now_ms);
  void close_conn(Conn& c);
  void record_violation(const std::string& host, int port, const std::string& reason, std::int64_t now_ms,
                        const std::string& address = "");
  bool budget_left() const;
  // The usage entry of a destination: its own, or the shared one of those past kMaxListedHosts.
  HostUsage& usage_of(const std::string& key);
  void note_destination(const std::string& key);

  ProxyConfig cfg_;
  UniqueFd handoff_;    // init sends the listener on it, then it is closed
  UniqueFd listen_fd_;  // the listening socket init sent on handoff_
  bool got_listener_ = false;
  bool handoff_polled_ = false, listen_polled_ = false;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<Conn*> polled_;  // owner of each pollfd pair handed out by add_pollfds
  Resolver resolver_;
  std::int64_t lookup_timeout_ms_;
  std::size_t resolver_polled_ = 0;         // c-ares' sockets in the slice, after the listener
  std::map<std::string, HostUsage> usage_;  // at most kMaxListedHosts entries
  HostUsage unlisted_;                      // every destination past them, added up
  std::int64_t unlisted_requests_ = 0;      // requests to those destinations
  nlohmann::json violations_ = nlohmann::json::array();
  std::int64_t dropped_violations_ = 0;
  std::int64_t total_bytes_ = 0;
  std::int64_t peak_concurrent_ = 0;
  std::int64_t idle_closed_ = 0;
  std::int64_t lookups_timed_out_ = 0;
  bool bytes_exhausted_ = false;
};

}  // namespace sbx
