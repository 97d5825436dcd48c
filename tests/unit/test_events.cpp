#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "runtime/linux/events.hpp"
#include "runtime/model/spec.hpp"

using namespace sbx;
using nlohmann::json;

namespace {
std::string read_all(int fd) {
  std::string out;
  char buf[65536];
  ssize_t k;
  while ((k = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(k));
  return out;
}
std::int64_t mono_ms() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1'000'000;
}
}  // namespace

TEST_CASE("events: destinations are checked (fd:N, paths)") {
  CHECK(check_events_destination("fd:3"));
  CHECK_FALSE(check_events_destination("fd:"));
  CHECK_FALSE(check_events_destination("fd:x3"));
  CHECK_FALSE(check_events_destination("fd:12345678901"));
  CHECK_FALSE(check_events_destination(""));
  CHECK(check_events_destination("/tmp/events.jsonl"));
  auto zero = EventStream::open("fd:0");
  REQUIRE_FALSE(zero);
  CHECK(zero.error().stage == sbx::Stage("usage"));
  CHECK_FALSE(EventStream::open("fd:987654"));  // not open
  CHECK_FALSE(EventStream::open("/nonexistent-dir/x/events"));
}

TEST_CASE("events: JSON lines to a pipe, strings escaped and cut, seq and counts in the record") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  auto ev = EventStream::open("fd:" + std::to_string(p[1]));
  REQUIRE(ev);
  ev->emit("violation", {{"kind", "network"}, {"host", std::string("evil\x1b[31m\xff\xc3") + "\n"}, {"port", 80}});
  ev->emit("started", {{"run_id", "r1"}, {"long", std::string(5000, 'a')}});
  ev->finish();
  ::close(p[1]);
  std::string text = read_all(p[0]);
  ::close(p[0]);
  // Two lines, ASCII only, no raw control byte.
  CHECK(std::count(text.begin(), text.end(), '\n') == 2);
  for (unsigned char c : text) CHECK_MESSAGE((c == '\n' || (c >= 0x20 && c < 0x7f)), int(c));
  auto first = json::parse(text.substr(0, text.find('\n')));
  CHECK(first["event"] == "violation");
  CHECK(first["seq"] == 1);
  CHECK(first["time_ms"].is_number_integer());
  CHECK(first["host"].get<std::string>().rfind("evil\x1b[31m", 0) == 0);  // escaped on the wire, intact after parsing
  auto second = json::parse(text.substr(text.find('\n') + 1));
  CHECK(second["seq"] == 2);
  CHECK(second["long"].get<std::string>().size() == EventStream::kMaxString + 3);
  auto rec = ev->record_json();
  CHECK(rec["emitted"] == 2);
  CHECK(rec["written"] == 2);
  CHECK(rec["dropped"] == 0);
  CHECK(rec["stopped"].is_null());
}

TEST_CASE("events: a reader that does not read makes events drop, counted, and emit never blocks") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  ::fcntl(p[1], F_SETPIPE_SZ, 4096);
  auto ev = EventStream::open("fd:" + std::to_string(p[1]));
  REQUIRE(ev);
  std::int64_t t0 = mono_ms();
  for (int i = 0; i < 20000; ++i) ev->emit("violation", {{"kind", "seccomp"}, {"name", "mount"}, {"count", i}});
  // 20,000 events against a full pipe: no wait anywhere (a blocking emit would never return; the
  // bound is wide for an ASan build on a loaded 2-core machine, where this took 2.5 s once).
  CHECK(mono_ms() - t0 < 10000);
  CHECK(ev->poll_fd() >= 0);     // lines wait for POLLOUT
  ev->finish();
  auto rec = ev->record_json();
  CHECK(rec["emitted"] == 20000);
  std::uint64_t written = rec["written"], dropped = rec["dropped"];
  CHECK(dropped > 0);
  CHECK(written + dropped == 20000);
  // What the pipe holds is whole lines up to, at most, one cut at the end (counted as dropped).
  ::close(p[1]);
  std::string text = read_all(p[0]);
  ::close(p[0]);
  CHECK(static_cast<std::uint64_t>(std::count(text.begin(), text.end(), '\n')) == written);
}

TEST_CASE("events: a reader gone away stops delivery without SIGPIPE; the rest is counted") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  auto ev = EventStream::open("fd:" + std::to_string(p[1]));
  REQUIRE(ev);
  ::close(p[0]);
  ev->emit("started", {{"run_id", "x"}});
  ev->emit("exited", {{"status", "ok"}});
  ev->finish();
  ::close(p[1]);
  auto rec = ev->record_json();
  CHECK(rec["dropped"] == 2);
  CHECK(rec["written"] == 0);
  CHECK(rec["stopped"].is_string());
}

