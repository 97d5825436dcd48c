#include "runtime/base/output_relay.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "runtime/base/signals.hpp"

namespace sbx {
namespace {

void on_alarm(int) {}

// For a guarded sink: interrupts a write that blocks although poll said POLLOUT (another writer
// of the same pipe filled it in between; a terminal's line discipline expanding "\n" to "\r\n"
// past the room it reported). ITIMER_REAL's SIGALRM, caught by a handler that does nothing and
// installed without SA_RESTART, makes the write return what it wrote so far, or EINTR. SIGALRM
// is unblocked for the write (the caller's mask may block it) and the timer disarmed before the
// handler goes: a SIGALRM generated meanwhile was delivered on the way out of a system call.
class WriteTimeGuard {
 public:
  static constexpr int kLimitUs = 20'000;
  WriteTimeGuard() : alarm_(SIGALRM, on_alarm, 0), unblocked_(SIG_UNBLOCK, alarm_set()) {
    struct itimerval it = {};
    it.it_value.tv_usec = kLimitUs;
    ::setitimer(ITIMER_REAL, &it, nullptr);
  }
  ~WriteTimeGuard() {
    struct itimerval off = {};
    ::setitimer(ITIMER_REAL, &off, nullptr);
  }
  WriteTimeGuard(const WriteTimeGuard&) = delete;
  WriteTimeGuard& operator=(const WriteTimeGuard&) = delete;

 private:
  static const sigset_t& alarm_set() {
    static const sigset_t set = [] {
      sigset_t s;
      sigemptyset(&s);
      sigaddset(&s, SIGALRM);
      return s;
    }();
    return set;
  }
  SignalDispositionGuard alarm_;  // destroyed last: after the timer is off and the mask is back
  SignalMaskGuard unblocked_;
};

// The errors that mean the reader of a pipe, FIFO, socket or terminal has gone for good.
bool reader_gone(int err, OutputSink::Mode mode) {
  return err == EPIPE || err == ECONNRESET || err == ENXIO || (err == EIO && mode != OutputSink::Mode::file);
}

}  // namespace

int reopen_private(int fd, int flags) {
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  return ::open(path.c_str(), flags | O_CLOEXEC | O_NOCTTY);
}

// Why each way (sbx's stdout/stderr are shared with the caller and with every other process
// that inherited them: O_NONBLOCK set on them with fcntl would be set on the caller's file
// description too, and an unsuspecting shell or `tee` after sbx would then get EAGAIN):
//  - regular files and block devices: a write does not wait for a reader (the page cache takes
//    it), so a plain write on the shared description is right, and keeps its O_APPEND/offset.
//  - sockets: send() with MSG_DONTWAIT is non-blocking per call, and MSG_NOSIGNAL turns a gone
//    peer into EPIPE instead of SIGPIPE, without touching the description.
//  - pipes, FIFOs, terminals and other character devices: opening /proc/self/fd/N creates a new
//    open file description of the same pipe or device (not a dup), whose O_NONBLOCK is sbx's
//    alone. O_NOCTTY: opening a terminal must not make it sbx's controlling terminal.
//  - when that open is refused (a pipe or terminal of another user: `sudo -u` in a pipeline;
//    an exclusive terminal), the shared description is written only after poll() reports room,
//    under a 20 ms timer that interrupts a write that blocks all the same (WriteTimeGuard).
OutputSink OutputSink::open(int fd) {
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    OutputSink s;
    s.error_ = fd < 0 ? EBADF : errno;
    return s;
  }
  if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) return OutputSink(fd, Mode::file, false);
  if (S_ISSOCK(st.st_mode)) return OutputSink(fd, Mode::socket, false);
  int own = reopen_private(fd, O_WRONLY | O_NONBLOCK);
  if (own >= 0) return OutputSink(own, Mode::reopened, true);
  if (errno == ENXIO) {  // a pipe or FIFO without a reader left: as EPIPE on the first write
    OutputSink s(fd, Mode::guarded, false);
    s.error_ = EPIPE;
    return s;
  }
  return OutputSink(fd, Mode::guarded, false);
}

OutputSink OutputSink::owned_nonblocking(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  return OutputSink(fd, Mode::owned, true);
}

