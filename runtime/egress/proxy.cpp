#include "runtime/egress/proxy.hpp"

#include "runtime/base/fdpass.hpp"
#include "runtime/base/trace_field.hpp"
#include "runtime/egress/http_request.hpp"
#include "runtime/base/strings.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace sbx {
namespace {

constexpr std::size_t kBuf = 64 * 1024;        // per direction
constexpr std::size_t kMaxHeader = 16 * 1024;  // request line + headers
constexpr std::size_t kMaxViolations = 1000;   // recorded one by one; the rest only counted
constexpr std::size_t kMaxLookups = 16;        // name lookups in flight at once (resolver.hpp)
constexpr std::int64_t kMaxLookupMs = 5000;    // one lookup's time, unless the idle timeout is shorter

struct Buffer {
  std::unique_ptr<char[]> data{new char[kBuf]};
  std::size_t off = 0, len = 0;
  std::size_t room() const { return kBuf - off - len; }
  char* tail() { return data.get() + off + len; }
  void compact() {
    if (len == 0) off = 0;
    else if (off > 0 && room() < kBuf / 4) {  // move the data to the front once the tail gets short
      std::memmove(data.get(), data.get() + off, len);
      off = 0;
    }
  }
  bool append(const std::string& s) {
    compact();
    if (s.size() > room()) return false;
    std::memcpy(tail(), s.data(), s.size());
    len += s.size();
    return true;
  }
  void consume(std::size_t n) {
    off += n;
    len -= n;
    if (len == 0) off = 0;
  }
};

// One direction of a relay in the kernel: splice(2) moves pages socket -> pipe -> socket, so the
// bytes are never copied through the supervisor. The pipe is the bounded buffer (256 KiB asked,
// 64 KiB if the kernel refuses); a full pipe stops reading from the source: backpressure.
struct SplicePipe {
  UniqueFd r, w;
  std::size_t in = 0, cap = 0;
  bool open() {
    int fds[2];
    if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return false;
    r.reset(fds[0]);
    w.reset(fds[1]);
    int sz = ::fcntl(w.get(), F_SETPIPE_SZ, 256 * 1024);
    cap = sz > 0 ? static_cast<std::size_t>(sz) : 65536;
    return true;
  }
  void close() {
    r.reset();
    w.reset();
  }
  bool full() const { return r.ok() ? in >= cap : false; }
};

std::string response(int code, const std::string& status, const std::string& reason) {
  std::string body = "sbx egress proxy: " + reason + "\n";
  std::string clean = reason;
  for (auto& c : clean)
    if (c == '\r' || c == '\n') c = ' ';
  return "HTTP/1.1 " + std::to_string(code) + " " + status +
         "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nX-Sbx-Deny-Reason: " + clean + "\r\nConnection: close\r\n\r\n" + body;
}

// The socket address of a literal destination; returns its length.
socklen_t sockaddr_of(const EgressTarget& t, struct sockaddr_storage& ss) {
  ss = {};
  if (t.v6) {
    auto* s6 = reinterpret_cast<struct sockaddr_in6*>(&ss);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(t.port);
    std::memcpy(&s6->sin6_addr, t.addr.data(), 16);
    return sizeof *s6;
  }
  auto* s4 = reinterpret_cast<struct sockaddr_in*>(&ss);
  s4->sin_family = AF_INET;
  s4->sin_port = htons(t.port);
  std::memcpy(&s4->sin_addr, t.addr.data(), 4);
  return sizeof *s4;
}

}  // namespace

