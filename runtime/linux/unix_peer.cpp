#include "runtime/linux/unix_peer.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <charconv>
#include <cstring>

namespace sbx {

Result<UniqueFd> connect_unix_at(int dirfd, const std::string& name, const std::string& shown, Stage stage) {
  const std::string via = "/proc/self/fd/" + std::to_string(dirfd) + "/" + name;
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  if (via.size() >= sizeof addr.sun_path) return Error{stage, ENAMETOOLONG, "unix socket path " + via};
  std::memcpy(addr.sun_path, via.c_str(), via.size());
  UniqueFd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock.ok()) return sys_error(stage, "socket");
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return sys_error(stage, "connect to " + shown);
  return sock;
}

namespace {
// SO_PEERPIDFD (Linux 6.5; not in Debian 12's headers): 77 in asm-generic/socket.h, which these
// architectures use; alpha, parisc and sparc number their socket options apart, and are asked
// the older way (SO_PEERCRED) rather than with another option's number.
#if defined(SO_PEERPIDFD)
constexpr int kSoPeerPidfd = SO_PEERPIDFD;
#elif defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || defined(__arm__) || defined(__riscv) || \
    defined(__powerpc__) || defined(__s390__) || defined(__loongarch__) || defined(__mips__)
constexpr int kSoPeerPidfd = 77;
#else
constexpr int kSoPeerPidfd = -1;
#endif
constexpr unsigned long kPidfsMagic = 0x50494446;  // PIDFS_MAGIC (Linux 6.9)
}  // namespace

bool UnixPeer::alive() const {
  if (!pidfd.ok()) return true;  // SO_PEERCRED's number: nothing more to ask (unix_peer)
  return ::syscall(SYS_pidfd_send_signal, pidfd.get(), 0, nullptr, 0) == 0;
}

std::optional<pid_t> pidfd_pid(int pidfd) {
  bool ok = false;
  const std::string text = read_file_prefix("/proc/self/fdinfo/" + std::to_string(pidfd), 4096, &ok);
  const auto at = text.find("\nPid:\t");
  if (!ok || at == std::string::npos) return std::nullopt;
  const char* first = text.data() + at + 6;
  const char* last = text.data() + text.size();
  pid_t v = 0;
  const auto [p, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || p == first || (p != last && *p != '\n')) return std::nullopt;
  return v;
}

Result<UnixPeer> unix_peer(int sock, Stage stage, bool with_pid) {
  UnixPeer peer;
  int fd = -1;
  socklen_t len = sizeof fd;
  if (kSoPeerPidfd >= 0 && ::getsockopt(sock, SOL_SOCKET, kSoPeerPidfd, &fd, &len) == 0 && fd >= 0) {
    peer.pidfd = UniqueFd(fd);
    struct statfs fs;
    struct stat st;
    if (::fstatfs(fd, &fs) == 0 && static_cast<unsigned long>(fs.f_type) == kPidfsMagic && ::fstat(fd, &st) == 0)
      peer.id = st.st_ino;
    if (!with_pid && peer.id != 0) return peer;
    const auto pid = pidfd_pid(fd);
    if (!pid) return Error{stage, EPROTO, "the kernel did not say which process listens on the socket"};
    if (*pid <= 0)
      return Error{
          stage, ESRCH,
          *pid < 0 ? "the socket's listener has ended" : "the socket's listener is in no pid namespace of ours"};
    peer.pid = *pid;
    return peer;
  }
  // An older kernel (no such option) is asked the other way; any other error is one.
  if (kSoPeerPidfd >= 0 && errno != ENOPROTOOPT) return sys_error(stage, "SO_PEERPIDFD");
  struct ucred cred {};
  len = sizeof cred;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return sys_error(stage, "SO_PEERCRED");
  if (cred.pid <= 0) return Error{stage, ESRCH, "the socket's listener is in no pid namespace of ours"};
  peer.pid = cred.pid;
  return peer;
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