OutputSink::OutputSink(OutputSink&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), mode_(o.mode_), owned_(std::move(o.owned_)), error_(o.error_) {}

OutputSink& OutputSink::operator=(OutputSink&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = std::exchange(o.fd_, -1);
    mode_ = o.mode_;
    owned_ = std::move(o.owned_);
    error_ = o.error_;
  }
  return *this;
}

OutputSink::~OutputSink() { release(); }

void OutputSink::release() {
  owned_.reset();
  fd_ = -1;
}

void OutputSink::fail(int err) {
  if (!error_) error_ = err;
}

ssize_t OutputSink::write_some(const char* p, std::size_t n) {
  if (error_) {
    errno = error_;
    return -1;
  }
  ssize_t w;
  if (mode_ == Mode::socket) {
    w = ::send(fd_, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  } else if (mode_ == Mode::guarded) {
    struct pollfd pfd = {fd_, POLLOUT, 0};
    if (::poll(&pfd, 1, 0) <= 0) return 0;
    if (pfd.revents & (POLLERR | POLLHUP)) {
      fail(EPIPE);
      errno = EPIPE;
      return -1;
    }
    WriteTimeGuard guard;
    w = ::write(fd_, p, n);
  } else {
    w = ::write(fd_, p, n);
  }
  if (w >= 0) return w;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  fail(errno);
  return -1;
}

namespace {
bool is_socket(int fd) {
  struct stat st;
  return fd >= 0 && ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}
}  // namespace

OutputRelay::OutputRelay(int src, OutputSink sink, std::optional<std::int64_t> limit, Unread unread)
    : src_(src),
      src_socket_(is_socket(src)),
      adopted_(src >= 0),
      unread_(unread),
      sink_(std::move(sink)),
      limit_(limit),
      buf_(new char[kBufferBytes]) {
  if (sink_.error() && reader_gone(sink_.error(), sink_.mode())) {
    stats_.reader_closed = true;
    close_source();
  } else if (sink_.error()) {
    stats_.write_error = std::strerror(sink_.error());
  }
}

OutputRelay::~OutputRelay() = default;

void OutputRelay::adopt_source(int fd) {
  UniqueFd got(fd);
  if (!got.ok() || adopted_ || stats_.reader_closed) return;  // closed with `got`
  adopted_ = true;
  src_ = std::move(got);
  src_socket_ = is_socket(fd);
}

ssize_t OutputRelay::read_source(char* dst, std::size_t n) {
  return src_socket_ ? ::recv(src_.get(), dst, n, MSG_DONTWAIT) : ::read(src_.get(), dst, n);
}

// The source has ended: once what it gave is delivered, so has the stream (see flush()).
void OutputRelay::end_of_source() {
  src_.reset();
  stats_.source_eof = true;
  if (!pending()) sink_.close();
}

std::uint64_t OutputRelay::room_under_limit() const {
  if (!limit_) return UINT64_MAX;
  std::uint64_t lim = static_cast<std::uint64_t>(std::max<std::int64_t>(0, *limit_));
  return lim > accepted_ ? lim - accepted_ : 0;
}

int OutputRelay::src_poll_fd() const {
  if (!src_.ok()) return -1;
  // Past the limit, or with nowhere to deliver to, bytes are read and counted, never kept.
  if (room_under_limit() == 0 || sink_.error()) return src_.get();
  return tail_ - head_ < kBufferBytes ? src_.get() : -1;
}

short OutputRelay::sink_events() const { return pending() ? POLLOUT : 0; }

// A few rounds per wake-up while the reader keeps up: each round saves a pass of the poll loop,
// and the bound keeps a fast writer from starving the loop's other fds.
void OutputRelay::on_src_ready() {
  for (int round = 0; round < 4 && src_.ok(); ++round) {
    std::uint64_t seen = accepted_ + stats_.dropped_bytes;
    read_into_buffer();
    flush();
    if (accepted_ + stats_.dropped_bytes == seen || pending()) break;  // drained, or the reader is full
  }
}

void OutputRelay::read_into_buffer() {
  char scratch[16384];
  bool keep = room_under_limit() > 0 && !sink_.error();
  if (keep && tail_ == kBufferBytes && head_ > 0) {  // make the free space contiguous
    std::memmove(buf_.get(), buf_.get() + head_, tail_ - head_);
    tail_ -= head_;
    head_ = 0;
  }
  if (keep && tail_ == kBufferBytes) return;  // full: poll should not have asked
  char* dst = keep ? buf_.get() + tail_ : scratch;
  std::size_t want = keep ? kBufferBytes - tail_ : sizeof scratch;
  ssize_t n = read_source(dst, want);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) return end_of_source();  // EOF, or an error (EIO from a pty master whose other side has closed)
  std::uint64_t got = static_cast<std::uint64_t>(n);
  std::uint64_t pass = std::min(got, room_under_limit());
  accepted_ += pass;
  stats_.dropped_bytes += got - pass;
  if (got > pass) stats_.truncated = true;
  if (!keep) stats_.undelivered_bytes += pass;  // nowhere to deliver them (write_error)
  else tail_ += pass;
}

