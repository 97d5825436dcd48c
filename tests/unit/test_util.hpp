#pragma once
// What several unit tests need and used to write each for itself: a temporary directory removed
// at the end of the test, and descriptors (pipes, socket pairs, loopback sockets) owned by
// UniqueFd (runtime/base/fsutil.hpp) rather than by a small RAII struct of their own.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include <doctest/doctest.h>

#include "runtime/base/fsutil.hpp"

namespace sbx::test {

// A fresh directory under TMPDIR (or /tmp), removed with everything in it at the end of the test;
// made writable first, so that a test that took write permission away still cleans up.
struct TempDir {
  std::string path;
  explicit TempDir(const char* prefix = "sbx-test") {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { (void)std::system(("chmod -R u+rwX '" + path + "' 2>/dev/null; rm -rf '" + path + "'").c_str()); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

struct FdPair {
  UniqueFd a, b;  // a pipe: a reads, b writes
};

inline FdPair make_pipe(int flags = O_CLOEXEC) {
  int p[2];
  REQUIRE(::pipe2(p, flags) == 0);
  return {UniqueFd(p[0]), UniqueFd(p[1])};
}

inline FdPair make_socketpair(int type = SOCK_STREAM) {
  int s[2];
  REQUIRE(::socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, s) == 0);
  return {UniqueFd(s[0]), UniqueFd(s[1])};
}

inline void set_nonblocking(int fd) { REQUIRE(::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) == 0); }

// A TCP socket listening on 127.0.0.1 at a port the kernel chose (`port` gets it).
inline UniqueFd listen_loopback(std::uint16_t& port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.ok());
  struct sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd.get(), 64) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd.get(), reinterpret_cast<struct sockaddr*>(&a), &len) == 0);
  port = ntohs(a.sin_port);
  return fd;
}

// A blocking connection to 127.0.0.1:port (the listener's backlog accepts it at once).
inline UniqueFd connect_loopback(std::uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.ok());
  struct sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  REQUIRE(::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

// What `fd` has to read now, waiting at most `wait_ms` for the first byte; "" at EOF or nothing.
inline std::string read_available(int fd, int wait_ms = 0) {
  std::string out;
  struct pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, wait_ms) <= 0) return out;
  char buf[65536];
  for (;;) {
    ssize_t k = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    bool one_read = k < 0 && errno == ENOTSOCK;  // a pipe or file: one read, which cannot block now
    if (one_read) k = ::read(fd, buf, sizeof buf);
    if (k <= 0) break;
    out.append(buf, static_cast<std::size_t>(k));
    if (one_read) break;
  }
  return out;
}

// A ustar archive built in memory, member by member: what a hostile or unusual tarball needs
// (a '..' name, a whiteout, a symlink a later member goes through) no tar tool writes on request.
class TarBuilder {
 public:
  TarBuilder& file(const std::string& name, const std::string& data, unsigned mode = 0644) {
    return member(name, '0', mode, data, "");
  }
  TarBuilder& dir(const std::string& name, unsigned mode = 0755) { return member(name, '5', mode, "", ""); }
  TarBuilder& symlink(const std::string& name, const std::string& target) { return member(name, '2', 0777, "", target); }
  TarBuilder& fifo(const std::string& name) { return member(name, '6', 0644, "", ""); }
  // The owner of the members added after this call (0:0 until then).
  TarBuilder& owner(unsigned uid, unsigned gid) {
    uid_ = uid;
    gid_ = gid;
    return *this;
  }
  // The archive: the members and the two zero blocks that end it.
  std::string str() const { return out_ + std::string(1024, '\0'); }
  void write_to(const std::string& path) const {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << str();
    REQUIRE(f.good());
  }

 private:
  TarBuilder& member(const std::string& name, char type, unsigned mode, const std::string& data, const std::string& link) {
    REQUIRE(name.size() < 100);
    REQUIRE(link.size() < 100);
    char h[512] = {};
    std::memcpy(h, name.data(), name.size());
    std::snprintf(h + 100, 8, "%07o", mode);
    std::snprintf(h + 108, 8, "%07o", uid_);
    std::snprintf(h + 116, 8, "%07o", gid_);
    std::snprintf(h + 124, 12, "%011zo", data.size());
    std::snprintf(h + 136, 12, "%011o", 1700000000u);
    h[156] = type;
    std::memcpy(h + 157, link.data(), link.size());
    std::memcpy(h + 257, "ustar", 6);
    std::memcpy(h + 263, "00", 2);
    std::memset(h + 148, ' ', 8);  // the checksum counts its own field as spaces
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    out_.append(h, sizeof h);
    out_ += data;
    out_.append((512 - data.size() % 512) % 512, '\0');
    return *this;
  }
  std::string out_;
  unsigned uid_ = 0, gid_ = 0;
};

}  // namespace sbx::test