struct EgressProxy::Conn {
  enum class State { request, resolving, connecting, relay, responding, closed };
  State state = State::request;
  UniqueFd cfd, ufd;    // the client's connection (accepted on the listener), the upstream's
  std::string head;     // request bytes until the end of the headers
  Buffer c2u, u2c;      // bytes the proxy itself produced or already read (headers, 200, 403)
  SplicePipe c2p, u2p;  // then the bulk of the relay, socket -> pipe -> socket without a copy
  bool c_eof = false, u_eof = false, u_shut = false, c_shut = false;
  std::string key;   // "host:port" of the destination, once known
  std::string host;  // the destination's name or literal, once known
  std::uint16_t port = 0;
  EgressTarget target;                  // once the request was parsed
  std::int64_t body_left = -1;          // plain HTTP: request body bytes still to pass on; -1: a tunnel
  std::string refused;                  // why the last resolved address was refused (check_resolved)
  std::uint64_t lookup_id = 0;          // resolving: 0 until a lookup slot was free
  std::int64_t lookup_deadline_ms = 0;  // resolving: 504 after this (queued time included)
  bool is_connect = false;
  std::vector<struct sockaddr_storage> addrs;
  std::vector<socklen_t> addr_lens;
  std::size_t next_addr = 0;
  std::string connect_error;
  std::int64_t last_active_ms = 0;  // accept, and every wake-up with an event on either side
};

EgressProxy::EgressProxy(ProxyConfig cfg, int handoff_sock)
    : cfg_(std::move(cfg)),
      handoff_(handoff_sock),
      resolver_(kMaxLookups, std::min(kMaxLookupMs, cfg_.idle_timeout_ms)),
      lookup_timeout_ms_(std::min(kMaxLookupMs, cfg_.idle_timeout_ms)) {}

EgressProxy::~EgressProxy() { close_all(); }

void EgressProxy::close_all() {
  for (auto& c : conns_) close_conn(*c);
  conns_.clear();
  resolver_.shutdown();
  listen_fd_.reset();
  handoff_.reset();
}

HostUsage& EgressProxy::usage_of(const std::string& key) {
  if (auto it = usage_.find(key); it != usage_.end()) return it->second;
  return unlisted_;
}

// A request's destination is known: it gets its entry while there is room for one.
void EgressProxy::note_destination(const std::string& key) {
  if (usage_.count(key)) return;
  if (usage_.size() < kMaxListedHosts) usage_.emplace(key, HostUsage{});
  else ++unlisted_requests_;
}

bool EgressProxy::budget_left() const { return !cfg_.max_bytes || total_bytes_ < *cfg_.max_bytes; }

void EgressProxy::record_violation(const std::string& host, int port, const std::string& reason, std::int64_t now_ms,
                                   const std::string& address) {
  spdlog::info("egress denied: {}:{}: {}", host, port, reason);
  nlohmann::json v = trace_object({{"violations/[]/kind", "network"},
                                   {"violations/[]/host", host},
                                   {"violations/[]/port", port},
                                   {"violations/[]/time_ms", now_ms - cfg_.start_ms},
                                   {"violations/[]/reason", reason}});
  if (!address.empty()) put(v, "violations/[]/address", address);
  if (cfg_.on_violation) cfg_.on_violation(v);
  if (violations_.size() >= kMaxViolations) {
    ++dropped_violations_;
    return;
  }
  violations_.push_back(std::move(v));
}

void EgressProxy::add_pollfds(std::vector<struct pollfd>& p) {
  polled_.clear();
  handoff_polled_ = handoff_.ok();
  listen_polled_ = listen_fd_.ok();
  auto add = [&](int fd, short ev, Conn* owner) {
    p.push_back({ev ? fd : -1, ev, 0});  // no interest: fd -1, so a hang-up cannot make poll spin
    polled_.push_back(owner);
  };
  if (handoff_.ok()) add(handoff_.get(), POLLIN, nullptr);
  if (listen_fd_.ok()) add(listen_fd_.get(), POLLIN, nullptr);
  std::size_t before = p.size();
  resolver_.add_pollfds(p);
  resolver_polled_ = p.size() - before;
  polled_.resize(polled_.size() + resolver_polled_, nullptr);  // the slices below stay in line
  for (auto& cp : conns_) {
    Conn& c = *cp;
    short ce = 0, ue = 0;
    switch (c.state) {
      case Conn::State::request: ce = POLLIN; break;
      case Conn::State::resolving: break;  // the client's next bytes wait in the kernel meanwhile
      case Conn::State::connecting: ue = POLLOUT; break;
      case Conn::State::responding: ce = c.u2c.len ? POLLOUT : 0; break;
      case Conn::State::relay:
        if (!c.c_eof && c.body_left != 0 && (c.c2p.r.ok() ? !c.c2p.full() : c.c2u.len < kBuf)) ce |= POLLIN;
        if (c.u2c.len || c.u2p.in) ce |= POLLOUT;
        if (!c.u_eof && (c.u2p.r.ok() ? !c.u2p.full() : c.u2c.len < kBuf)) ue |= POLLIN;
        if (c.c2u.len || c.c2p.in) ue |= POLLOUT;
        break;
      case Conn::State::closed: break;
    }
    add(c.cfd.get(), ce, &c);
    add(c.ufd.get(), ue, &c);
  }
}

