#pragma once
// The supervisor's output relays: each copies one of the program's pipes to where sbx's own
// stdout/stderr go, through a bounded buffer, without ever blocking the supervisor's loop.
//
//   program --pipe--> [OutputRelay: cap, buffer, sha256] --OutputSink--> sbx's stdout/stderr
//
// Backpressure: while the buffer toward a slow or stopped reader is full, the relay stops reading
// the program's pipe, so the program blocks in its write — not sbx, which keeps serving the
// wall-time limit, forwarded signals, seccomp notifications and the egress proxy. When the
// reader goes away (EPIPE), the relay closes the program's pipe: the program's next write gets
// EPIPE/SIGPIPE, as it would have without sbx in between.
//
// The relay is fed by the poll loop (supervisor.cpp): it says which fds to poll for what, and
// is told what poll saw. Any byte source that is a non-blocking fd fits (a pipe, a pty master,
// the caller's stdin toward the program: stdin_relay.hpp), and a socket read with MSG_DONTWAIT.
// Once the source has ended and everything is delivered the relay lets go of its sink, so that
// a reader at the other end of a pipe sbx made sees EOF.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/sha256.hpp"

namespace sbx {

// Per stream, in the trace record (stream_json in trace.cpp).
struct StreamStats {
  std::uint64_t bytes = 0;              // bytes delivered to sbx's reader (what it saw)
  std::uint64_t dropped_bytes = 0;      // bytes the program wrote past the output limit
  std::uint64_t undelivered_bytes = 0;  // within the limit, but never taken by the reader
  std::string sha256;                   // of the bytes delivered
  bool truncated = false;               // the output limit was reached
  bool reader_closed = false;           // the reader closed its end; the program's pipe was closed
  std::string write_error;              // a write failed for another reason ("" if none)
  bool source_eof = false;              // the source ended (EOF, or a read error such as EIO)
};

// Opens `path_fd`'s file again through /proc/self/fd: a new open file description of the same
// pipe, FIFO or terminal, so that flags (O_NONBLOCK) set on it are sbx's own. -1 with errno on
// failure (EACCES for a pipe or terminal that belongs to another user, ENXIO for a FIFO or pipe
// without a reader).
int reopen_private(int fd, int flags);

// Where relayed bytes go, written without blocking. How depends on what the fd is (open()).
class OutputSink {
 public:
  enum class Mode { none, reopened, socket, file, guarded, owned };
  OutputSink() = default;
  // Chooses the way to write to `fd` (sbx's stdout or stderr, a memfd) without blocking it and
  // without touching its shared file status flags; `fd` itself stays open and unowned.
  static OutputSink open(int fd);
  // For an fd sbx made itself (a pipe toward the sandbox): set O_NONBLOCK on it and own it.
  static OutputSink owned_nonblocking(int fd);
  OutputSink(OutputSink&& o) noexcept;
  OutputSink& operator=(OutputSink&& o) noexcept;
  ~OutputSink();

  // Bytes written now; 0: the reader is not taking more now (poll fd() for POLLOUT); -1 with
  // errno: it cannot take any more, ever (EPIPE when the reader has gone).
  ssize_t write_some(const char* p, std::size_t n);
  int fd() const { return fd_; }  // to poll; -1 for none
  Mode mode() const { return mode_; }
  // The error that ended the sink: 0 while it is usable.
  int error() const { return error_; }
  void fail(int err);
  // The relay is done with the sink: an owned fd is closed (its reader sees EOF).
  void close() { release(); }

 private:
  OutputSink(int fd, Mode mode, bool owned) : fd_(fd), mode_(mode), owned_(owned ? fd : -1) {}
  void release();
  int fd_ = -1;  // owned_'s, or the caller's (not closed here)
  Mode mode_ = Mode::none;
  UniqueFd owned_;
  int error_ = 0;
};

class OutputRelay {
 public:
  // A pipe's default capacity, so one read can drain a full pipe; and below malloc's mmap
  // threshold (128 KiB), so a run's two relays cost no mmap, munmap or fresh page at the start
  // of a pooled call (bench/README.md, Spawn).
  static constexpr std::size_t kBufferBytes = 64 * 1024;
  // What the relay counts when it closes its source early (close_source()).
  enum class Unread {
    undelivered,  // bytes still in the source were written by the program: they are lost
    not_taken     // the source is the caller's (stdin_relay.hpp): what is left there stays theirs
  };
  // `src`: the program's end (read side, O_NONBLOCK), owned and closed by the relay; -1 for a
  // source that arrives later (adopt_source()).
  OutputRelay(int src, OutputSink sink, std::optional<std::int64_t> limit, Unread unread = Unread::undelivered);
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // What to poll: the source for POLLIN while the buffer has room (-1 while it is full: that is
  // the backpressure), the sink for POLLOUT while bytes wait (and for POLLERR/POLLHUP always).
  int src_poll_fd() const;
  int sink_poll_fd() const { return sink_.error() ? -1 : sink_.fd(); }
  short sink_events() const;
  void on_src_ready();
  void on_sink_ready(short revents);

  // A source that arrives once the run is under way (the pty master: stdin_relay.hpp). A relay
  // reads one source in its life: a second, or one after the reader has gone, is closed.
  void adopt_source(int fd);
  // The output limit, when it is known only after the relay was made (a pooled call's, whose
  // supervisor is made before the call arrives: supervisor.hpp). Before any byte is read; what
  // was counted already (a source closed at once because its reader had gone) is held to it.
  void set_limit(std::optional<std::int64_t> limit);
  bool source_open() const { return src_.ok(); }
  bool reader_closed() const { return stats_.reader_closed; }
  bool truncated() const { return stats_.truncated; }
  bool pending() const { return tail_ > head_; }
  bool active() const { return source_open() || pending(); }
  // Nothing more will be delivered (the run's time is up, or it is over): what waits in the
  // buffer and in the program's pipe counts as undelivered; the pipe is closed.
  void abandon();
  StreamStats finish();

 private:
  void read_into_buffer();
  ssize_t read_source(char* dst, std::size_t n);
  void end_of_source();
  void flush();
  void close_source();
  void count_unread(std::uint64_t n);
  std::uint64_t room_under_limit() const;
  UniqueFd src_;
  bool src_socket_ = false;  // recv(MSG_DONTWAIT): a socket's O_NONBLOCK is the caller's to set
  bool adopted_ = false;
  Unread unread_;
  OutputSink sink_;
  std::optional<std::int64_t> limit_;
  std::unique_ptr<char[]> buf_;
  std::size_t head_ = 0, tail_ = 0;
  std::uint64_t accepted_ = 0;  // bytes taken from the program within the limit
  Sha256 hash_;
  StreamStats stats_;
};

}  // namespace sbx
