#include "runtime/linux/tcp_peer.hpp"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <sys/socket.h>

#include <cstring>

#include "runtime/base/fsutil.hpp"

namespace sbx {
namespace {
constexpr const char* kStage = "sessions";

// The exact lookup: the kernel's answer, or ENOENT when no socket holds that 4-tuple (as seen
// without an interface).
Result<TcpPeer> ask_kernel(const sockaddr_in& ours, const sockaddr_in& theirs) {
  UniqueFd nl(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!nl.ok()) return sys_error(kStage, "a socket-diagnostics socket (NETLINK_SOCK_DIAG)");
  struct {
    struct nlmsghdr h;
    struct inet_diag_req_v2 r;
  } req{};
  req.h.nlmsg_len = sizeof req;
  req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  req.h.nlmsg_flags = NLM_F_REQUEST;
  req.r.sdiag_family = AF_INET;
  req.r.sdiag_protocol = IPPROTO_TCP;
  req.r.idiag_states = ~0u;
  // The peer's socket, named as it sees itself: its address is our peer's, its peer is us.
  req.r.id.idiag_sport = theirs.sin_port;
  req.r.id.idiag_dport = ours.sin_port;
  req.r.id.idiag_src[0] = theirs.sin_addr.s_addr;
  req.r.id.idiag_dst[0] = ours.sin_addr.s_addr;
  req.r.id.idiag_cookie[0] = req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  struct sockaddr_nl kernel {};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(nl.get(), &req, sizeof req, 0, reinterpret_cast<struct sockaddr*>(&kernel), sizeof kernel) < 0)
    return sys_error(kStage, "ask the kernel who holds a connection (NETLINK_SOCK_DIAG)");
  // The kernel answers within the send: the reply is already queued, or there is none.
  alignas(struct nlmsghdr) char buf[8192];
  ssize_t n = ::recv(nl.get(), buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0) return sys_error(kStage, "read the kernel's socket-diagnostics answer");
  auto* h = reinterpret_cast<struct nlmsghdr*>(buf);
  if (!NLMSG_OK(h, static_cast<unsigned>(n))) return make_error(kStage, "a short socket-diagnostics answer", EPROTO);
  if (h->nlmsg_type == NLMSG_ERROR) {
    if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct nlmsgerr)))
      return make_error(kStage, "a short socket-diagnostics error", EPROTO);
    int err = -static_cast<struct nlmsgerr*>(NLMSG_DATA(h))->error;
    if (err == ENOENT) return TcpPeer{};
    return make_error(kStage, "the kernel's socket diagnostics (tcp_diag) refused the question", err);
  }
  if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
    return make_error(kStage, "an unexpected socket-diagnostics answer", EPROTO);
  auto* m = static_cast<struct inet_diag_msg*>(NLMSG_DATA(h));
  // A timewait or request minisocket carries no owner: uid 0 and inode 0 there mean nothing.
  if (m->idiag_inode == 0) return TcpPeer{TcpPeer::Is::minisocket, 0, true};
  return TcpPeer{TcpPeer::Is::socket, static_cast<uid_t>(m->idiag_uid), true};
}

}  // namespace

bool is_local_address(struct in_addr addr) {
  if ((ntohl(addr.s_addr) >> 24) == 127) return true;
  // Binding is allowed only to this namespace's own addresses (EADDRNOTAVAIL otherwise). Where
  // net.ipv4.ip_nonlocal_bind lets any address bind, every peer counts as local: the relay then
  // refuses what it cannot find, never keeps it.
  UniqueFd probe(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe.ok()) return true;
  struct sockaddr_in a {};
  a.sin_family = AF_INET;
  a.sin_addr = addr;
  return ::bind(probe.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) == 0 || errno != EADDRNOTAVAIL;
}

Result<TcpPeer> tcp_peer(int fd) {
  struct sockaddr_in ours {};
  struct sockaddr_in theirs {};
  socklen_t a = sizeof ours, b = sizeof theirs;
  if (::getsockname(fd, reinterpret_cast<struct sockaddr*>(&ours), &a) != 0 ||
      ::getpeername(fd, reinterpret_cast<struct sockaddr*>(&theirs), &b) != 0)
    return sys_error(kStage, "the connection's addresses");
  if (ours.sin_family != AF_INET || theirs.sin_family != AF_INET)
    return make_error(kStage, "the connection is not IPv4", EAFNOSUPPORT);
  auto peer = ask_kernel(ours, theirs);
  if (peer && peer->is == TcpPeer::Is::none) peer->local_address = is_local_address(theirs.sin_addr);
  return peer;
}

}  // namespace sbx