void EgressProxy::on_events(const struct pollfd* p, std::size_t n, std::int64_t now_ms) {
  std::size_t i = 0;
  if (handoff_polled_ && i < n) {
    if (p[i].revents) {
      // The listener arrives as one message with one SCM_RIGHTS fd; EOF without it means init
      // failed before it could send (init reports that failure itself).
      int fd;
      ssize_t k = recv_fd(handoff_.get(), &fd);
      if (k > 0 && fd >= 0) {
        listen_fd_.reset(fd);
        ::fcntl(listen_fd_.get(), F_SETFL, ::fcntl(listen_fd_.get(), F_GETFL) | O_NONBLOCK);
        got_listener_ = true;
      }
      if (k > 0 || k == 0 || (errno != EAGAIN && errno != EINTR)) handoff_.reset();
    }
    ++i;
  }
  if (listen_polled_ && i < n) {
    bool ready = p[i].revents & POLLIN;
    ++i;
    if (ready) accept_new(now_ms);  // appends to conns_: the slices below still line up
  }
  std::size_t nres = std::min(resolver_polled_, n - i);
  resolver_.on_events(p + i, nres);  // also with nres == 0: c-ares' timeouts
  i += nres;
  on_answers(now_ms);
  for (; i + 1 < n; i += 2) {
    Conn* c = polled_[i];
    if (!c || c->state == Conn::State::closed) continue;
    short cr = p[i].revents, ur = p[i + 1].revents;
    if (!cr && !ur) continue;
    c->last_active_ms = now_ms;
    switch (c->state) {
      case Conn::State::request: {
        char buf[4096];
        ssize_t k = ::read(c->cfd.get(), buf, sizeof buf);
        if (k < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (k <= 0) {
          close_conn(*c);
          break;
        }
        c->head.append(buf, static_cast<std::size_t>(k));
        // Checked as the bytes arrive: a bare LF or a control byte is refused now, not after
        // the idle timeout (http_request.hpp).
        HeadScan scan = scan_request_head(c->head);
        if (scan.state == HeadScan::State::complete) handle_request(*c, scan.head_len, now_ms);
        else if (scan.state == HeadScan::State::bad) deny(*c, 400, "Bad Request", "", 0, scan.error, now_ms);
        else if (c->head.size() > kMaxHeader)
          deny(*c, 431, "Request Header Fields Too Large", "", 0, "request headers too large", now_ms);
        break;
      }
      case Conn::State::resolving: break;
      case Conn::State::connecting: on_connected(*c, now_ms); break;
      case Conn::State::responding: {
        if (cr & (POLLERR | POLLHUP)) {
          close_conn(*c);
          break;
        }
        ssize_t w = ::send(c->cfd.get(), c->u2c.data.get() + c->u2c.off, c->u2c.len, MSG_NOSIGNAL);
        if (w > 0) c->u2c.consume(static_cast<std::size_t>(w));
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || c->u2c.len == 0) close_conn(*c);
        break;
      }
      case Conn::State::relay: relay(*c, cr, ur, now_ms); break;
      case Conn::State::closed: break;
    }
  }
  start_lookups(now_ms);
  std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->state == Conn::State::closed; });
}

void EgressProxy::accept_new(std::int64_t now_ms) {
  for (int k = 0; k < 64; ++k) {  // bounded per wake-up, so one busy client cannot starve the loop
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    auto c = std::make_unique<Conn>();
    c->cfd.reset(fd);
    c->last_active_ms = now_ms;
    if (static_cast<std::int64_t>(conns_.size()) >= cfg_.max_connections) {
      conns_.push_back(std::move(c));
      deny(*conns_.back(), 503, "Service Unavailable", "", 0,
           "too many concurrent connections (network.max_connections = " + std::to_string(cfg_.max_connections) + ")",
           now_ms);
      continue;
    }
    conns_.push_back(std::move(c));
    peak_concurrent_ = std::max<std::int64_t>(peak_concurrent_, static_cast<std::int64_t>(conns_.size()));
  }
}

