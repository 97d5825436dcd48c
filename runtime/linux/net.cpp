#include "runtime/linux/net.hpp"

#include "runtime/base/fsutil.hpp"

#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace sbx {

Status bring_up_loopback() {
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return sys_error("network", "socket for loopback");
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  Status st;
  if (::ioctl(fd.get(), SIOCGIFFLAGS, &ifr) != 0) {
    st = sys_error("network", "read flags of lo");
  } else {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (::ioctl(fd.get(), SIOCSIFFLAGS, &ifr) != 0) st = sys_error("network", "bring lo up");
  }
  return st;
}

Result<UniqueFd> open_proxy_listener(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return sys_error("network", "socket for the egress proxy");
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) != 0)
    return sys_error("network", "bind the egress proxy to 127.0.0.1:" + std::to_string(port));
  if (::listen(fd.get(), 1024) != 0) return sys_error("network", "listen on the egress proxy socket");
  return fd;
}

}  // namespace sbx
