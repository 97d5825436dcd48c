#include "runtime/session/kernel_relay.hpp"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

#include "runtime/base/json_io.hpp"
#include "runtime/linux/tcp_peer.hpp"
#include "runtime/session/session_tunnel.hpp"
#include "runtime/session/session_wire.hpp"

namespace sbx {
namespace {
using json = nlohmann::json;
constexpr const char* kStage = "sessions";
constexpr const char* kPortKeys[5] = {"shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"};
}  // namespace

Result<KernelConnection> read_connection_file(const std::string& path) {
  auto j = read_json_file(path, JsonBounds{kMaxConnectionFileBytes}, kStage, "the kernel's connection file " + path);
  if (!j) return j.error();
  if (!j->is_object()) return make_error(kStage, path + ": not a JSON object");
  KernelConnection c;
  if (j->value("transport", "tcp") != "tcp")
    return make_error(kStage, path + ": transport '" + j->value("transport", "") + "': sbx relays tcp only");
  c.ip = j->value("ip", "127.0.0.1");
  for (int i = 0; i < 5; ++i) {
    auto it = j->find(kPortKeys[i]);
    if (it == j->end() || !it->is_number_integer() || it->get<int>() < 1 || it->get<int>() > 65535)
      return make_error(kStage, path + ": " + kPortKeys[i] + " must be a port number");
    c.ports[i] = it->get<int>();
  }
  c.key = j->value("key", "");
  c.signature_scheme = j->value("signature_scheme", "hmac-sha256");
  c.kernel_name = j->value("kernel_name", "");
  return c;
}

Result<KernelRelay> KernelRelay::open(const KernelConnection& c) {
  KernelRelay r(c);
  r.owner_ = ::geteuid();
  struct in_addr addr {};
  if (::inet_pton(AF_INET, c.ip.c_str(), &addr) != 1)
    return make_error(kStage, "the connection file's ip '" + c.ip + "' is not an IPv4 address");
  for (int i = 0; i < 5; ++i) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a {};
    a.sin_family = AF_INET;
    a.sin_addr = addr;
    a.sin_port = htons(static_cast<std::uint16_t>(c.ports[i]));
    if (!fd.ok() || ::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd.get(), kListenBacklog) != 0)
      return sys_error(kStage,
                       "cannot listen on " + c.ip + ":" + std::to_string(c.ports[i]) + " (" + kPortKeys[i] + ")");
    r.listeners_[i] = std::move(fd);
  }
  SBX_TRY(r.check_owner_is_told(addr));
  return r;
}