void EgressProxy::deny(Conn& c, int code, const std::string& status, const std::string& host, int port,
                       const std::string& reason, std::int64_t now_ms) {
  record_violation(host, port, reason, now_ms);
  if (!c.key.empty()) usage_of(c.key).denied++;
  c.ufd.reset();
  c.u2c = Buffer{};
  c.u2c.append(response(code, status, reason));
  c.state = Conn::State::responding;
}

void EgressProxy::handle_request(Conn& c, std::size_t head_len, std::int64_t now_ms) {
  auto req = parse_request_head(std::string_view(c.head).substr(0, head_len));
  if (!req) return deny(c, 400, "Bad Request", "", 0, req.error().message, now_ms);
  std::string rest = c.head.substr(head_len);
  const std::string &method = req->method, &target = req->target;
  std::string authority, path;
  std::optional<std::uint16_t> default_port;
  if (method == "CONNECT") {
    c.is_connect = true;
    authority = target;
  } else if (ascii_lower(target.substr(0, 7)) == "http://") {
    auto slash = target.find('/', 7);
    authority = target.substr(7, slash == std::string::npos ? std::string::npos : slash - 7);
    path = slash == std::string::npos ? "/" : target.substr(slash);
    if (authority.find('@') != std::string::npos)
      return deny(c, 400, "Bad Request", "", 0, "credentials in the URL are not supported", now_ms);
    default_port = 80;
    // One request per connection, framed by Content-Length alone: the proxy passes on exactly
    // that many body bytes and nothing after them, so a second, pipelined request (with another
    // Host) never reaches the upstream. A chunked body would need the proxy to parse chunks to
    // find its end: refused instead.
    if (req->transfer_encoding)
      return deny(
          c, 501, "Not Implemented", "", 0,
          "Transfer-Encoding is not supported for plain HTTP through the proxy (send Content-Length, or use CONNECT)",
          now_ms);
    std::int64_t body = req->content_length.value_or(0);
    if (static_cast<std::int64_t>(rest.size()) > body)
      return deny(c, 400, "Bad Request", "", 0,
                  "bytes after the request (pipelining is not supported: one request per connection)", now_ms);
    c.body_left = body - static_cast<std::int64_t>(rest.size());
  } else {
    return deny(
        c, 400, "Bad Request", "", 0,
        "only CONNECT and absolute http:// URIs are proxied (got '" + method + " " + target.substr(0, 100) + "')",
        now_ms);
  }
  auto t = parse_authority(authority, default_port);
  if (!t) return deny(c, 400, "Bad Request", authority.substr(0, 255), 0, t.error().message, now_ms);
  c.key = target_key(*t);
  note_destination(c.key);
  if (bytes_exhausted_ || !budget_left())
    return deny(c, 403, "Forbidden", t->host, t->port,
                "byte budget of this run spent (network.max_bytes = " + std::to_string(*cfg_.max_bytes) + ")", now_ms);
  auto d = check_egress(cfg_.rules, *t);
  if (!d.allowed) return deny(c, 403, "Forbidden", t->host, t->port, d.reason, now_ms);
  usage_of(c.key).connections++;
  spdlog::info("egress allowed: {} ({})", c.key, cfg_.rules[static_cast<std::size_t>(d.rule)].text);

  // What goes upstream first: nothing for CONNECT (the client's bytes follow our 200), the
  // request rewritten to origin-form for plain HTTP.
  if (!c.is_connect) {
    std::string out = origin_form(*req, path, authority);
    c.c2u.append(out);
    usage_of(c.key).bytes_out += static_cast<std::int64_t>(out.size());  // the client's header was
    total_bytes_ += static_cast<std::int64_t>(out.size());               // not counted as it arrived
  }
  usage_of(c.key).bytes_out += static_cast<std::int64_t>(rest.size());
  total_bytes_ += static_cast<std::int64_t>(rest.size());
  if (!rest.empty() && !c.c2u.append(rest))
    return deny(c, 400, "Bad Request", t->host, t->port, "request too large", now_ms);
  c.head.clear();
  c.host = t->host;
  c.port = t->port;
  c.target = *t;
  // Destination addresses: literals directly, allowed names through the resolver (on_answers).
  if (!t->is_address) {
    c.state = Conn::State::resolving;
    c.lookup_deadline_ms = now_ms + lookup_timeout_ms_;
    return start_lookups(now_ms);
  }
  struct sockaddr_storage ss = {};
  c.addr_lens.push_back(sockaddr_of(*t, ss));
  c.addrs.push_back(ss);
  start_connect(c, now_ms);
}

