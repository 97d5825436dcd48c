#include "runtime/base/fdpass.hpp"

#include <unistd.h>

#include <cstring>

#include "runtime/base/fsutil.hpp"

namespace sbx {

FdMessage::FdMessage(int fd, char tag) : mh{}, iov{&byte, 1}, byte(tag), cbuf{} {
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
}

Status send_fd(int sock, int fd, char tag, Stage stage, const char* what) {
  FdMessage m(fd, tag);
  ssize_t n;
  do n = ::sendmsg(sock, &m.mh, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n == 1) return {};
  return make_error(stage, what, n < 0 ? errno : EIO);
}

ssize_t recv_with_fd(int sock, char* buf, std::size_t size, int* fd) {
  *fd = -1;
  alignas(struct cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))] = {};
  struct iovec iov = {buf, size};
  struct msghdr mh = {};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  ssize_t n = ::recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n <= 0) return n;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int got;
    std::memcpy(&got, CMSG_DATA(c), sizeof got);
    if (*fd < 0) {
      *fd = got;
    } else {
      UniqueFd dropped(got);  // one fd per message; anything more is closed here
    }
  }
  return n;
}

ssize_t recv_fd(int sock, int* fd) {
  char byte;
  return recv_with_fd(sock, &byte, 1, fd);
}

}  // namespace sbx
