#include "runtime/net.hpp"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace sbx {

Status bring_up_loopback() {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return sys_error("network", "socket for loopback");
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  Status st;
  if (::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    st = sys_error("network", "read flags of lo");
  } else {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (::ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) st = sys_error("network", "bring lo up");
  }
  ::close(fd);
  return st;
}

}  // namespace sbx