// Connections waiting for a lookup slot get one in the order they came (conns_ keeps it).
void EgressProxy::start_lookups(std::int64_t now_ms) {
  for (auto& cp : conns_) {
    Conn& c = *cp;
    if (c.state != Conn::State::resolving || c.lookup_id != 0) continue;
    if (!resolver_.init_error().empty()) {
      fail(c, 502, "Bad Gateway", "cannot resolve " + c.host + ": " + resolver_.init_error());
      continue;
    }
    if (!resolver_.can_start()) break;
    c.lookup_id = resolver_.start(c.host, c.port);
  }
  on_answers(now_ms);  // an /etc/hosts answer comes back at once
}

void EgressProxy::on_answers(std::int64_t now_ms) {
  for (auto& a : resolver_.take_answers()) {
    auto it = std::find_if(conns_.begin(), conns_.end(), [&](const std::unique_ptr<Conn>& c) {
      return c->state == Conn::State::resolving && c->lookup_id == a.id;
    });
    if (it == conns_.end()) continue;  // the connection timed out or went away meanwhile
    Conn& c = **it;
    c.last_active_ms = now_ms;  // what follows (a connect, or an error to send) gets its own idle period
    if (a.timed_out) {
      lookup_timed_out(c, now_ms);
      continue;
    }
    if (!a.ok) {
      fail(c, 502, "Bad Gateway", "cannot resolve " + c.host + ": " + a.error);
      continue;
    }
    c.addrs = std::move(a.addrs);
    c.addr_lens = std::move(a.addr_lens);
    start_connect(c, now_ms);
  }
}

// The policy allowed the destination but it could not be reached: a gateway error, no violation.
void EgressProxy::fail(Conn& c, int code, const std::string& status, const std::string& reason) {
  spdlog::info("egress proxy: {}", reason);
  usage_of(c.key).failed++;
  usage_of(c.key).last_failure = reason;
  c.ufd.reset();
  c.c2u = Buffer{};
  c.u2c = Buffer{};
  c.u2c.append(response(code, status, reason));
  c.state = Conn::State::responding;
}

// A resolved address is checked here, where it is connected to, not when the name was allowed
// (egress_policy.hpp, check_resolved): what the name resolved to is what the socket reaches.
bool EgressProxy::address_allowed(Conn& c, const struct sockaddr_storage& ss, std::int64_t now_ms) {
  if (c.target.is_address) return true;  // a literal: its address rule already decided
  bool v6 = ss.ss_family == AF_INET6;
  std::array<std::uint8_t, 16> a{};
  if (v6) std::memcpy(a.data(), &reinterpret_cast<const struct sockaddr_in6*>(&ss)->sin6_addr, 16);
  else std::memcpy(a.data(), &reinterpret_cast<const struct sockaddr_in*>(&ss)->sin_addr, 4);
  normalise_address(v6, a);
  auto d = check_resolved(cfg_.rules, c.target, v6, a);
  if (d.allowed) return true;
  record_violation(c.host, c.port, d.reason, now_ms, address_text(v6, a));
  c.refused = d.reason;
  return false;
}

