#pragma once
// Network: the sandbox has its own network namespace whose only interface is loopback, brought
// up here (a new namespace starts with lo down). No route leaves it.
#include "runtime/error.hpp"

namespace sbx {

// Child side: needs CAP_NET_ADMIN in the network namespace's owning user namespace.
Status bring_up_loopback();

}  // namespace sbx
