// cgroup v2 run cgroups and limit planning.
//
// Two kinds of tests live here:
//  - pure ones (parsers, naming, planning, refusals against a fake cgroup directory in /tmp) that
//    run everywhere without root;
//  - "real cgroup v2" ones that create run cgroups, put processes in them and watch the kernel
//    enforce memory.max, pids.max and cpu.max. They need a cgroup v2 offering memory+pids+cpu and
//    SBX_CGROUP_TESTS=1, and skip with the reason otherwise. tests/vm/run.sh runs them inside a
//    qemu guest (this development host is a v1/v2 hybrid whose v2 has only hugetlb — and its
//    cgroup hierarchies must never be written to).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "runtime/linux/cgroup.hpp"
#include "runtime/linux/limits_plan.hpp"

using namespace sbx;
namespace fs = std::filesystem;

// ---------------------------------------------------------------- pure helpers

TEST_CASE("cgroup: parse_proc_cgroup finds the v2 line in each layout") {
  // This host: hybrid, the v2 line last.
  CHECK(parse_proc_cgroup("9:name=systemd:/\n4:memory:/process_api/ca39\n1:cpu:/\n0::/\n") == "/");
  // Pure v2 under systemd.
  CHECK(parse_proc_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n") ==
        "/user.slice/user-1000.slice/session-3.scope");
  CHECK(parse_proc_cgroup("0::/a/sbx-supervisor") == "/a/sbx-supervisor");  // no trailing newline
  // Pure v1: no v2 path.
  CHECK(parse_proc_cgroup("4:memory:/x\n1:cpu,cpuacct:/x\n").empty());
  CHECK(parse_proc_cgroup("").empty());
}

TEST_CASE("cgroup: own_cgroup_path steps out of sbx-supervisor") {
  CHECK(own_cgroup_path("/") == "/");
  CHECK(own_cgroup_path("") == "/");
  CHECK(own_cgroup_path("/a/b") == "/a/b");
  CHECK(own_cgroup_path("/a/sbx-supervisor") == "/a");
  CHECK(own_cgroup_path("/sbx-supervisor") == "/");
  CHECK(own_cgroup_path("/a/not-sbx-supervisor") == "/a/not-sbx-supervisor");
}

TEST_CASE("cgroup: parse cpu.stat and memory.events") {
  auto cpu = parse_keyed_counters(
      "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\ncore_sched.force_idle_usec 0\n"
      "nr_periods 15\nnr_throttled 12\nthrottled_usec 987654\nnr_bursts 0\nburst_usec 0\n");
  CHECK(cpu.at("usage_usec") == 1234567);
  CHECK(cpu.at("user_usec") == 1000000);
  CHECK(cpu.at("system_usec") == 234567);
  CHECK(cpu.at("nr_throttled") == 12);
  CHECK(cpu.at("throttled_usec") == 987654);
  auto ev = parse_keyed_counters("low 0\nhigh 0\nmax 57\noom 1\noom_kill 1\noom_group_kill 1\n");
  CHECK(ev.at("oom") == 1);
  CHECK(ev.at("oom_kill") == 1);
  CHECK(ev.at("max") == 57);
  // cgroup.events, malformed and partial lines
  auto m = parse_keyed_counters("populated 0\nfrozen 0\ngarbage\nx y\nthree words here\nneg -5");
  CHECK(m.at("populated") == 0);
  CHECK(m.at("neg") == -5);
  CHECK(m.count("garbage") == 0);
  CHECK(m.count("x") == 0);
  CHECK(m.count("three") == 0);
}

TEST_CASE("cgroup: single counters and cpu.max") {
  CHECK(parse_single_counter("33554432\n") == 33554432);
  CHECK(parse_single_counter("0") == 0);
  CHECK_FALSE(parse_single_counter("max\n").has_value());
  CHECK_FALSE(parse_single_counter("").has_value());
  CHECK_FALSE(parse_single_counter("12 34").has_value());
  CHECK(format_cpu_max(0.5) == "50000 100000");
  CHECK(format_cpu_max(0.2) == "20000 100000");
  CHECK(format_cpu_max(2) == "200000 100000");
  CHECK(format_cpu_max(0.001) == "1000 100000");  // clamped to the kernel's minimum quota
}

