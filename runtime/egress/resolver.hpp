#pragma once
// Asynchronous name resolution for the egress proxy (proxy.hpp), driven by the supervisor's poll
// loop: the supervisor never blocks, so a resolver that never answers cannot hold up the wall-time
// limit, signal forwarding or the other connections (getaddrinfo(3) would, for up to resolv.conf's
// timeout x attempts per name).
//
// c-ares does the work: it reads the host's /etc/resolv.conf (servers, search, options) and
// /etc/hosts (the "files" source first, as nsswitch.conf's "hosts: files dns" says) when the
// channel is made — before the run starts — and then only sends and receives on its own
// non-blocking sockets, which the poll loop watches here. Answers are collected, not acted on, in
// c-ares' callback: the owner takes them after each round (take_answers), outside c-ares' stack.
//
// Bounded: at most `max_in_flight` lookups at once (the caller queues the rest), and each lookup
// is given up by its owner after its own deadline (the proxy's lookup timeout); c-ares' own
// per-try timeout and tries are set so that an abandoned query leaves c-ares at 1.5 x that
// deadline (never before it: the owner's deadline decides, the same way every time).
#include <poll.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

struct ares_channeldata;
struct ares_addrinfo;

namespace sbx {

class Resolver {
 public:
  struct Answer {
    std::uint64_t id = 0;
    bool ok = false;
    bool timed_out = false;  // when !ok: no server answered in time
    std::string error;       // when !ok: c-ares' message
    std::vector<struct sockaddr_storage> addrs;
    std::vector<socklen_t> addr_lens;
  };

  // `timeout_ms`: the time a caller gives one lookup (c-ares' tries are fitted into it).
  // `servers` ("ip:port,..."): instead of resolv.conf's name servers (tests only).
  Resolver(std::size_t max_in_flight, std::int64_t timeout_ms, const std::string& servers = "");
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // Empty when the channel is usable; otherwise why not (every lookup then fails with it).
  const std::string& init_error() const { return init_error_; }
  bool can_start() const { return init_error_.empty() && in_flight_ < max_in_flight_; }
  std::size_t in_flight() const { return in_flight_; }
  // Starts a lookup of `host` (A and AAAA, /etc/hosts first) for TCP port `port`; returns its id.
  // Only when can_start().
  std::uint64_t start(const std::string& host, std::uint16_t port);

  // The poll loop's side: append c-ares' sockets, then hand back the same slice (and call it on
  // every wake-up, also with n == 0: c-ares' retransmissions and timeouts are driven from here).
  void add_pollfds(std::vector<struct pollfd>& p);
  void on_events(const struct pollfd* p, std::size_t n);
  // How long the loop may sleep before c-ares needs on_events for a timeout (-1: nothing pending).
  std::int64_t ms_until_timeout() const;
  std::vector<Answer> take_answers();

  // Ends every lookup now (their answers are dropped); the channel is unusable afterwards.
  void shutdown();

 private:
  static void on_answer(void* arg, int status, int timeouts, struct ares_addrinfo* res);

  ares_channeldata* ch_ = nullptr;
  std::string init_error_;
  std::size_t max_in_flight_;
  std::size_t in_flight_ = 0;
  std::uint64_t next_id_ = 1;
  std::vector<Answer> answers_;
  bool shutting_down_ = false;
};

}  // namespace sbx