// Whether this kernel can say who connects (tcp_diag may be missing, netlink refused): one
// connection of our own to the shell port must come back as ours, or the kernel does not start.
// Otherwise every local client, the owner's too, would be refused later with no reason to see.
Status KernelRelay::check_owner_is_told(struct in_addr addr) const {
  struct sockaddr_in a {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = addr.s_addr == htonl(INADDR_ANY) ? htonl(INADDR_LOOPBACK) : addr.s_addr;
  a.sin_port = htons(static_cast<std::uint16_t>(conn_.ports[0]));
  UniqueFd self(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!self.ok() || ::connect(self.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) != 0)
    return sys_error(kStage, "connect to its own " + std::string(kPortKeys[0]) + " to check who connects");
  pollfd p{listeners_[0].get(), POLLIN, 0};
  if (::poll(&p, 1, kSelfCheckMs) != 1)
    return make_error(kStage, "its own connection to " + std::string(kPortKeys[0]) + " did not arrive", ETIMEDOUT);
  UniqueFd accepted(::accept4(listeners_[0].get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!accepted.ok()) return sys_error(kStage, "accept its own connection to " + std::string(kPortKeys[0]));
  if (std::string why = refusal(accepted.get()).why; !why.empty())
    return make_error(kStage,
                      "the kernel cannot say who connects to the kernel's ports, so another user could "
                      "take them: its own connection was refused (" +
                          why + "): load the tcp_diag module, or allow NETLINK_SOCK_DIAG");
  return {};
}

json KernelRelay::start_request() const {
  return {{"op", "kernel"},
          {"connection",
           {{"key", conn_.key}, {"signature_scheme", conn_.signature_scheme}, {"kernel_name", conn_.kernel_name}}}};
}

void KernelRelay::from_agent(std::uint32_t id, std::string_view bytes) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  it->second.out.append(bytes);
  pump(id, it->second, POLLOUT);
}

void KernelRelay::closed(std::uint32_t id) { drop(id, false); }

bool KernelRelay::backlogged() const {
  for (auto& [id, c] : conns_)
    if (c.out.size() > kStreamQueueBytes) return true;
  return false;
}

void KernelRelay::add_to(std::vector<struct pollfd>& p) const {
  bool reading = !(agent_full_ && agent_full_());
  for (auto& l : listeners_) p.push_back({l.get(), POLLIN, 0});
  for (auto& [id, c] : conns_)
    p.push_back({c.fd.get(), static_cast<short>((reading ? POLLIN : 0) | (c.out.empty() ? 0 : POLLOUT)), 0});
}

bool KernelRelay::dispatch(std::span<const struct pollfd> mine) {
  bool moved = false;
  for (int i = 0; i < 5 && static_cast<std::size_t>(i) < mine.size(); ++i)
    if (mine[static_cast<std::size_t>(i)].revents) accept_on(i + 1);
  std::vector<std::pair<std::uint32_t, short>> ready;
  std::size_t k = 5;
  for (auto& [id, c] : conns_) {
    if (k < mine.size() && mine[k].revents) ready.push_back({id, mine[k].revents});
    ++k;
  }
  for (auto [id, revents] : ready)
    if (auto it = conns_.find(id); it != conns_.end()) moved = pump(id, it->second, revents) || moved;
  return moved;
}

// The ports are open to every local user, and the kernel's key (HMAC on each message) keeps
// them from running code, not from holding connections: before this check, 32 idle connections
// of another user locked the kernel's own client out. A peer on an address of this host must be
// a socket the kernel names as the owner's (or root's): one it cannot find (bound to a device, or
// gone) or finds only as a minisocket is refused, since whether a peer is local is decided by its
// address, never by a failed lookup. A peer on another host's address is a remote client (the
// connection file named a non-loopback address), held to kMaxKernelClients like any. The answer
// comes from the kernel within one request (tcp_peer.hpp): nothing here waits.
KernelRelay::Refusal KernelRelay::refusal(int fd) const {
  auto peer = tcp_peer(fd);
  if (!peer) return {"its owner could not be asked: " + peer.error().describe()};
  switch (peer->is) {
    case TcpPeer::Is::socket:
      if (peer->uid == owner_ || peer->uid == 0) return {};
      return {"from uid " + std::to_string(peer->uid) + "; only uid " + std::to_string(owner_) +
                  ", who started the kernel, and root may connect",
              true};
    case TcpPeer::Is::minisocket: return {"its socket closed before it was accepted"};
    case TcpPeer::Is::none: break;
  }
  if (!peer->local_address) return {};
  return {"no socket of this host answers for it (one bound to a device, or one gone)"};
}

bool KernelRelay::admitted(int fd, int channel) {
  Refusal r = refusal(fd);
  if (r.why.empty()) return true;
  // The first of each kind is printed: another user's, and the owner's own that could not be told
  // apart (so that an attacker's line never hides why the owner's client was refused).
  if (!std::exchange(r.other_uid ? told_other_uid_ : told_unknown_, true))
    std::fprintf(stderr, "sbx: kernel run: refused a connection to %s (%s); later ones like it are not printed\n",
                 kPortKeys[channel - 1], r.why.c_str());
  return false;
}

void KernelRelay::accept_on(int channel) {
  // A few at each wake-up: a flood of connections that are refused at once must not fill the
  // listen queue ahead of the owner's (each is closed as it is refused).
  for (int i = 0; i < kAcceptsPerWake; ++i) {
    UniqueFd fd(::accept4(listeners_[channel - 1].get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.ok()) return;
    if (!admitted(fd.get(), channel) || conns_.size() >= kMaxKernelClients) continue;
    std::uint32_t id = next_id_++;
    conns_[id].fd = std::move(fd);
    send_(encode_json_frame({{"op", "connect"}, {"stream", id}, {"channel", channel}}));
  }
}

void KernelRelay::drop(std::uint32_t id, bool tell) {
  if (conns_.erase(id) && tell) send_(encode_json_frame({{"op", "close"}, {"stream", id}}));
}

bool KernelRelay::pump(std::uint32_t id, Conn& c, short revents) {
  bool moved = false;
  while ((revents & POLLOUT) && !c.out.empty()) {
    ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {
      drop(id, true);
      return moved;
    }
    c.out.erase(0, static_cast<std::size_t>(n));
    moved = true;
  }
  if (!(revents & (POLLIN | POLLHUP | POLLERR))) return moved;
  char buf[64 << 10];
  ssize_t n = ::read(c.fd.get(), buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return moved;
  if (n <= 0) {
    drop(id, true);
    return moved;
  }
  send_(encode_stream_frame(id, std::string_view(buf, static_cast<std::size_t>(n))));
  return true;
}

}  // namespace sbx