TEST_CASE("cgroup: starttime from /proc/<pid>/stat, whatever comm holds") {
  std::string rest = " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654321 20 21\n";
  CHECK(parse_stat_starttime("42 (sbx)" + rest) == 987654321u);
  CHECK(parse_stat_starttime("42 (a b) c))" + rest) == 987654321u);
  CHECK_FALSE(parse_stat_starttime("42 (sbx) S 1 2").has_value());
  CHECK_FALSE(parse_stat_starttime("no paren").has_value());
  std::ifstream self("/proc/self/stat");
  std::stringstream ss;
  ss << self.rdbuf();
  CHECK(parse_stat_starttime(ss.str()).has_value());
}

TEST_CASE("cgroup: run cgroup names carry their owner") {
  std::string n = run_cgroup_name("20250101T000000-ab12.x", 4242, 123456);
  CHECK(n == "run-20250101T000000-ab12.x@4242.123456");
  auto o = parse_run_cgroup_name(n);
  REQUIRE(o.has_value());
  CHECK(o->run_id == "20250101T000000-ab12.x");
  CHECK(o->pid == 4242);
  CHECK(o->start == 123456u);
  CHECK_FALSE(parse_run_cgroup_name("run-x").has_value());
  CHECK_FALSE(parse_run_cgroup_name("run-@1.2").has_value());
  CHECK_FALSE(parse_run_cgroup_name("run-x@1").has_value());
  CHECK_FALSE(parse_run_cgroup_name("run-x@a.2").has_value());
  CHECK_FALSE(parse_run_cgroup_name("run-x@0.2").has_value());
  CHECK_FALSE(parse_run_cgroup_name("sbx-supervisor").has_value());
}

TEST_CASE("cgroup: cpu_time_recheck_ms") {
  CHECK(cpu_time_recheck_ms(1000, 0, 1) == 1000);
  CHECK(cpu_time_recheck_ms(1000, 0, 2) == 500);
  CHECK(cpu_time_recheck_ms(1000, 0, 0.5) == 2000);
  CHECK(cpu_time_recheck_ms(1000, 999500, 1) == 1);
  CHECK(cpu_time_recheck_ms(1000, 1000000, 1) == 0);
  CHECK(cpu_time_recheck_ms(1000, 2000000, 4) == 0);
}

// A fake cgroup "mount" in /tmp: lets create() and gc be tested for their refusals without
// touching any real hierarchy.
struct FakeCgroupRoot {
  std::string dir;
  explicit FakeCgroupRoot(const std::string& controllers) {
    char tmpl[] = "/tmp/sbx-fakecg.XXXXXX";
    dir = ::mkdtemp(tmpl);
    std::ofstream(dir + "/cgroup.controllers") << controllers << "\n";
    std::ofstream(dir + "/cgroup.subtree_control") << "";
  }
  ~FakeCgroupRoot() { fs::remove_all(dir); }
  CgroupInfo info() const {
    CgroupInfo i;
    i.layout = "v2";
    i.mount = dir;
    i.self_path = std::string(1, '/');  // (a literal here trips GCC 12's -Wrestrict false positive)
    std::istringstream in(slurp("cgroup.controllers"));
    std::string c;
    while (in >> c) i.controllers.push_back(c);
    i.writable = true;
    return i;
  }
  std::string slurp(const std::string& f) const {
    std::ifstream in(dir + "/" + f);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  int entries() const { return static_cast<int>(std::distance(fs::directory_iterator(dir), fs::directory_iterator())); }
};

TEST_CASE("cgroup: create refuses a cgroup v2 without our controllers, writing nothing") {
  FakeCgroupRoot hybrid("hugetlb");  // this host's v2
  auto r = RunCgroup::create(hybrid.info(), Limits{}, "r1");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().stage == sbx::Stage("cgroup"));
  CHECK(r.error().err == ENOTSUP);
  CHECK(r.error().message.find("hugetlb") != std::string::npos);
  CHECK(hybrid.entries() == 2);  // no sbx/ created
  CHECK(hybrid.slurp("cgroup.subtree_control").empty());
  CHECK(gc_stale_cgroups(hybrid.info()).ok());
  CHECK(hybrid.entries() == 2);

