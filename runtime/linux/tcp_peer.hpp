#pragma once
// Who holds the other end of an accepted TCP connection, when that end is a socket of this host's
// network namespace: the kernel's socket diagnostics (NETLINK_SOCK_DIAG, as ss(8) asks them)
// name the owner uid of the peer's socket. TCP carries no credentials (SO_PEERCRED is for unix
// sockets), so this is how a loopback listener tells the user who started it from another local
// user (kernel_relay.cpp: a Jupyter kernel's ports). One request answered by the kernel before
// its send returns: no wait on anything outside this host.
#include <sys/types.h>

#include "runtime/base/error.hpp"

namespace sbx {

struct TcpPeer {
  bool local = false;  // false: no socket of this namespace holds the other end (remote, or gone)
  uid_t uid = 0;       // the local peer socket's owner, in this process's user namespace
};

// `fd`: an accepted (connected) IPv4 TCP socket.
Result<TcpPeer> tcp_peer(int fd);

}  // namespace sbx
