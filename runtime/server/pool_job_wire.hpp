#pragma once
// How the server hands a pooled worker its one job (mcp_pool.cpp, PoolLauncher's hand-out; read by
// mcp_worker.cpp, await_pooled_job): one message on the worker's socket. A job of at most
// kInlineJobBytes travels in the message itself ('j', its length as 4 bytes in host order, its
// bytes): one sendmsg and one recvmsg, where a memfd cost the server four more system calls and
// the worker three, all on the call's start (bench/README.md, Spawn). A larger one travels as
// before, in a memfd ('J' with the fd): the server's loop never waits for a worker to read.
#include <cstddef>
#include <string>

#include "runtime/base/error.hpp"

namespace sbx {

// Far below an AF_UNIX stream socket's send buffer (~208 KiB), so that the one message is queued
// whole, at once, on the socket that carries nothing else from the server.
inline constexpr std::size_t kInlineJobBytes = 16 * 1024;

// Sends `text` without blocking; an error when the socket did not take the whole message.
Status send_pool_job(int sock, const std::string& text);

struct PoolJobRead {
  enum Kind {
    again,   // nothing yet (or a signal): poll again
    closed,  // EOF or the socket failed: the server is done with this worker
    job,     // `text` is the job's bytes
    invalid  // a message that is no job: `why` says how
  } kind = again;
  std::string text;
  std::string why;
};

// Reads the one message without blocking (a job's bytes are queued whole: send_pool_job), at most
// `max_bytes` of a memfd's job.
PoolJobRead recv_pool_job(int sock, std::size_t max_bytes);

}  // namespace sbx