  FakeCgroupRoot nomem("pids cpu");
  Limits l;
  l.memory_bytes = 32 << 20;
  r = RunCgroup::create(nomem.info(), l, "r1");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("memory controller") != std::string::npos);
  CHECK(nomem.entries() == 2);

  r = RunCgroup::create(nomem.info(), Limits{}, "../escape");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().err == EINVAL);

  CgroupInfo none;
  none.layout = "v1";
  r = RunCgroup::create(none, Limits{}, "r1");
  CHECK_FALSE(r.ok());
  CHECK(gc_stale_cgroups(none).ok());
}

TEST_CASE("cgroup: enter_supervisor_leaf moves nothing, and writes nothing, where it must not") {
  FakeCgroupRoot hybrid("hugetlb");  // this host's v2: no controller a run cgroup could use
  CHECK_FALSE(enter_supervisor_leaf(hybrid.info()));
  CHECK(hybrid.entries() == 2);  // no sbx-supervisor/ made

  FakeCgroupRoot full("cpu memory pids");
  CgroupInfo root = full.info();
  root.root_subtree = true;  // root in the real root: run cgroups go under <mount>/sbx
  CHECK_FALSE(enter_supervisor_leaf(root));
  CgroupInfo in_leaf = full.info();
  in_leaf.self_path = "/sbx-supervisor";  // there already
  CHECK_FALSE(enter_supervisor_leaf(in_leaf));
  CHECK(full.entries() == 2);
  CgroupInfo none;
  none.layout = "v1";
  CHECK_FALSE(enter_supervisor_leaf(none));

  // Delegated, with controllers: the leaf is made and only this process is written there (in
  // this fake tree the leaf has no cgroup.procs, so the move itself fails and says so).
  CHECK_FALSE(enter_supervisor_leaf(full.info()));
  CHECK(fs::is_directory(full.dir + "/sbx-supervisor"));
  CHECK(full.slurp("cgroup.subtree_control").empty());  // controllers are the run's to enable
}

// ---------------------------------------------------------------- planning

namespace {
CgroupInfo unified(std::vector<std::string> ctls, bool writable = true) {
  CgroupInfo i;
  i.layout = "v2";
  i.mount = "/sys/fs/cgroup";
  i.self_path = "/user.slice/user-1000.slice/sbx.scope";
  i.controllers = std::move(ctls);
  i.writable = writable;
  return i;
}
CgroupInfo this_hosts_hybrid() {
  CgroupInfo i;
  i.layout = "hybrid";
  i.mount = "/sys/fs/cgroup/unified";
  i.self_path = std::string(1, '/');  // see FakeCgroupRoot::info()
  i.controllers = {"hugetlb"};
  i.writable = true;
  return i;
}
Limits all_limits() {
  Limits l;
  l.memory_bytes = 512LL << 20;
  l.pids = 64;
  l.cpus = 0.5;
  l.cpu_time_ms = 1500;
  l.timeout_ms = 10000;
  return l;
}
bool has_rlimit(const LimitPlan& p, int res, std::uint64_t v) {
  for (auto& [r, val] : p.rlimits)
    if (r == res && val == v) return true;
  return false;
}
}  // namespace

TEST_CASE("cgroup: plan_limits on a full cgroup v2 uses cgroup for everything") {
  auto p = plan_limits(all_limits(), unified({"cpuset", "cpu", "io", "memory", "pids"}), false, true);
  CHECK(p.use_cgroup);
  CHECK(p.rlimits.empty());
  CHECK(p.cgroup_limits.memory_bytes == 512LL << 20);
  CHECK(p.cgroup_limits.pids == 64);
  CHECK(p.cgroup_limits.cpus == 0.5);
  CHECK_FALSE(p.cgroup_limits.timeout_ms.has_value());
  CHECK(p.find("memory")->mechanism == "cgroup v2 memory.max");
  CHECK(p.find("pids")->mechanism == "cgroup v2 pids.max");
  CHECK(p.find("cpus")->mechanism == "cgroup v2 cpu.max");
  CHECK(p.find("cpus")->reason.find("50000 100000") != std::string::npos);
  CHECK(p.find("cpu_time")->mechanism.find("cpu.stat usage_usec") != std::string::npos);
  CHECK(p.find("timeout")->mechanism == "supervisor timerfd");
  CHECK(p.shortfalls(true).empty());
}

