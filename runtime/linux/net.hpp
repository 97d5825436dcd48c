#pragma once
// Network: the sandbox has its own network namespace whose only interface is loopback, brought
// up here (a new namespace starts with lo down). No route leaves it.
#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"

namespace sbx {

// Child side: needs CAP_NET_ADMIN in the network namespace's owning user namespace.
Status bring_up_loopback();

// Child side (init, after bring_up_loopback, before the program is forked): creates the egress
// proxy's listening socket on 127.0.0.1:port in the sandbox's network namespace. Init sends it
// to the supervisor, which serves it (handshake.hpp, InitEnd::send_proxy_listener; proxy.hpp),
// and keeps no copy.
Result<UniqueFd> open_proxy_listener(int port);

}  // namespace sbx
