#include "runtime/egress/resolver.hpp"

#include <ares.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/time.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace sbx {
namespace {

constexpr std::size_t kMaxAddrs = 8;  // per answer: enough to fall back, bounded all the same

// What c-ares hands back to on_answer: which resolver and which lookup (freed there; c-ares calls
// every callback exactly once, with ARES_EDESTRUCTION when the channel is destroyed first).
struct Pending {
  Resolver* self;
  std::uint64_t id;
};

// c-ares' sockets are made after sbx's init was forked, but a later fork of the supervisor must
// still not inherit them.
int set_cloexec(ares_socket_t fd, int /*type*/, void* /*data*/) {
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return ARES_SUCCESS;
}

}  // namespace

Resolver::Resolver(std::size_t max_in_flight, std::int64_t timeout_ms, const std::string& servers)
    : max_in_flight_(max_in_flight) {
  static std::once_flag lib_once;
  static int lib_rc = ARES_SUCCESS;
  std::call_once(lib_once, [] { lib_rc = ::ares_library_init(ARES_LIB_INIT_ALL); });
  if (lib_rc != ARES_SUCCESS) {
    init_error_ = std::string("c-ares library init: ") + ::ares_strerror(lib_rc);
    return;
  }
  // Two tries per server; c-ares doubles the per-try timeout on a retry past the server list,
  // so t + 2t = 1.5 x the caller's timeout with one server (and not much more with several).
  struct ares_options o = {};
  o.timeout = static_cast<int>(std::max<std::int64_t>(100, timeout_ms / 2));
  o.tries = 2;
  int rc = ::ares_init_options(&ch_, &o, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
  if (rc != ARES_SUCCESS) {
    init_error_ = std::string("c-ares: cannot read the resolver configuration: ") + ::ares_strerror(rc);
    ch_ = nullptr;
    return;
  }
  ::ares_set_socket_callback(ch_, set_cloexec, nullptr);
  if (!servers.empty() && (rc = ::ares_set_servers_ports_csv(ch_, servers.c_str())) != ARES_SUCCESS)
    init_error_ = std::string("c-ares: bad server list '") + servers + "': " + ::ares_strerror(rc);
}

Resolver::~Resolver() { shutdown(); }

void Resolver::shutdown() {
  if (!ch_) return;
  shutting_down_ = true;  // the EDESTRUCTION callbacks below only free their Pending
  ::ares_destroy(ch_);
  ch_ = nullptr;
  init_error_ = "resolver shut down";
  answers_.clear();
  in_flight_ = 0;
}

std::uint64_t Resolver::start(const std::string& host, std::uint16_t port) {
  std::uint64_t id = next_id_++;
  struct ares_addrinfo_hints hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = ARES_AI_NUMERICSERV;
  std::string service = std::to_string(port);
  ++in_flight_;
  // May call on_answer before returning (an /etc/hosts hit): the answer is queued all the same.
  ::ares_getaddrinfo(ch_, host.c_str(), service.c_str(), &hints, on_answer, new Pending{this, id});
  return id;
}

void Resolver::on_answer(void* arg, int status, int /*timeouts*/, struct ares_addrinfo* res) {
  Pending* pending = static_cast<Pending*>(arg);
  Resolver* self = pending->self;
  std::uint64_t id = pending->id;
  delete pending;
  if (self->shutting_down_) {
    if (res) ::ares_freeaddrinfo(res);
    return;
  }
  if (self->in_flight_ > 0) --self->in_flight_;
  Answer a;
  a.id = id;
  a.ok = status == ARES_SUCCESS;
  if (!a.ok) a.error = ::ares_strerror(status);
  a.timed_out = status == ARES_ETIMEOUT;
  for (auto* n = res ? res->nodes : nullptr; a.ok && n && a.addrs.size() < kMaxAddrs; n = n->ai_next) {
    if (n->ai_family != AF_INET && n->ai_family != AF_INET6) continue;
    if (n->ai_addrlen > sizeof(struct sockaddr_storage)) continue;
    struct sockaddr_storage ss = {};
    std::memcpy(&ss, n->ai_addr, n->ai_addrlen);
    a.addrs.push_back(ss);
    a.addr_lens.push_back(static_cast<socklen_t>(n->ai_addrlen));
  }
  if (a.ok && a.addrs.empty()) {
    a.ok = false;
    a.error = "no IPv4 or IPv6 address";
  }
  if (res) ::ares_freeaddrinfo(res);
  self->answers_.push_back(std::move(a));
}

void Resolver::add_pollfds(std::vector<struct pollfd>& p) {
  if (!ch_) return;
  ares_socket_t socks[ARES_GETSOCK_MAXNUM];
  int bits = ::ares_getsock(ch_, socks, ARES_GETSOCK_MAXNUM);
  for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
    short ev = 0;
    if (ARES_GETSOCK_READABLE(bits, i)) ev |= POLLIN;
    if (ARES_GETSOCK_WRITABLE(bits, i)) ev |= POLLOUT;
    if (!ev) break;  // the sockets in use come first
    p.push_back({socks[i], ev, 0});
  }
}

void Resolver::on_events(const struct pollfd* p, std::size_t n) {
  if (!ch_) return;
  for (std::size_t i = 0; i < n; ++i) {
    if (!p[i].revents) continue;
    // An error or hang-up is read as readable: c-ares then sees the failure on recv and moves on.
    bool rd = p[i].revents & (POLLIN | POLLERR | POLLHUP);
    bool wr = p[i].revents & POLLOUT;
    ::ares_process_fd(ch_, rd ? p[i].fd : ARES_SOCKET_BAD, wr ? p[i].fd : ARES_SOCKET_BAD);
  }
  // Retransmissions and timeouts (ares_process_fd checks them on every call).
  ::ares_process_fd(ch_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
}

std::int64_t Resolver::ms_until_timeout() const {
  if (!ch_ || in_flight_ == 0) return -1;
  struct timeval tv;
  struct timeval* t = ::ares_timeout(ch_, nullptr, &tv);
  if (!t) return -1;
  return t->tv_sec * 1000LL + (t->tv_usec + 999) / 1000;
}

std::vector<Resolver::Answer> Resolver::take_answers() {
  std::vector<Answer> out;
  out.swap(answers_);
  return out;
}

}  // namespace sbx