TEST_CASE("cgroup: plan_limits on this host's hybrid layout degrades to rlimits, honestly") {
  auto p = plan_limits(all_limits(), this_hosts_hybrid(), false, true);
  CHECK_FALSE(p.use_cgroup);
  CHECK_FALSE(p.cgroup_limits.memory_bytes.has_value());
  auto* mem = p.find("memory");
  CHECK(mem->mechanism == "rlimit RLIMIT_DATA, tmpfs sizes, ipc namespace shmall");
  CHECK(mem->applied);
  CHECK(mem->degraded);
  CHECK_FALSE(mem->bounded_in_total);
  CHECK(mem->reason.find("hybrid") != std::string::npos);
  CHECK(mem->reason.find("NOT bounded") != std::string::npos);
  CHECK(mem->reason.find("memfds") != std::string::npos);
  CHECK(p.find("pids")->mechanism == "rlimit RLIMIT_NPROC");
  CHECK(p.find("pids")->reason.find("user namespace") != std::string::npos);
  CHECK(p.find("cpu_time")->mechanism == "rlimit RLIMIT_CPU");
  CHECK(p.find("cpu_time")->reason.find("2 s") != std::string::npos);  // 1500 ms rounds up
  auto* cpus = p.find("cpus");
  CHECK_FALSE(cpus->applied);
  CHECK(cpus->mechanism.empty());
  CHECK(cpus->reason.find("no rlimit") != std::string::npos);
  CHECK(has_rlimit(p, RLIMIT_DATA, 512ULL << 20));
  // No file-size limit: it stopped big files on rw binds on disk, and bounded no RAM in total.
  CHECK(std::none_of(p.rlimits.begin(), p.rlimits.end(), [](auto& r) { return r.first == RLIMIT_FSIZE; }));
  CHECK_FALSE(has_rlimit(p, RLIMIT_AS, 512ULL << 20));
  CHECK(has_rlimit(p, RLIMIT_NPROC, 64));
  CHECK(has_rlimit(p, RLIMIT_CPU, 2));
  CHECK(p.rlimits.size() == 3);
  CHECK(p.find("timeout")->applied);
  CHECK(p.shortfalls(false).size() == 1);  // cpus
  CHECK(p.shortfalls(true).size() == 4);   // + the three rlimit ones
  CHECK(p.unbounded().size() == 2);        // cpus, and memory (not in total)
}

TEST_CASE("cgroup: plan_limits rootless without delegation points at systemd-run") {
  auto p = plan_limits(all_limits(), unified({"memory", "pids", "cpu"}, false), true, true);
  CHECK_FALSE(p.use_cgroup);
  CHECK(p.find("memory")->mechanism.rfind("rlimit RLIMIT_DATA", 0) == 0);
  CHECK(p.find("memory")->reason.find("Delegate=yes") != std::string::npos);
  CHECK_FALSE(p.find("cpus")->applied);
}

TEST_CASE("cgroup: plan_limits with a partial delegation mixes mechanisms") {
  // systemd's older user delegation: memory and pids, no cpu.
  auto p = plan_limits(all_limits(), unified({"memory", "pids"}), true, true);
  CHECK(p.use_cgroup);
  CHECK(p.find("memory")->mechanism == "cgroup v2 memory.max");
  CHECK(p.find("pids")->mechanism == "cgroup v2 pids.max");
  CHECK_FALSE(p.find("cpus")->applied);
  CHECK(p.find("cpus")->reason.find("cpu controller is not delegated") != std::string::npos);
  CHECK_FALSE(p.cgroup_limits.cpus.has_value());
  CHECK(p.find("cpu_time")->mechanism.find("cgroup") != std::string::npos);  // cpu.stat needs no controller
  CHECK(p.rlimits.empty());
}

