#include "runtime/server/pool_job_wire.hpp"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "runtime/base/fdpass.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"

namespace sbx {
namespace {

constexpr std::size_t kHeadBytes = 1 + sizeof(std::uint32_t);
// How long the rest of a message read in part may take to follow (it was sent whole).
constexpr int kRestOfJobMs = 1000;

// The job in a memfd: written whole before it is sent, so the server never waits on the worker.
Status send_job_in_memfd(int sock, const std::string& text) {
  UniqueFd mfd(::memfd_create("sbx-mcp-job", MFD_CLOEXEC));
  if (!mfd.ok()) return sys_error("mcp", "memfd_create for a pooled worker's job");
  if (auto st = write_all(mfd.get(), text, "a pooled worker's job"); !st) return st;
  ::lseek(mfd.get(), 0, SEEK_SET);
  return send_fd(sock, mfd.get(), 'J', "mcp", "hand a job to a pooled worker");
}

}  // namespace

Status send_pool_job(int sock, const std::string& text) {
  if (text.size() > kInlineJobBytes) return send_job_in_memfd(sock, text);
  char head[kHeadBytes] = {'j'};
  const auto len = static_cast<std::uint32_t>(text.size());
  std::memcpy(head + 1, &len, sizeof len);
  struct iovec iov[2] = {{head, sizeof head}, {const_cast<char*>(text.data()), text.size()}};
  struct msghdr mh = {};
  mh.msg_iov = iov;
  mh.msg_iovlen = 2;
  ssize_t n;
  do n = ::sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof head + text.size())) return {};
  // Short or refused: the worker cannot have a whole job, and is retired by the caller.
  return make_error("mcp", "hand a job to a pooled worker", n < 0 ? errno : EIO);
}

PoolJobRead recv_pool_job(int sock, std::size_t max_bytes) {
  PoolJobRead r;
  std::string buf(kHeadBytes + kInlineJobBytes + 1, '\0');  // one more: a longer message is refused
  int carried = -1;
  ssize_t n = recv_with_fd(sock, buf.data(), buf.size(), &carried);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return r;
  UniqueFd fd(carried);
  if (n <= 0) {
    r.kind = PoolJobRead::closed;
    return r;
  }
  const auto got = static_cast<std::size_t>(n);
  r.kind = PoolJobRead::invalid;
  if (buf[0] == 'J' && got == 1 && fd.ok()) {
    auto text = read_bounded_fd(fd.get(), max_bytes, "usage", "the mcp worker's job");
    if (!text) {
      r.why = text.error().message;
      return r;
    }
    r.kind = PoolJobRead::job;
    r.text = std::move(*text);
    return r;
  }
  std::uint32_t len = 0;
  if (buf[0] == 'j' && got >= kHeadBytes) std::memcpy(&len, buf.data() + 1, sizeof len);
  r.why = "the mcp worker's job message is malformed";
  if (buf[0] != 'j' || got < kHeadBytes || fd.ok() || len > kInlineJobBytes || got > kHeadBytes + len) return r;
  // The server's one sendmsg took the whole message (send_pool_job) but a stream socket with a
  // small send buffer (net.core.wmem_default) queues it in pieces, and this read may have woken
  // on the first: the rest follows at once, or never (the server then retired this worker).
  std::size_t have = got;
  while (have < kHeadBytes + len) {
    ssize_t m = ::recv(sock, buf.data() + have, kHeadBytes + len - have, MSG_DONTWAIT);
    if (m > 0) {
      have += static_cast<std::size_t>(m);
      continue;
    }
    if (m == 0 || (errno != EAGAIN && errno != EINTR)) return r;
    pollfd p{sock, POLLIN, 0};
    if (errno == EAGAIN && ::poll(&p, 1, kRestOfJobMs) <= 0) return r;
  }
  r.why.clear();
  r.kind = PoolJobRead::job;
  r.text.assign(buf.data() + kHeadBytes, len);
  return r;
}

}  // namespace sbx
