#pragma once
// Network: the sandbox has its own network namespace whose only interface is loopback, brought
// up here (a new namespace starts with lo down). No route leaves it.
#include "runtime/base/error.hpp"

namespace sbx {

// Child side: needs CAP_NET_ADMIN in the network namespace's owning user namespace.
Status bring_up_loopback();

// Child side (init, after bring_up_loopback, before the program is forked): creates the egress
// proxy's listening socket on 127.0.0.1:port in the sandbox's network namespace and sends it over
// `sock` (SCM_RIGHTS) to the supervisor, which serves it (proxy.hpp). Init keeps no copy.
Status hand_over_proxy_listener(int sock, int port);

}  // namespace sbx