TEST_CASE("events: a FIFO without a reader is opened at once; its lines wait for a later reader") {
  char dir[] = "/tmp/sbx-events-XXXXXX";
  REQUIRE(::mkdtemp(dir));
  std::string fifo = std::string(dir) + "/ev";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::int64_t t0 = mono_ms();
  auto ev = EventStream::open(fifo);
  REQUIRE(ev);
  CHECK(mono_ms() - t0 < 1000);
  ev->emit("started", {{"run_id", "x"}});
  int r = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(r >= 0);
  char buf[256];
  ssize_t k = ::read(r, buf, sizeof buf);
  REQUIRE(k > 0);
  CHECK(json::parse(std::string(buf, static_cast<std::size_t>(k)))["event"] == "started");
  ev->finish();
  ::close(r);
  ::unlink(fifo.c_str());
  ::rmdir(dir);
}

TEST_CASE("events: a regular file is created 0600") {
  char dir[] = "/tmp/sbx-events-XXXXXX";
  REQUIRE(::mkdtemp(dir));
  std::string path = std::string(dir) + "/ev.jsonl";
  {
    auto ev = EventStream::open(path);
    REQUIRE(ev);
    ev->emit("exited", {{"status", "ok"}});
    ev->finish();
  }
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::string text = read_all(fd);
  ::close(fd);
  CHECK(json::parse(text)["event"] == "exited");
  ::unlink(path.c_str());
  ::rmdir(dir);
}

TEST_CASE("events: cgroup counters that grew become limit changes") {
  std::map<std::string, std::int64_t> before = {{"low", 0}, {"high", 0}, {"max", 2}, {"oom", 0}, {"oom_kill", 0}};
  std::map<std::string, std::int64_t> after = {{"low", 0}, {"high", 0}, {"max", 5}, {"oom", 1}, {"oom_kill", 1}};
  auto c = limit_changes("memory", before, after);
  REQUIRE(c.size() == 3);
  CHECK(c[0] == json{{"counter", "max"}, {"value", 5}, {"delta", 3}});
  CHECK(c[1]["counter"] == "oom");
  CHECK(c[2]["counter"] == "oom_kill");
  CHECK(limit_changes("pids", {{"max", 0}}, {{"max", 4}})[0]["delta"] == 4);
  // cpu.stat: only throttling is a limit event, not usage.
  auto cpu = limit_changes("cpu", {{"usage_usec", 10}, {"nr_throttled", 1}}, {{"usage_usec", 900}, {"nr_throttled", 3}});
  REQUIRE(cpu.size() == 1);
  CHECK(cpu[0]["counter"] == "nr_throttled");
  CHECK(limit_changes("memory", after, after).empty());
}

TEST_CASE("events: the file is capped; past the cap events are counted and one last truncated event says so") {
  char dir[] = "/tmp/sbx-events-XXXXXX";
  REQUIRE(::mkdtemp(dir));
  std::string path = std::string(dir) + "/ev.jsonl";
  json rec;
  {
    auto ev = EventStream::open(path);
    REQUIRE(ev);
    ev->set_max_bytes(1);                       // under the floor: the floor holds
    ev->set_max_bytes(EventStream::kMaxBytes);  // never raised again
    CHECK(ev->record_json()["max_bytes"] == EventStream::kMinBytes);
    // A regular file takes every write: only the cap drops events here.
    for (int i = 0; i < 5000; ++i) ev->emit("violation", {{"kind", "seccomp"}, {"name", "mount"}, {"count", i + 1}});
    ev->emit("exited", {{"status", "ok"}});
    ev->finish();
    ev->finish();  // once only
    rec = ev->record_json();
  }
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK(static_cast<std::size_t>(st.st_size) <= EventStream::kMinBytes);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::string text = read_all(fd);
  ::close(fd);
  REQUIRE(!text.empty());
  REQUIRE(text.back() == '\n');
  std::size_t lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
  auto last = json::parse(text.substr(text.rfind('\n', text.size() - 2) + 1));
  CHECK(last["event"] == "truncated");
  CHECK(last["limit_bytes"] == EventStream::kMinBytes);
  CHECK(last["seq"] == 5002);
  CHECK(last["first_dropped_seq"] == lines);  // the events before it were all written
  CHECK(last["dropped"] == 5002 - lines);     // the exited event among them
  CHECK(rec["truncated"] == true);
  CHECK(rec["dropped_over_limit"] == last["dropped"]);
  CHECK(rec["emitted"] == 5002);
  CHECK(rec["written"] == lines);
  CHECK(rec["written"].get<std::uint64_t>() + rec["dropped"].get<std::uint64_t>() == 5002);
  ::unlink(path.c_str());
  ::rmdir(dir);
}

TEST_CASE("events: under the cap nothing is cut and no truncated event is written") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  auto ev = EventStream::open("fd:" + std::to_string(p[1]));
  REQUIRE(ev);
  ev->emit("started", {{"run_id", "r"}});
  ev->finish();
  ::close(p[1]);
  std::string text = read_all(p[0]);
  ::close(p[0]);
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  CHECK(ev->record_json()["truncated"] == false);
  CHECK(ev->record_json()["max_bytes"] == EventStream::kMaxBytes);
}