void EgressProxy::start_connect(Conn& c, std::int64_t now_ms) {
  while (c.next_addr < c.addrs.size()) {
    auto& ss = c.addrs[c.next_addr];
    socklen_t len = c.addr_lens[c.next_addr];
    ++c.next_addr;
    if (!address_allowed(c, ss, now_ms)) continue;
    UniqueFd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.ok()) {
      c.connect_error = std::strerror(errno);
      continue;
    }
    if (::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&ss), len) == 0 || errno == EINPROGRESS) {
      c.ufd = std::move(fd);
      c.state = Conn::State::connecting;
      return;
    }
    c.connect_error = std::strerror(errno);
  }
  if (!c.refused.empty() && c.connect_error.empty()) {  // every address was refused: a denial
    usage_of(c.key).denied++;
    c.c2u = Buffer{};
    c.u2c = Buffer{};
    c.u2c.append(response(403, "Forbidden", c.refused));
    c.state = Conn::State::responding;
    return;
  }
  fail(c, 502, "Bad Gateway", "cannot connect to " + c.key + ": " + c.connect_error);
}

void EgressProxy::on_connected(Conn& c, std::int64_t now_ms) {
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(c.ufd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err == EINPROGRESS) return;
  if (err != 0) {
    c.ufd.reset();
    c.connect_error = std::strerror(err);
    start_connect(c, now_ms);
    return;
  }
  int one = 1;
  ::setsockopt(c.ufd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (c.is_connect) c.u2c.append("HTTP/1.1 200 Connection established\r\n\r\n");
  // Without pipes (descriptor limit) the relay falls back to the 64 KiB user-space buffers.
  if (!c.c2p.open() || !c.u2p.open()) {
    c.c2p.close();
    c.u2p.close();
  }
  c.state = Conn::State::relay;
}

void EgressProxy::relay(Conn& c, short crev, short urev, std::int64_t now_ms) {
  HostUsage& u = usage_of(c.key);
  auto budget = [&](std::size_t want) -> std::size_t {
    if (!cfg_.max_bytes) return want;
    return static_cast<std::size_t>(
        std::clamp<std::int64_t>(*cfg_.max_bytes - total_bytes_, 0, static_cast<std::int64_t>(want)));
  };
  // One direction: first what sits in the user-space buffer, then the pipe, then read more
  // (reads are capped by what is left of the run's byte budget). False on a fatal error.
  // `limit`: bytes this direction may still read (-1: no limit; plain HTTP's request body).
  auto pump = [&](int src, int dst, Buffer& b, SplicePipe& p, bool& eof, std::int64_t& counter, bool can_read,
                  std::int64_t& limit) -> bool {
    if (b.len) {
      ssize_t w = ::send(dst, b.data.get() + b.off, b.len, MSG_NOSIGNAL);
      if (w < 0 && errno != EAGAIN && errno != EINTR) return false;
      if (w > 0) b.consume(static_cast<std::size_t>(w));
    }
    if (!b.len && p.in) {
      ssize_t w = ::splice(p.r.get(), nullptr, dst, nullptr, p.in, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (w < 0 && errno != EAGAIN && errno != EINTR) return false;
      if (w > 0) p.in -= static_cast<std::size_t>(w);
    }
    if (!can_read || eof || limit == 0) return true;
    auto cap = [&](std::size_t want) { return limit < 0 ? want : std::min(want, static_cast<std::size_t>(limit)); };
    ssize_t k;
    if (p.r.ok()) {
      std::size_t want = cap(budget(p.cap - std::min(p.in, p.cap)));
      if (want == 0) return true;
      k = ::splice(src, nullptr, p.w.get(), nullptr, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (k > 0) p.in += static_cast<std::size_t>(k);
    } else {
      b.compact();
      std::size_t want = cap(budget(b.room()));
      if (want == 0) return true;
      k = ::read(src, b.tail(), want);
      if (k > 0) b.len += static_cast<std::size_t>(k);
    }
    if (k < 0) return errno == EAGAIN || errno == EINTR;
    if (k == 0) {
      eof = true;
      return true;
    }
    counter += k;
    total_bytes_ += k;
    if (limit > 0) limit -= k;
    return true;
  };
  std::int64_t no_limit = -1;
  bool c_read = (crev & POLLIN) || ((crev & (POLLHUP | POLLERR)) && !c.c_eof);
  bool u_read = (urev & POLLIN) || ((urev & (POLLHUP | POLLERR)) && !c.u_eof);
  // A few rounds per wake-up while data keeps moving: fewer trips through poll(2) for a bulk
  // transfer, still bounded so that one busy connection cannot starve the others.
  for (int round = 0; round < 8; ++round) {
    std::size_t before = c.c2u.len + c.u2c.len + c.c2p.in + c.u2p.in;
    std::int64_t total_before = total_bytes_;
    if (!pump(c.cfd.get(), c.ufd.get(), c.c2u, c.c2p, c.c_eof, u.bytes_out, c_read, c.body_left)) return close_conn(c);
    if (!pump(c.ufd.get(), c.cfd.get(), c.u2c, c.u2p, c.u_eof, u.bytes_in, u_read, no_limit)) return close_conn(c);
    if (c.c2u.len + c.u2c.len + c.c2p.in + c.u2p.in == before && total_bytes_ == total_before) break;
    c_read = u_read = true;  // later rounds try again; EAGAIN simply ends a read
  }
  if (c.c_eof && c.c2u.len == 0 && c.c2p.in == 0 && !c.u_shut) ::shutdown(c.ufd.get(), SHUT_WR), c.u_shut = true;
  if (c.u_eof && c.u2c.len == 0 && c.u2p.in == 0 && !c.c_shut) ::shutdown(c.cfd.get(), SHUT_WR), c.c_shut = true;
  if (c.u_shut && c.c_shut) return close_conn(c);
  // Plain HTTP: the response has been passed on in full; the exchange is over (the client's
  // side is no longer read once its request body is through, so its EOF would never be seen).
  if (!c.is_connect && c.c_shut) return close_conn(c);
  if (cfg_.max_bytes && total_bytes_ >= *cfg_.max_bytes && !bytes_exhausted_) {
    // The budget is spent: every relay ends now (what was read is still only what the budget allowed).
    bytes_exhausted_ = true;
    auto colon = c.key.rfind(':');
    record_violation(c.key.substr(0, colon), std::stoi(c.key.substr(colon + 1)),
                     "byte budget of this run spent (network.max_bytes = " + std::to_string(*cfg_.max_bytes) +
                         "): connections closed",
                     now_ms);
    for (auto& other : conns_)
      if (other->state == Conn::State::relay) close_conn(*other);
  }
}

void EgressProxy::close_conn(Conn& c) {
  c.cfd.reset();
  c.ufd.reset();
  c.c2p.close();
  c.u2p.close();
  c.state = Conn::State::closed;
}

nlohmann::json EgressProxy::usage_json() const {
  nlohmann::json hosts = nlohmann::json::array();
  std::int64_t conns = unlisted_.connections, in = unlisted_.bytes_in, out = unlisted_.bytes_out;
  for (auto& [key, u] : usage_) {
    hosts.push_back(trace_object({{"usage/network/hosts/[]/host", key},
                                  {"usage/network/hosts/[]/connections", u.connections},
                                  {"usage/network/hosts/[]/denied", u.denied},
                                  {"usage/network/hosts/[]/failed", u.failed},
                                  {"usage/network/hosts/[]/idle_closed", u.idle_closed},
                                  {"usage/network/hosts/[]/lookups_timed_out", u.lookups_timed_out},
                                  {"usage/network/hosts/[]/bytes_in", u.bytes_in},
                                  {"usage/network/hosts/[]/bytes_out", u.bytes_out}}));
    if (!u.last_failure.empty()) put(hosts.back(), "usage/network/hosts/[]/last_failure", u.last_failure);
    conns += u.connections;
    in += u.bytes_in;
    out += u.bytes_out;
  }
  // Like violations_summary: what the hosts list leaves out, added up.
  nlohmann::json summary = trace_object({{"usage/network/hosts_summary/listed", usage_.size()},
                                         {"usage/network/hosts_summary/listed_cap", kMaxListedHosts},
                                         {"usage/network/hosts_summary/truncated", unlisted_requests_ > 0},
                                         {"usage/network/hosts_summary/unlisted_requests", unlisted_requests_},
                                         {"usage/network/hosts_summary/unlisted_connections", unlisted_.connections},
                                         {"usage/network/hosts_summary/unlisted_denied", unlisted_.denied},
                                         {"usage/network/hosts_summary/unlisted_failed", unlisted_.failed},
                                         {"usage/network/hosts_summary/unlisted_bytes_in", unlisted_.bytes_in},
                                         {"usage/network/hosts_summary/unlisted_bytes_out", unlisted_.bytes_out}});
  nlohmann::json usage =
      trace_object({{"usage/network/connections", conns},
                    {"usage/network/denied", static_cast<std::int64_t>(violations_.size()) + dropped_violations_},
                    {"usage/network/bytes_in", in},
                    {"usage/network/bytes_out", out},
                    {"usage/network/peak_concurrent", peak_concurrent_},
                    {"usage/network/byte_budget_spent", bytes_exhausted_},
                    {"usage/network/idle_closed", idle_closed_},
                    {"usage/network/lookups_timed_out", lookups_timed_out_}});
  put(usage, "usage/network/hosts", std::move(hosts));
  put(usage, "usage/network/hosts_summary", std::move(summary));
  return usage;
}

std::int64_t EgressProxy::ms_until_next_expiry(std::int64_t now_ms) const {
  std::int64_t best = resolver_.ms_until_timeout();
  for (auto& c : conns_) {
    if (c->state == Conn::State::closed) continue;
    std::int64_t until =
        c->state == Conn::State::resolving ? c->lookup_deadline_ms : c->last_active_ms + cfg_.idle_timeout_ms;
    std::int64_t left = std::max<std::int64_t>(0, until - now_ms);
    if (best < 0 || left < best) best = left;
  }
  return best;
}

void EgressProxy::expire_idle(std::int64_t now_ms) {
  for (auto& c : conns_) {
    if (c->state == Conn::State::resolving) {
      if (now_ms >= c->lookup_deadline_ms) lookup_timed_out(*c, now_ms);
      continue;
    }
    if (c->state == Conn::State::closed || now_ms - c->last_active_ms < cfg_.idle_timeout_ms) continue;
    std::string why = "no traffic for " + std::to_string(cfg_.idle_timeout_ms) + " ms (network.idle_timeout_ms)";
    if (c->state == Conn::State::request) {
      // Not a policy decision: a 408 and no violation. It gets one more period to be read.
      spdlog::info("egress proxy: request never completed, closing: {}", why);
      c->u2c = Buffer{};
      c->u2c.append(response(408, "Request Timeout", "the request was not completed: " + why));
      c->state = Conn::State::responding;
      c->last_active_ms = now_ms;
    } else {
      spdlog::info("egress proxy: closing {} {}: {}", c->key.empty() ? "a connection" : c->key,
                   c->state == Conn::State::connecting ? "(connect never finished)" : "", why);
      if (!c->key.empty()) usage_of(c->key).idle_closed++;
      close_conn(*c);
    }
    ++idle_closed_;
  }
  std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->state == Conn::State::closed; });
}

// The lookup (or the wait for a slot) took longer than the lookup timeout: 504. The query itself
// may still be in c-ares until its own tries run out; its answer then finds no connection.
void EgressProxy::lookup_timed_out(Conn& c, std::int64_t now_ms) {
  ++lookups_timed_out_;
  c.last_active_ms = now_ms;  // the 504 gets its own idle period to be read
  usage_of(c.key).lookups_timed_out++;
  fail(c, 504, "Gateway Timeout",
       "cannot resolve " + c.host + ": no answer within " + std::to_string(lookup_timeout_ms_) +
           " ms (the lookup timeout: min(5 s, network.idle_timeout_ms))");
}

nlohmann::json EgressProxy::violations_json() const {
  nlohmann::json v = violations_;
  if (dropped_violations_ > 0)
    v.push_back(trace_object(
        {{"violations/[]/kind", "network"},
         {"violations/[]/host", ""},
         {"violations/[]/port", 0},
         {"violations/[]/time_ms", 0},
         {"violations/[]/reason", std::to_string(dropped_violations_) + " more denied attempts not listed"}}));
  return v;
}

}  // namespace sbx
