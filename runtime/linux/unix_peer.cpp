#include "runtime/linux/unix_peer.hpp"

#include <sys/socket.h>
#include <sys/un.h>

#include <charconv>
#include <cstring>

namespace sbx {

Result<UniqueFd> connect_unix_at(int dirfd, const std::string& name, const std::string& shown) {
  const std::string via = "/proc/self/fd/" + std::to_string(dirfd) + "/" + name;
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  if (via.size() >= sizeof addr.sun_path) return Error{"template", ENAMETOOLONG, "unix socket path " + via};
  std::memcpy(addr.sun_path, via.c_str(), via.size());
  UniqueFd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock.ok()) return sys_error("template", "socket");
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return sys_error("template", "connect to " + shown);
  return sock;
}

Result<pid_t> unix_peer_pid(int sock) {
  struct ucred cred {};
  socklen_t len = sizeof cred;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return sys_error("template", "SO_PEERCRED");
  if (cred.pid <= 0) return Error{"template", ESRCH, "the socket's listener is in no pid namespace of ours"};
  return cred.pid;
}

std::optional<pid_t> parse_stat_ppid(std::string_view stat) {
  const auto rp = stat.rfind(')');
  if (rp == std::string_view::npos) return std::nullopt;
  // After the name: " STATE PPID ...", one field each, separated by single spaces.
  const std::string_view rest = stat.substr(rp + 1);
  const auto state = rest.find_first_not_of(' ');
  if (state == std::string_view::npos) return std::nullopt;
  const auto gap = rest.find(' ', state);
  if (gap == std::string_view::npos) return std::nullopt;
  const char* first = rest.data() + gap + 1;
  const char* last = rest.data() + rest.size();
  pid_t v = 0;
  const auto [p, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || p == first || (p != last && *p != ' ') || v < 0) return std::nullopt;
  return v;
}

bool descends_from(pid_t pid, pid_t ancestor, int max_depth) {
  for (int depth = 0; pid > 0 && depth <= max_depth; ++depth) {
    if (pid == ancestor) return true;
    bool ok = false;
    // A stat line is well under 1 KiB; more is not a stat line.
    const std::string text = read_file_prefix("/proc/" + std::to_string(pid) + "/stat", 4096, &ok);
    if (!ok) return false;
    const auto parent = parse_stat_ppid(text);
    if (!parent) return false;
    pid = *parent;
  }
  return false;
}

}  // namespace sbx