void OutputRelay::flush() {
  while (pending()) {
    ssize_t w = sink_.write_some(buf_.get() + head_, tail_ - head_);
    if (w == 0) break;
    if (w < 0) {
      int err = sink_.error() ? sink_.error() : errno;
      stats_.undelivered_bytes += tail_ - head_;
      head_ = tail_ = 0;
      if (reader_gone(err, sink_.mode())) {
        stats_.reader_closed = true;
        close_source();  // the program's next write gets EPIPE (or SIGPIPE), as without sbx
      } else {
        stats_.write_error = std::strerror(err);
      }
      return;
    }
    hash_.update(buf_.get() + head_, static_cast<std::size_t>(w));
    stats_.bytes += static_cast<std::uint64_t>(w);
    head_ += static_cast<std::size_t>(w);
  }
  if (!pending()) {
    head_ = tail_ = 0;
    if (stats_.source_eof) sink_.close();  // all delivered: the reader of a pipe sbx made sees EOF
  }
}

void OutputRelay::on_sink_ready(short revents) {
  if (sink_.error()) return;
  // POLLERR on a pipe's write end: no reader is left; POLLHUP: a terminal hung up, a socket shut.
  if ((revents & (POLLERR | POLLHUP)) && sink_.mode() != OutputSink::Mode::file) {
    sink_.fail(EPIPE);
    stats_.reader_closed = true;
    stats_.undelivered_bytes += tail_ - head_;
    head_ = tail_ = 0;
    close_source();
    return;
  }
  if (revents & POLLOUT) flush();
}

// What the program left in its pipe is counted before the pipe goes (FIONREAD): those bytes
// were written, and will never be read. A write that races this very close is the one byte
// count the record cannot see.
void OutputRelay::close_source() {
  if (!src_.ok()) return;
  int unread = 0;
  if (unread_ == Unread::undelivered && ::ioctl(src_.get(), FIONREAD, &unread) == 0 && unread > 0)
    count_unread(static_cast<std::uint64_t>(unread));
  src_.reset();
}

void OutputRelay::set_limit(std::optional<std::int64_t> limit) {
  limit_ = limit;
  if (!limit_) return;
  // Nothing was delivered yet: what exceeds the limit can only be bytes counted as undelivered.
  std::uint64_t allowed = static_cast<std::uint64_t>(std::max<std::int64_t>(0, *limit_));
  if (accepted_ <= allowed) return;
  std::uint64_t excess = std::min(accepted_ - allowed, stats_.undelivered_bytes);
  accepted_ -= excess;
  stats_.undelivered_bytes -= excess;
  stats_.dropped_bytes += excess;
  stats_.truncated = true;
}

void OutputRelay::count_unread(std::uint64_t n) {
  std::uint64_t within = std::min(n, room_under_limit());
  accepted_ += within;
  stats_.undelivered_bytes += within;
  stats_.dropped_bytes += n - within;
  if (n > within) stats_.truncated = true;
}

void OutputRelay::abandon() {
  stats_.undelivered_bytes += tail_ - head_;
  head_ = tail_ = 0;
  close_source();
}

StreamStats OutputRelay::finish() {
  abandon();
  stats_.sha256 = hash_.final_hex();
  return stats_;
}

}  // namespace sbx