TEST_CASE("cgroup: plan_limits after a failed cgroup setup, and with no limits") {
  auto p = plan_limits(all_limits(), unified({"memory", "pids", "cpu"}), false, false);
  CHECK_FALSE(p.use_cgroup);
  CHECK(p.find("memory")->reason.find("setup failed") != std::string::npos);
  CHECK(p.rlimits.size() == 3);

  auto q = plan_limits(Limits{}, this_hosts_hybrid(), false, true);
  CHECK(q.decisions.empty());
  CHECK(q.rlimits.empty());
  CgroupInfo none;
  none.layout = "v1";
  auto r = plan_limits(all_limits(), none, false, true);
  CHECK(r.find("memory")->reason.find("no cgroup v2") != std::string::npos);
}

// ---------------------------------------------------------------- real cgroup v2

namespace {

// nullptr when this machine can run the real tests; else why not.
std::string real_cgroup_skip_reason() {
  CgroupInfo info = detect_cgroup();
  if (info.mount.empty()) return "no cgroup v2 mounted (layout " + info.layout + ")";
  for (const char* c : {"memory", "pids", "cpu"})
    if (std::find(info.controllers.begin(), info.controllers.end(), c) == info.controllers.end()) {
      std::string have;
      for (auto& x : info.controllers) have += (have.empty() ? "" : " ") + x;
      return "cgroup v2 at " + info.mount + " (layout " + info.layout + ") offers '" + have +
             "', not memory+pids+cpu; tests/vm/run.sh runs these in a qemu guest";
    }
  if (!info.writable) return "cgroup v2 " + info.self_path + " is not writable";
  const char* env = std::getenv("SBX_CGROUP_TESTS");
  if (!env || std::string(env) != "1")
    return "SBX_CGROUP_TESTS=1 not set (they create cgroups under this process's own; tests/vm/run.sh sets it)";
  return "";
}

#define SKIP_UNLESS_REAL_CGROUP()                     \
  do {                                                \
    std::string why_ = real_cgroup_skip_reason();     \
    if (!why_.empty()) {                              \
      MESSAGE("skipped: " << why_);                   \
      return;                                         \
    }                                                 \
  } while (0)

// Starts `fn` in a child that is born inside `cg` (clone3 + CLONE_INTO_CGROUP), as sbx does.
pid_t spawn_into(const RunCgroup& cg, const std::function<int()>& fn) {
  struct clone_args args;
  std::memset(&args, 0, sizeof args);
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<std::uint64_t>(cg.dir_fd());
  long pid = ::syscall(SYS_clone3, &args, sizeof args);
  if (pid == 0) ::_exit(fn());
  return static_cast<pid_t>(pid);
}

int wait_status(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return st;
}

void reap_all() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

std::string read_text(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double mono_s() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

std::string run_id(const char* tag) { return std::string(tag) + "-" + std::to_string(::getpid()); }

}  // namespace

TEST_CASE("cgroup v2 (real): limits are written before anything runs; remove leaves nothing") {
  SKIP_UNLESS_REAL_CGROUP();
  Limits l;
  l.memory_bytes = 32 << 20;
  l.pids = 16;
  l.cpus = 0.5;
  auto r = RunCgroup::create(detect_cgroup(), l, run_id("limits"));
  REQUIRE_MESSAGE(r.ok(), r.error().describe_with_stage());
  RunCgroup cg = std::move(*r);
  std::string path = cg.path();
  MESSAGE("run cgroup: " << path);
  CHECK(cg.dir_fd() >= 0);
  CHECK(read_text(path + "/memory.max") == "33554432\n");
  CHECK(read_text(path + "/memory.swap.max") == "0\n");
  CHECK(read_text(path + "/memory.oom.group") == "1\n");
  CHECK(read_text(path + "/pids.max") == "16\n");
  CHECK(read_text(path + "/cpu.max") == "50000 100000\n");
  CHECK(read_text(path + "/cgroup.procs").empty());
  for (auto& w : cg.warnings()) MESSAGE("warning: " << w);
  CHECK(cg.remove().ok());
  CHECK_FALSE(fs::exists(path));
  CHECK(cg.dir_fd() == -1);
  CHECK(cg.remove().ok());  // idempotent
}

TEST_CASE("cgroup v2 (real): memory.max=32M OOM-kills a memory hog, seen in memory.events") {
  SKIP_UNLESS_REAL_CGROUP();
  Limits l;
  l.memory_bytes = 32 << 20;
  auto r = RunCgroup::create(detect_cgroup(), l, run_id("oom"));
  REQUIRE_MESSAGE(r.ok(), r.error().describe_with_stage());
  RunCgroup cg = std::move(*r);
  pid_t pid = spawn_into(cg, [] {
    // Touch 128 MiB, page by page: far over memory.max, and no swap to escape to.
    const std::size_t size = 128 << 20;
    char* p = static_cast<char*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) return 3;
    for (std::size_t i = 0; i < size; i += 4096) p[i] = 1;
    return 0;  // reached only if the limit did not bite
  });
  REQUIRE(pid > 0);
  int st = wait_status(pid);
  CHECK(WIFSIGNALED(st));
  CHECK(WTERMSIG(st) == SIGKILL);
  CgroupUsage u = cg.usage();
  REQUIRE(u.oom_kill.has_value());
  CHECK(*u.oom_kill >= 1);
  CHECK(u.oom.value_or(0) >= 1);
  if (u.memory_peak_bytes) {
    CHECK(*u.memory_peak_bytes > (16 << 20));
    CHECK(*u.memory_peak_bytes <= (33 << 20));
  }
  MESSAGE("memory hog under memory.max=32M: "
          << std::string(WIFSIGNALED(st) ? "killed by signal " : "exit ")
          << (WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st)) << ", memory.events oom " << u.oom.value_or(-1)
          << " oom_kill " << u.oom_kill.value_or(-1) << ", memory.peak " << u.memory_peak_bytes.value_or(-1));
  CHECK(cg.remove().ok());
}

