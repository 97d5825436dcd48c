#pragma once
// Who holds the other end of an accepted TCP connection, when that end is a socket of this host's
// network namespace: the kernel's socket diagnostics (NETLINK_SOCK_DIAG, as ss(8) asks them)
// name the owner uid of the peer's socket. TCP carries no credentials (SO_PEERCRED is for unix
// sockets), so this is how a loopback listener tells the user who started it from another local
// user (kernel_relay.cpp: a Jupyter kernel's ports). One exact request, answered by the kernel
// before its send returns: no wait on anything outside this host, and a cost that does not grow
// with the host's sockets.
#include <netinet/in.h>
#include <sys/types.h>

#include "runtime/base/error.hpp"

namespace sbx {

struct TcpPeer {
  enum class Is {
    socket,      // a full socket of this namespace holds the other end, owned by `uid`
    minisocket,  // only the kernel's stand-in for a closed or half-open one (uid 0, inode 0): gone
    none,        // no socket answered: another host's, one bound to a device (an exact lookup
                 // without an interface skips those), or one already gone
  };
  Is is = Is::none;
  uid_t uid = 0;
  // The peer's address is one of this namespace's (127.0.0.0/8 included): its socket is here,
  // whether or not the lookup found it. Decided from the address, never from a failed lookup.
  bool local_address = false;
};

// `fd`: an accepted (connected) IPv4 TCP socket. The kernel's exact lookup also finds an IPv6
// client's socket connected through an IPv4-mapped address.
Result<TcpPeer> tcp_peer(int fd);

// Whether `addr` is an address of this network namespace: 127.0.0.0/8, or one a socket can bind.
bool is_local_address(struct in_addr addr);

}  // namespace sbx
