#pragma once
// Passing one file descriptor over a unix socket (SCM_RIGHTS), the way the sandbox's seccomp
// listener and egress proxy socket reach the supervisor.
#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>

#include "runtime/base/error.hpp"

namespace sbx {

// A one-byte message carrying one fd. It points into itself, so it is filled in place and never
// copied; building it allocates nothing (the program child prepares one before its seccomp filter).
struct FdMessage {
  struct msghdr mh;
  struct iovec iov;
  char byte;
  alignas(struct cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
  FdMessage(int fd, char tag);
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

// Sends `fd` (retrying EINTR); an error names `what`.
Status send_fd(int sock, int fd, char tag, Stage stage, const char* what);

// Receives one message of at most `size` bytes into `buf` without blocking (MSG_DONTWAIT, received
// fds close-on-exec). Returns recvmsg's result: > 0 with *fd the fd carried (-1 if none; any more
// are closed), 0 at EOF, < 0 with errno set.
ssize_t recv_with_fd(int sock, char* buf, std::size_t size, int* fd);
// recv_with_fd of a one-byte message (send_fd's).
ssize_t recv_fd(int sock, int* fd);

}  // namespace sbx
