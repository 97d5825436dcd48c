#pragma once
// Live events (`--events FILE|fd:N`, the profile's "events" key): JSON lines that say what
// happens in a run while it happens — started, each refused system call or network attempt,
// output truncated, limit events of the run cgroup, artifact export, exited.
//
// The supervisor's loop must never wait for an operator's reader (a stalled `tail`, a FIFO no one
// reads): events go into a bounded in-memory buffer, and the buffer is drained with non-blocking
// writes (OutputSink, output_relay.hpp) whenever the loop's poll() says the destination has room.
// When the buffer is full an event is dropped, counted, and the record says how many
// (EventStream::record_json): an event is never lost silently.
//
// Everything in an event is JSON-escaped ASCII (\uXXXX for control and non-ASCII characters;
// bytes that are not UTF-8 replaced): names of system calls, host names a program asked the
// proxy for, reasons. Strings are cut at kMaxString bytes, so one event stays one short line.
//
// CgroupEvents reads the run cgroup's memory.events and pids.events when the kernel signals a
// change (poll() POLLPRI on the open file: kernfs notifies modified event files), and cpu.stat on
// a timer (throttling has no notification), and turns increased counters into "limit" events.
#include <poll.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/output_relay.hpp"

namespace sbx {

class EventStream {
 public:
  static constexpr std::size_t kMaxBuffered = 64 * 1024;  // bytes of unwritten lines held
  static constexpr std::size_t kMaxString = 512;          // bytes of one string value
  // The most bytes of events one run writes (a program that makes refused calls in a loop wrote
  // 15 MB in 3 s, ~18 GB an hour): bounded like stdout and stderr, by the same definition — the
  // run's output limit (set_max_bytes), within [kMinBytes, kMaxBytes] — past it events are
  // dropped, counted, and one last "truncated" event says how many (its room, kTruncatedRoom, is
  // kept from the start). The floor keeps a tiny --output-limit from silencing every event.
  static constexpr std::size_t kMaxBytes = 64u << 20;
  static constexpr std::size_t kMinBytes = kMaxBuffered;
  static constexpr std::size_t kTruncatedRoom = 256;

  // "fd:N" (an fd sbx inherited, written without changing its flags: OutputSink::open) or a path:
  // a FIFO is opened without waiting for a reader (one that comes later finds what the pipe
  // holds), anything else is created or truncated, mode 0600 (events name the run's command).
  // A bad destination is the caller's error (stage "usage").
  static Result<EventStream> open(const std::string& where);

  EventStream() = default;
  EventStream(EventStream&&) = default;
  EventStream& operator=(EventStream&&) = default;

  // Appends one event: {"event": type, "seq": n, "time_ms": since start, ...fields} as one line,
  // then tries to write (non-blocking). `fields` must be an object.
  void emit(std::string_view type, nlohmann::json fields);
  // For the poll loop: the fd to poll for POLLOUT while lines wait (-1 when none wait).
  int poll_fd() const;
  void on_writable(short revents);
  // The run is over: one last non-blocking write; what is still unwritten is dropped and counted.
  void finish();
  // The record's "events" member: destination, emitted, written, dropped (events), and why
  // delivery stopped, if it did.
  nlohmann::json record_json() const;

  // Lowers the cap (kMaxBytes) to `max` bytes, not under kMinBytes; never raises it.
  void set_max_bytes(std::size_t max) { max_bytes_ = std::min(max_bytes_, std::max(max, kMinBytes)); }

  // CLOCK_MONOTONIC ms the events' time_ms counts from (the sandbox's creation).
  void set_start_ms(std::int64_t ms) { start_ms_ = ms; }

 private:
  void flush();
  void drop_pending();
  void append(std::string_view type, nlohmann::json fields, bool last);  // last: the "truncated" event

  std::string where_;
  OutputSink sink_;
  std::string buf_;                // unwritten bytes: whole lines, the first possibly begun
  std::size_t head_ = 0;           // bytes of buf_ already written
  std::vector<std::size_t> ends_;  // end offset (in buf_) of each line in it, in order
  std::uint64_t seq_ = 0, written_ = 0, dropped_ = 0;
  std::size_t max_bytes_ = kMaxBytes;
  std::size_t taken_bytes_ = 0;       // bytes of lines taken into the buffer (the cap counts them)
  std::uint64_t over_cap_ = 0;        // events dropped because the cap was reached
  std::uint64_t first_over_cap_ = 0;  // the seq of the first of them
  bool finished_ = false;
  std::string stop_reason_;  // "" while the destination takes events
  std::int64_t start_ms_ = 0;
};

// The limit events of a run cgroup (see the top of this file). Emits into an EventStream.
class CgroupEvents {
 public:
  static constexpr std::int64_t kCpuStatPeriodMs = 500;
  // `cgroup_dir_fd`: the run cgroup's directory (RunCgroup::dir_fd()). Files the kernel does not
  // offer (a controller not enabled) are skipped. `cpu`: watch cpu.stat's throttling too.
  CgroupEvents(int cgroup_dir_fd, bool cpu, EventStream* out);
  ~CgroupEvents();
  CgroupEvents(const CgroupEvents&) = delete;
  CgroupEvents& operator=(const CgroupEvents&) = delete;

  void add_pollfds(std::vector<struct pollfd>& p) const;
  void on_events(const struct pollfd* p, std::size_t n);
  // Reads every file once more (the run has ended: the last OOM kill is counted by now).
  void read_all();

 private:
  struct Watched {
    std::string controller, file;
    UniqueFd fd;
    std::map<std::string, std::int64_t> last;
  };
  void read(Watched& w);
  std::vector<Watched> files_;  // memory.events, pids.events, cpu.stat (in this order, if open)
  UniqueFd timer_fd_;           // cpu.stat's period
  EventStream* out_;
};

// What of memory.events, pids.events and cpu.stat becomes a "limit" event, as {counter, value,
// delta} objects for counters that grew from `before` to `after` (a unit-tested pure function).
nlohmann::json limit_changes(const std::string& controller, const std::map<std::string, std::int64_t>& before,
                             const std::map<std::string, std::int64_t>& after);

}  // namespace sbx