TEST_CASE("cgroup v2 (real): pids.max=8 stops forks (add_pid path), kill() empties it") {
  SKIP_UNLESS_REAL_CGROUP();
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // grandchildren come back to us, to be reaped
  Limits l;
  l.pids = 8;
  auto r = RunCgroup::create(detect_cgroup(), l, run_id("pids"));
  REQUIRE_MESSAGE(r.ok(), r.error().describe_with_stage());
  RunCgroup cg = std::move(*r);
  int go[2], report[2];
  REQUIRE(::pipe2(go, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The clone3-less path: wait for "go" until the parent has written our pid to cgroup.procs.
    char c;
    if (::read(go[0], &c, 1) != 1) ::_exit(2);
    int forked = 0, err = 0;
    for (int i = 0; i < 100; ++i) {
      pid_t k = ::fork();
      if (k == 0) {
        ::pause();
        ::_exit(0);
      }
      if (k < 0) {
        err = errno;
        break;
      }
      ++forked;
    }
    int msg[2] = {forked, err};
    (void)!::write(report[1], msg, sizeof msg);
    ::pause();
    ::_exit(0);
  }
  ::close(go[0]);
  ::close(report[1]);
  REQUIRE(cg.add_pid(pid).ok());
  REQUIRE(::write(go[1], "g", 1) == 1);
  int msg[2] = {-1, 0};
  REQUIRE(::read(report[0], msg, sizeof msg) == sizeof msg);
  CHECK(msg[0] == 7);  // 8 tasks: the child and 7 of its children
  CHECK(msg[1] == EAGAIN);
  CgroupUsage u = cg.usage();
  if (u.pids_peak) CHECK(*u.pids_peak == 8);
  std::string procs = read_text(cg.path() + "/cgroup.procs");
  CHECK(std::count(procs.begin(), procs.end(), '\n') == 8);
  MESSAGE("pids.max=8: child forked " << msg[0] << " before fork failed with " << std::string(std::strerror(msg[1]))
          << ", pids.peak " << u.pids_peak.value_or(-1));
  CHECK(cg.kill().ok());
  CHECK(read_text(cg.path() + "/cgroup.procs").empty());
  // The killed tasks may still be unreaped zombies here: cgroup v2 lets the cgroup go anyway.
  CHECK(cg.remove().ok());
  int st = wait_status(pid);
  CHECK(WIFSIGNALED(st));
  CHECK(WTERMSIG(st) == SIGKILL);
  reap_all();
  ::close(go[1]);
  ::close(report[0]);
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_CASE("cgroup v2 (real): cpu.max for 0.2 CPU throttles a busy loop to ~20%") {
  SKIP_UNLESS_REAL_CGROUP();
  Limits l;
  l.cpus = 0.2;
  auto r = RunCgroup::create(detect_cgroup(), l, run_id("cpu"));
  REQUIRE_MESSAGE(r.ok(), r.error().describe_with_stage());
  RunCgroup cg = std::move(*r);
  double t0 = mono_s();
  pid_t pid = spawn_into(cg, [] {
    double end = mono_s() + 1.5;
    while (mono_s() < end) {
    }
    return 0;
  });
  REQUIRE(pid > 0);
  int st = wait_status(pid);
  double wall = mono_s() - t0;
  CHECK(WIFEXITED(st));
  CgroupUsage u = cg.usage();
  REQUIRE(u.cpu_usage_us.has_value());
  double share = *u.cpu_usage_us / 1e6 / wall;
  MESSAGE("cpu.max 0.2: busy loop used " << *u.cpu_usage_us / 1000 << " ms CPU in " << int(wall * 1000)
          << " ms wall = " << int(share * 100) << "% (tolerance 12-28%), nr_throttled "
          << u.nr_throttled.value_or(-1) << ", throttled " << u.throttled_us.value_or(-1) / 1000 << " ms");
  CHECK(share > 0.12);
  CHECK(share < 0.28);
  CHECK(u.nr_throttled.value_or(0) > 0);
  CHECK(u.cpu_user_us.has_value());
  CHECK(u.cpu_system_us.has_value());
  CHECK(cg.remove().ok());
}

TEST_CASE("cgroup v2 (real): kill() reaches every process; the destructor cleans up") {
  SKIP_UNLESS_REAL_CGROUP();
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  std::string path;
  {
    auto r = RunCgroup::create(detect_cgroup(), Limits{}, run_id("kill"));
    REQUIRE_MESSAGE(r.ok(), r.error().describe_with_stage());
    RunCgroup cg = std::move(*r);
    path = cg.path();
    pid_t pid = spawn_into(cg, [] {
      for (int i = 0; i < 5; ++i)
        if (::fork() == 0) break;  // a small tree of sleepers
      ::pause();
      return 0;
    });
    REQUIRE(pid > 0);
    auto count_procs = [&] {
      std::string t = read_text(path + "/cgroup.procs");
      return std::count(t.begin(), t.end(), '\n');
    };
    for (int i = 0; i < 2000 && count_procs() < 6; ++i) ::usleep(1000);
    std::string procs = read_text(path + "/cgroup.procs");
    CHECK(std::count(procs.begin(), procs.end(), '\n') == 6);
    RunCgroup moved = std::move(cg);  // move-only: the moved-from one owns nothing
    CHECK(cg.dir_fd() == -1);
    CHECK(moved.path() == path);
    // leave scope without kill()/remove(): the destructor must do both
  }
  CHECK_FALSE(fs::exists(path));
  reap_all();
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_CASE("cgroup v2 (real): gc removes a dead owner's run cgroup, never a live one's") {
  SKIP_UNLESS_REAL_CGROUP();
  CgroupInfo info = detect_cgroup();
  auto r = RunCgroup::create(info, Limits{}, run_id("live"));
  REQUIRE_MESSAGE(r.ok(), r.error().describe_with_stage());
  RunCgroup live = std::move(*r);
  std::string subtree = fs::path(live.path()).parent_path();

  // A dead owner: a child that has exited and been reaped.
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  wait_status(dead);
  std::string stale = subtree + "/" + run_cgroup_name(run_id("stale"), dead, 1);
  REQUIRE(::mkdir(stale.c_str(), 0755) == 0);
  // ...with a process still inside, as when sbx is SIGKILLed mid-run.
  int go[2];
  REQUIRE(::pipe(go) == 0);
  pid_t orphan = ::fork();
  if (orphan == 0) {
    char c;
    (void)!::read(go[0], &c, 1);
    ::pause();
    ::_exit(0);
  }
  std::ofstream(stale + "/cgroup.procs") << orphan << std::flush;
  CHECK(read_text(stale + "/cgroup.procs") == std::to_string(orphan) + "\n");
  (void)!::write(go[1], "g", 1);

  // Our own pid with a wrong start time: a reused pid, so also stale.
  std::string reused = subtree + "/" + run_cgroup_name(run_id("reused"), ::getpid(), 1);
  REQUIRE(::mkdir(reused.c_str(), 0755) == 0);

  CHECK(gc_stale_cgroups(info).ok());
  CHECK_FALSE(fs::exists(stale));
  CHECK_FALSE(fs::exists(reused));
  CHECK(fs::exists(live.path()));
  int st = wait_status(orphan);
  CHECK(WIFSIGNALED(st));
  CHECK(WTERMSIG(st) == SIGKILL);
  ::close(go[0]);
  ::close(go[1]);
  CHECK(live.remove().ok());
}

TEST_CASE("cgroup v2 (real): 100 runs leave nothing under the sbx subtree") {
  SKIP_UNLESS_REAL_CGROUP();
  CgroupInfo info = detect_cgroup();
  std::string subtree;
  double t0 = mono_s();
  for (int i = 0; i < 100; ++i) {
    Limits l;
    l.memory_bytes = 64 << 20;
    l.pids = 4;
    auto r = RunCgroup::create(info, l, run_id("many") + "-" + std::to_string(i));
    REQUIRE_MESSAGE(r.ok(), r.error().describe_with_stage());
    subtree = fs::path(r->path()).parent_path();
    pid_t pid = spawn_into(*r, [] { return 7; });
    REQUIRE(pid > 0);
    int st = wait_status(pid);
    CHECK(WEXITSTATUS(st) == 7);
    REQUIRE(r->kill().ok());
    REQUIRE(r->remove().ok());
  }
  int left = 0;
  for (auto& e : fs::directory_iterator(subtree))
    if (e.is_directory() && e.path().filename().string().rfind("run-", 0) == 0) ++left;
  CHECK(left == 0);
  MESSAGE("100 create/clone3-into/kill/remove cycles in " << int((mono_s() - t0) * 1000) << " ms; run cgroups left: " << left);
}

TEST_CASE("cgroup: cgroup2_mount_point reads /proc/self/mounts as the kernel writes it") {
  bool v1 = true;
  // A hybrid host: v1 hierarchies beside the unified one; the first cgroup2 mount is the one.
  const char* hybrid =
      "sysfs /sys sysfs rw 0 0\n"
      "tmpfs /sys/fs/cgroup tmpfs ro 0 0\n"
      "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nsdelegate 0 0\n"
      "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
      "cgroup2 /mnt/other cgroup2 rw 0 0";  // no newline at the end
  CHECK(cgroup2_mount_point(hybrid, v1) == "/sys/fs/cgroup/unified");
  CHECK(v1);
  CHECK(cgroup2_mount_point("none\t/x\tcgroup2 rw 0 0\n", v1) == "/x");
  CHECK_FALSE(v1);
  CHECK(cgroup2_mount_point("  none /y cgroup2 rw 0 0\n", v1) == "/y");
  // A space inside a field is \040 in the file: the field stays whole.
  CHECK(cgroup2_mount_point("none /a\\040b cgroup2 rw 0 0\n", v1) == "/a\\040b");
  // Short and empty lines are skipped; "cgroup2" as a source or a directory is not a type.
  CHECK(cgroup2_mount_point("\n\ncgroup2\ncgroup2 cgroup2\nnone /z cgroup2x rw\n", v1).empty());
  CHECK_FALSE(v1);
  CHECK(cgroup2_mount_point("", v1).empty());
}
