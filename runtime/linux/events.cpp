#include "runtime/linux/events.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "runtime/linux/cgroup.hpp"
#include "runtime/base/progress_line.hpp"
#include "runtime/model/spec.hpp"
#include "runtime/base/signals.hpp"
#include "runtime/base/trace_field.hpp"

namespace sbx {
namespace {

// Milliseconds on the monotonic clock: the one helper (progress_line.hpp), by this file's name.
constexpr auto now_ms = monotonic_ms;

// Strings are cut (on a byte boundary: the dump below replaces a UTF-8 sequence cut in half),
// recursively; depth is the caller's (sbx builds every event, two levels at most).
void clip_strings(nlohmann::ordered_json& j) {
  if (j.is_string()) {
    auto& s = j.get_ref<std::string&>();
    if (s.size() > EventStream::kMaxString) s = s.substr(0, EventStream::kMaxString) + "...";
  } else if (j.is_structured()) {
    for (auto& v : j) clip_strings(v);
  }
}

}  // namespace

Result<EventStream> EventStream::open(const std::string& where) {
  SBX_TRY(check_events_destination(where));
  EventStream s;
  s.where_ = where;
  s.start_ms_ = now_ms();
  if (where.rfind("fd:", 0) == 0) {
    int fd = *parse_events_fd(where);
    if (fd == 0) return make_error("usage", "--events fd:0: fd 0 is sbx's stdin, not a place to write events");
    if (::fcntl(fd, F_GETFD) < 0)
      return make_error("usage", "--events " + where + ": fd " + std::to_string(fd) + " is not open", errno);
    int acc = ::fcntl(fd, F_GETFL) & O_ACCMODE;
    if (acc == O_RDONLY)
      return make_error("usage", "--events " + where + ": fd " + std::to_string(fd) + " is open read-only");
    // Not owned, and its shared file status flags untouched (output_relay.hpp explains how).
    s.sink_ = OutputSink::open(fd);
  } else {
    struct stat st;
    int fd = -1;
    if (::stat(where.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)) {
      // O_WRONLY on a FIFO waits for a reader, and O_NONBLOCK makes that ENXIO. Without a reader
      // sbx opens it read-write (Linux allows that on a FIFO): the run does not wait, the lines
      // wait in the pipe for a reader that comes later, and past the pipe's size they drop.
      fd = ::open(where.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0 && errno == ENXIO) fd = ::open(where.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    } else {
      fd = ::open(where.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600);
    }
    if (fd < 0) return sys_error("usage", "--events " + where + ": cannot open it");
    s.sink_ = OutputSink::owned_nonblocking(fd);
  }
  if (s.sink_.error())
    s.stop_reason_ = std::string("the destination cannot be written: ") + std::strerror(s.sink_.error());
  return s;
}

void EventStream::emit(std::string_view type, nlohmann::json fields) { append(type, std::move(fields), false); }

void EventStream::append(std::string_view type, nlohmann::json fields, bool last) {
  ++seq_;
  if (!stop_reason_.empty()) {
    ++dropped_;
    return;
  }
  nlohmann::ordered_json e = {{"event", type}, {"seq", seq_}, {"time_ms", now_ms() - start_ms_}};
  if (fields.is_object())
    for (auto& [k, v] : fields.items()) e[k] = v;
  clip_strings(e);
  // ASCII only; text of outside origin (a host name the program asked for) is escaped, never raw.
  std::string line = e.dump(-1, ' ', true, nlohmann::ordered_json::error_handler_t::replace);
  line += '\n';
  // The cap: every event but the last "truncated" one leaves its room free.
  std::size_t room = max_bytes_ > kTruncatedRoom ? max_bytes_ - kTruncatedRoom : 0;
  if (!last && (over_cap_ > 0 || taken_bytes_ + line.size() > room)) {
    if (over_cap_++ == 0) first_over_cap_ = seq_;
    ++dropped_;
    return;
  }
  if (buf_.size() - head_ + line.size() > kMaxBuffered) {
    ++dropped_;
    return;
  }
  taken_bytes_ += line.size();
  buf_ += line;
  ends_.push_back(buf_.size());
  flush();
}

void EventStream::flush() {
  if (head_ >= buf_.size()) return;
  // A reader gone away is EPIPE here, never SIGPIPE for sbx (also after the supervisor's own
  // guard in sandbox.cpp has ended).
  SignalDispositionGuard no_sigpipe(SIGPIPE, SIG_IGN);
  while (head_ < buf_.size()) {
    ssize_t w = sink_.write_some(buf_.data() + head_, buf_.size() - head_);
    if (w == 0) break;  // no room now: the loop polls for POLLOUT
    if (w < 0) {
      int err = errno;
      stop_reason_ =
          err == EPIPE ? "the reader closed the destination" : std::string("write failed: ") + std::strerror(err);
      drop_pending();
      return;
    }
    head_ += static_cast<std::size_t>(w);
    std::size_t done = 0;
    while (done < ends_.size() && ends_[done] <= head_) ++done;
    written_ += done;
    ends_.erase(ends_.begin(), ends_.begin() + static_cast<long>(done));
  }
  if (head_ == buf_.size()) {
    buf_.clear();
    head_ = 0;
  } else if (head_ >= kMaxBuffered / 2) {
    buf_.erase(0, head_);
    for (auto& e : ends_) e -= head_;
    head_ = 0;
  }
}

// Lines not written whole are dropped; a line cut after its first bytes counts as dropped too.
void EventStream::drop_pending() {
  dropped_ += ends_.size();
  ends_.clear();
  buf_.clear();
  head_ = 0;
}

int EventStream::poll_fd() const { return head_ < buf_.size() && stop_reason_.empty() ? sink_.fd() : -1; }

void EventStream::on_writable(short revents) {
  flush();
  // POLLERR/POLLHUP without room: the destination will not take more (a terminal hung up).
  if (head_ < buf_.size() && (revents & (POLLERR | POLLHUP)) && !(revents & POLLOUT)) {
    stop_reason_ = "the destination reported an error or hang-up";
    drop_pending();
  }
}

void EventStream::finish() {
  if (finished_) return;
  finished_ = true;
  // The cap was reached: the last line says so, and how many events it cost.
  if (over_cap_ > 0)
    append("truncated", {{"limit_bytes", max_bytes_}, {"dropped", over_cap_}, {"first_dropped_seq", first_over_cap_}},
           true);
  flush();
  if (head_ < buf_.size()) drop_pending();
  sink_.close();
  if (stop_reason_.empty()) stop_reason_ = "closed";
}

nlohmann::json EventStream::record_json() const {
  return trace_object(
      {{"events/destination", where_},
       {"events/emitted", seq_},
       {"events/written", written_},
       {"events/dropped", dropped_},
       {"events/buffer_bytes", kMaxBuffered},
       {"events/max_bytes", max_bytes_},
       {"events/truncated", over_cap_ > 0},
       {"events/dropped_over_limit", over_cap_},
       {"events/stopped",
        stop_reason_ == "closed" || stop_reason_.empty() ? nlohmann::json(nullptr) : nlohmann::json(stop_reason_)}});
}

nlohmann::json limit_changes(const std::string& controller, const std::map<std::string, std::int64_t>& before,
                             const std::map<std::string, std::int64_t>& after) {
  nlohmann::json out = nlohmann::json::array();
  for (auto& [k, v] : after) {
    // cpu.stat is mostly usage; its throttling counter is the limit event. memory.events
    // (low, high, max, oom, oom_kill, oom_group_kill) and pids.events (max) are all limit events.
    if (controller == "cpu" && k != "nr_throttled") continue;
    auto it = before.find(k);
    std::int64_t was = it == before.end() ? 0 : it->second;
    if (v > was) out.push_back({{"counter", k}, {"value", v}, {"delta", v - was}});
  }
  return out;
}

CgroupEvents::CgroupEvents(int dir_fd, bool cpu, EventStream* out) : out_(out) {
  if (dir_fd < 0 || !out_) return;
  std::vector<std::pair<const char*, const char*>> files = {{"memory", "memory.events"}, {"pids", "pids.events"}};
  if (cpu) files.push_back({"cpu", "cpu.stat"});
  for (auto [controller, file] : files) {
    UniqueFd fd(::openat(dir_fd, file, O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd.ok()) continue;  // the controller is not enabled for the run cgroup
    files_.push_back({controller, file, std::move(fd), {}});
    read(files_.back());  // the baseline: only what changes during the run is an event
  }
  if (cpu && !files_.empty() && files_.back().controller == "cpu") {
    timer_fd_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    struct itimerspec its = {};
    its.it_value.tv_nsec = its.it_interval.tv_nsec = kCpuStatPeriodMs * 1'000'000;
    if (timer_fd_.ok() && ::timerfd_settime(timer_fd_.get(), 0, &its, nullptr) != 0) timer_fd_.reset();
  }
}

CgroupEvents::~CgroupEvents() = default;

// memory.events and pids.events: POLLPRI (with POLLERR) once the kernel modified the file since
// this fd last read it (kernfs_generic_poll); reading re-arms it. cpu.stat: the timer.
void CgroupEvents::add_pollfds(std::vector<struct pollfd>& p) const {
  for (auto& w : files_)
    if (w.controller != "cpu") p.push_back({w.fd.get(), POLLPRI, 0});
  if (timer_fd_.ok()) p.push_back({timer_fd_.get(), POLLIN, 0});
}

void CgroupEvents::on_events(const struct pollfd* p, std::size_t n) {
  std::size_t i = 0;
  for (auto& w : files_) {
    if (w.controller == "cpu") continue;
    if (i < n && (p[i].revents & (POLLPRI | POLLERR))) read(w);
    ++i;
  }
  if (timer_fd_.ok() && i < n && (p[i].revents & POLLIN)) {
    std::uint64_t ticks;
    (void)!::read(timer_fd_.get(), &ticks, sizeof ticks);
    for (auto& w : files_)
      if (w.controller == "cpu") read(w);
  }
}

void CgroupEvents::read_all() {
  for (auto& w : files_) read(w);
}

void CgroupEvents::read(Watched& w) {
  char buf[4096];
  ssize_t k = ::pread(w.fd.get(), buf, sizeof buf - 1, 0);
  if (k <= 0) return;
  auto now = parse_keyed_counters(std::string_view(buf, static_cast<std::size_t>(k)));
  bool baseline = w.last.empty();
  if (!baseline) {
    for (auto& c : limit_changes(w.controller, w.last, now)) {
      c["source"] = w.file;
      if (w.controller == "cpu" && now.count("throttled_usec")) c["throttled_usec"] = now["throttled_usec"];
      out_->emit("limit", std::move(c));
    }
  }
  w.last = std::move(now);
  if (w.last.empty()) w.last[""] = 0;  // read, even if empty: later reads compare against it
}

}  // namespace sbx
