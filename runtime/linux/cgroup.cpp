#include "runtime/linux/cgroup.hpp"

#include "runtime/base/clock.hpp"
#include "runtime/base/fsutil.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/model/limits_table.hpp"
#include "runtime/base/strings.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "cgroup";
constexpr const char* kSubtree = "sbx";
constexpr const char* kSupervisorLeaf = "sbx-supervisor";
// The controllers sbx uses, in the order they are enabled.
constexpr const char* kControllers[] = {"memory", "pids", "cpu"};

void sleep_ms(long ms) {
  struct timespec ts {
    ms / 1000, (ms % 1000) * 1000000L
  };
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

// cgroup control files are small and read in one go; a missing file is the caller's business
// (its errno is kept in the Error).
Result<std::string> read_ctl(const std::string& path) {
  auto r = read_file(path);
  if (!r) r.error().stage = kStage;
  return r;
}

// One write(2) per value: cgroup files parse each write as a whole, so a value must never be
// split across writes.
Status write_ctl(const std::string& path, const std::string& value) {
  bool opened = false;
  if (int err = write_whole(path, value, &opened))
    return make_error(kStage, (opened ? "cannot write '" + value + "' to " : "cannot open ") + path, err);
  return {};
}

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> out;
  for (;;) {
    std::size_t start = text.find_first_not_of(" \t\n\r\v\f");
    if (start == std::string_view::npos) return out;
    text.remove_prefix(start);
    std::size_t end = std::min(text.find_first_of(" \t\n\r\v\f"), text.size());
    out.emplace_back(text.substr(0, end));
    text.remove_prefix(end);
  }
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::vector<pid_t> read_procs(const std::string& cg) {
  std::vector<pid_t> pids;
  auto text = read_ctl(cg + "/cgroup.procs");
  if (!text) return pids;
  for (const auto& w : split_words(*text)) {
    long v = std::strtol(w.c_str(), nullptr, 10);
    // 0: a process in a pid namespace we cannot see into; nothing we could signal.
    if (v > 0) pids.push_back(static_cast<pid_t>(v));
  }
  return pids;
}

std::vector<std::string> child_cgroups(const std::string& cg) {
  std::vector<std::string> out;
  DIR* d = ::opendir(cg.c_str());
  if (!d) return out;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    if (e->d_type == DT_DIR) out.push_back(cg + "/" + n);
  }
  ::closedir(d);
  return out;
}

// "populated 0" in cgroup.events: no live process in the cgroup or below it. Zombies do not
// count — cgroup_exit() unlinks a task from its cgroup when it exits, before it is reaped.
bool populated(const std::string& cg) {
  auto text = read_ctl(cg + "/cgroup.events");
  if (!text) return false;  // gone
  auto m = parse_keyed_counters(*text);
  auto it = m.find("populated");
  return it == m.end() || it->second != 0;
}

// SIGKILL everything in `cg` and below, then wait (bounded) until nothing there is alive.
Status kill_cgroup(const std::string& cg, std::int64_t wait_ms = 2000) {
  // cgroup.kill (Linux 5.14) kills the whole subtree in one step, including processes forked while
  // it runs: the kernel marks the cgroup so that a concurrent fork fails instead of escaping.
  Status st = write_ctl(cg + "/cgroup.kill", "1");
  bool have_kill = st.ok();
  if (!st.ok() && st.error().err != ENOENT) return st;
  std::int64_t deadline = monotonic_ms() + wait_ms;
  for (;;) {
    if (!have_kill) {
      // Older kernels: signal each listed process, deepest cgroups first, and go round again —
      // a fork bomb may have added processes while we read the list.
      std::vector<std::string> stack{cg}, all;
      while (!stack.empty()) {
        std::string c = stack.back();
        stack.pop_back();
        all.push_back(c);
        for (auto& k : child_cgroups(c)) stack.push_back(k);
      }
      for (auto it = all.rbegin(); it != all.rend(); ++it)
        for (pid_t p : read_procs(*it)) ::kill(p, SIGKILL);
    }
    if (!populated(cg)) return {};
    if (monotonic_ms() >= deadline)
      return make_error(kStage, "processes still alive in " + cg + " after SIGKILL", EBUSY);
    sleep_ms(1);
  }
}

// rmdir `cg`, its child cgroups first (a program with a delegated cgroup namespace may have made
// some); retries EBUSY while the last tasks finish exiting.
Status remove_cgroup(const std::string& cg, std::int64_t wait_ms = 2000) {
  for (auto& k : child_cgroups(cg)) SBX_TRY(remove_cgroup(k, wait_ms));
  std::int64_t deadline = monotonic_ms() + wait_ms;
  for (;;) {
    if (::rmdir(cg.c_str()) == 0 || errno == ENOENT) return {};
    if (errno != EBUSY || monotonic_ms() >= deadline) return sys_error(kStage, "cannot remove cgroup " + cg);
    sleep_ms(2);
  }
}

Result<std::uint64_t> self_starttime() {
  auto text = read_ctl("/proc/self/stat");
  if (!text) return text.error();
  auto st = parse_stat_starttime(*text);
  if (!st) return make_error(kStage, "cannot parse /proc/self/stat");
  return *st;
}

// The owner is alive iff a process with that pid exists and started at the same time. Anything we
// cannot decide (an unreadable /proc) counts as alive: gc must never kill a live run.
bool owner_alive(const RunCgroupOwner& o) {
  auto text = read_ctl("/proc/" + std::to_string(o.pid) + "/stat");
  if (!text) return text.error().err != ENOENT && text.error().err != ESRCH;
  auto st = parse_stat_starttime(*text);
  return !st || *st == o.start;
}

bool valid_run_id(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
}

std::string own_dir(const CgroupInfo& info) {
  if (info.root_subtree) return info.mount;
  std::string rel = own_cgroup_path(info.self_path);
  return info.mount + (rel == "/" ? "" : rel);
}

// Enables `wanted` controllers in `cg`'s cgroup.subtree_control, one at a time so that one the
// kernel refuses does not block the others (crun does the same). A controller in `required` that
// cannot be enabled is an error; any other is a warning. `ebusy_fix`, if set, is tried once when
// the kernel answers EBUSY (the no-internal-processes rule) and the write retried.
Status enable_controllers(const std::string& cg, const std::vector<std::string>& wanted,
                          const std::vector<std::string>& required, std::vector<std::string>& enabled,
                          std::vector<std::string>& warnings, Status (*ebusy_fix)(const std::string&)) {
  auto current = read_ctl(cg + "/cgroup.subtree_control");
  if (!current) return current.error();
  auto have = split_words(*current);
  bool fixed = false;
  for (const auto& c : wanted) {
    if (contains(have, c)) {
      enabled.push_back(c);
      continue;
    }
    Status st = write_ctl(cg + "/cgroup.subtree_control", "+" + c);
    if (!st.ok() && st.error().err == EBUSY && ebusy_fix && !fixed) {
      fixed = true;
      Status moved = ebusy_fix(cg);
      if (!moved.ok()) return moved;
      st = write_ctl(cg + "/cgroup.subtree_control", "+" + c);
    }
    if (st.ok()) {
      enabled.push_back(c);
      continue;
    }
    Error e = st.error();
    if (e.err == EBUSY) {
      std::vector<std::string> others;
      for (pid_t p : read_procs(cg)) others.push_back(std::to_string(p));
      e.message = "cannot enable the " + c + " controller in " + cg + ": the cgroup holds other processes (" +
                  join_words(others) +
                  ") and cgroup v2 forbids controllers in a cgroup with processes; run sbx in a "
                  "cgroup of its own (e.g. systemd-run --user --scope -p Delegate=yes sbx ...)";
    }
    if (contains(required, c)) return e;
    warnings.push_back(e.describe());
  }
  return {};
}

// The no-internal-processes fix: move sbx itself into the leaf <own>/sbx-supervisor.
Status move_self_to_leaf(const std::string& own) {
  std::string leaf = own + "/" + kSupervisorLeaf;
  if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) return sys_error(kStage, "cannot create " + leaf);
  return write_ctl(leaf + "/cgroup.procs", std::to_string(::getpid()));
}

}  // namespace

// Every run asks (twice: its systemd scope decision and its cgroup plan), so each file is read
// with one loop and parsed without iostreams, which a process's first ifstream parse costs more
// than (bench/README.md, "Where a one-shot run's time goes").
CgroupInfo detect_cgroup() {
  CgroupInfo info;
  bool v1 = false;
  info.mount = cgroup2_mount_point(read_proc_prefix("/proc/self/mounts"), v1);
  if (info.mount.empty()) info.layout = v1 ? "v1" : "none";
  else info.layout = v1 ? "hybrid" : "v2";
  info.self_path = parse_proc_cgroup(read_proc_prefix("/proc/self/cgroup"));
  if (!info.mount.empty()) {
    // The real root has no cgroup.type; a cgroup namespace's root (a container's) has one.
    struct stat st;
    bool real_root = is_real_cgroup_root(info.mount);
    // /proc/self/cgroup paths are relative to our cgroup namespace's root; a mount showing that
    // root is what a container sees at /sys/fs/cgroup. (A mount of some other cgroup, or of a
    // hierarchy without cgroup.procs, is neither.)
    info.namespace_root = !real_root && ::stat((info.mount + "/cgroup.procs").c_str(), &st) == 0 &&
                          ::stat((info.mount + info.self_path).c_str(), &st) == 0;
    if (info.namespace_root) {
      auto procs = read_ctl(info.mount + "/cgroup.procs");
      info.namespace_root_procs = procs ? count_procs(*procs) : -1;
    }
    // A namespace root that holds no process (`sbx cgroup-init` ran, or an init inside the
    // container keeps its root empty as systemd does) may enable controllers for its children
    // like the real root: see the header.
    bool empty_ns_root = info.namespace_root && info.namespace_root_procs == 0;
    info.root_subtree = ::geteuid() == 0 && (real_root || empty_ns_root) && ::access(info.mount.c_str(), W_OK) == 0;
    // <own>: for an sbx in <own>/sbx-supervisor (moved there by an earlier run, or by the `sbx mcp`
    // or `sbx probe` that started it: enter_supervisor_leaf), the parent is where run cgroups go.
    const std::string own_rel = own_cgroup_path(info.self_path);
    std::string dirpath = info.root_subtree ? info.mount : info.mount + (own_rel == "/" ? "" : own_rel);
    info.controllers = split_words(read_proc_prefix(dirpath + "/cgroup.controllers"));
    info.writable = ::access(dirpath.c_str(), W_OK) == 0;
  }
  return info;
}

// ---- pure helpers ----

std::string read_proc_prefix(const std::string& path, bool* ok) {
  constexpr std::size_t kMax = 4u << 20;
  std::string out = read_file_prefix(path, kMax, ok);
  if (out.size() >= kMax) out.resize(out.rfind('\n') + 1);  // npos + 1 == 0: no whole line at all
  return out;
}

std::string cgroup2_mount_point(std::string_view mounts, bool& v1) {
  std::string found;
  v1 = false;
  while (!mounts.empty()) {
    std::string_view line = mounts.substr(0, mounts.find('\n'));
    mounts.remove_prefix(std::min(mounts.size(), line.size() + 1));
    // "<source> <dir> <type> <options> 0 0": the kernel separates fields by one space and
    // escapes a space inside one (\040); leading blanks and tabs are skipped as a stream would.
    std::string_view f[3];
    std::size_t n = 0;
    while (n < 3) {
      std::size_t start = line.find_first_not_of(" \t");
      if (start == std::string_view::npos) break;
      line.remove_prefix(start);
      std::size_t end = std::min(line.find_first_of(" \t"), line.size());
      f[n++] = line.substr(0, end);
      line.remove_prefix(end);
    }
    if (n < 3) continue;
    if (f[2] == "cgroup2" && found.empty()) found = std::string(f[1]);
    if (f[2] == "cgroup") v1 = true;
  }
  return found;
}

std::string parse_proc_cgroup(std::string_view text) {
  std::string found;
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    if (line.substr(0, 3) == "0::") found = std::string(line.substr(3));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return found;
}

std::map<std::string, std::int64_t> parse_keyed_counters(std::string_view text) {
  std::map<std::string, std::int64_t> out;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key, val, extra;
    if (!(ls >> key >> val) || (ls >> extra)) continue;
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(val.data(), val.data() + val.size(), v);
    if (ec == std::errc() && p == val.data() + val.size()) out[key] = v;
  }
  return out;
}

std::optional<std::int64_t> parse_single_counter(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

std::string format_cpu_max(double cpus) {
  constexpr std::int64_t kPeriod = 100000;
  auto quota = static_cast<std::int64_t>(std::llround(cpus * kPeriod));
  quota = std::max<std::int64_t>(quota, 1000);  // the kernel rejects quotas under 1 ms
  return std::to_string(quota) + " " + std::to_string(kPeriod);
}

std::optional<std::uint64_t> parse_stat_starttime(std::string_view stat) {
  auto rp = stat.rfind(')');
  if (rp == std::string_view::npos) return std::nullopt;
  auto words = split_words(stat.substr(rp + 1));
  // After ')' come field 3 (state), 4, ...; starttime is field 22.
  if (words.size() < 20) return std::nullopt;
  const std::string& w = words[19];
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
  if (ec != std::errc() || p != w.data() + w.size()) return std::nullopt;
  return v;
}

std::string run_cgroup_name(const std::string& run_id, pid_t owner_pid, std::uint64_t owner_start) {
  return "run-" + run_id + "@" + std::to_string(owner_pid) + "." + std::to_string(owner_start);
}

std::optional<RunCgroupOwner> parse_run_cgroup_name(std::string_view name) {
  if (name.substr(0, 4) != "run-") return std::nullopt;
  auto at = name.rfind('@');
  if (at == std::string_view::npos || at <= 4) return std::nullopt;
  std::string_view tail = name.substr(at + 1);
  auto dot = tail.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  RunCgroupOwner o;
  o.run_id = std::string(name.substr(4, at - 4));
  std::string_view p = tail.substr(0, dot), s = tail.substr(dot + 1);
  long pid = 0;
  auto r1 = std::from_chars(p.data(), p.data() + p.size(), pid);
  auto r2 = std::from_chars(s.data(), s.data() + s.size(), o.start);
  if (p.empty() || s.empty() || r1.ec != std::errc() || r1.ptr != p.data() + p.size() || r2.ec != std::errc() ||
      r2.ptr != s.data() + s.size() || pid <= 0)
    return std::nullopt;
  o.pid = static_cast<pid_t>(pid);
  return o;
}

bool is_real_cgroup_root(const std::string& dir) {
  struct stat st;
  return ::stat((dir + "/cgroup.type").c_str(), &st) != 0 && errno == ENOENT &&
         ::stat((dir + "/cgroup.procs").c_str(), &st) == 0;
}

long count_procs(std::string_view text) {
  long n = 0;
  for (const auto& w : split_words(text)) {
    (void)w;
    ++n;
  }
  return n;
}

std::string own_cgroup_path(const std::string& self_path) {
  std::string leaf = std::string("/") + kSupervisorLeaf;
  if (self_path.size() >= leaf.size() && self_path.compare(self_path.size() - leaf.size(), leaf.size(), leaf) == 0) {
    std::string parent = self_path.substr(0, self_path.size() - leaf.size());
    return parent.empty() ? "/" : parent;
  }
  return self_path.empty() ? "/" : self_path;
}

namespace {

// The run cgroup's limit files, written while it is still empty; a missing swap control is a
// warning (the host does not account swap), anything else refused is the run's error.
Status write_run_limits(const std::string& path, const Limits& limits, std::vector<std::string>& warnings) {
  if (limits.memory_bytes) {
    SBX_TRY(write_ctl(path + "/memory.max", std::to_string(*limits.memory_bytes)));
    // Without this, memory.max only bounds RAM and the rest spills into swap.
    Status sw = write_ctl(path + "/memory.swap.max", "0");
    if (!sw.ok()) {
      if (sw.error().err != ENOENT) return sw.error();
      warnings.push_back("no memory.swap.max (swap accounting off): memory beyond memory.max may be swapped");
    }
    // One OOM kill takes the whole sandbox: a half-killed process tree is a worse result than a
    // clean "oom". (Kubernetes does the same on cgroup v2.)
    Status og = write_ctl(path + "/memory.oom.group", "1");
    if (!og.ok() && og.error().err != ENOENT) return og.error();
  }
  if (limits.pids) SBX_TRY(write_ctl(path + "/pids.max", std::to_string(*limits.pids)));
  if (limits.cpus) SBX_TRY(write_ctl(path + "/cpu.max", format_cpu_max(*limits.cpus)));
  return {};
}

}  // namespace

bool enter_supervisor_leaf(const CgroupInfo& info) {
  if (info.mount.empty() || info.self_path.empty() || info.root_subtree) return false;
  if (own_cgroup_path(info.self_path) != info.self_path) return false;  // in the leaf already
  // info.controllers are <own>'s already (detect_cgroup reads them there).
  if (std::none_of(std::begin(kControllers), std::end(kControllers),
                   [&](const char* c) { return contains(info.controllers, c); }))
    return false;  // nothing a run cgroup could use: leave the hierarchy untouched, as RunCgroup::create does
  const std::string own = own_dir(info);
  if (::access((own + "/cgroup.subtree_control").c_str(), W_OK) != 0) return false;  // not delegated to us
  return move_self_to_leaf(own).ok();
}

// ---- RunCgroup ----

Result<RunCgroup> RunCgroup::create(const CgroupInfo& info, const Limits& limits, const std::string& run_id) {
  if (!valid_run_id(run_id)) return make_error(kStage, "invalid run id '" + run_id + "' for a cgroup name", EINVAL);
  if (info.mount.empty() || info.self_path.empty())
    return make_error(kStage, "no cgroup v2 hierarchy is mounted", ENOENT);
  // The controllers the limits need (limits_table.hpp), each limit positive.
  std::vector<std::string> required;
  for (auto& k : limit_kinds()) {
    if (!k.controller || !limit_set(limits, k)) continue;
    if (!(limit_json(limits, k).get<double>() > 0))
      return make_error(kStage, std::string(k.plan_name) + " limit must be positive", EINVAL);
    required.push_back(k.controller);
  }

  const std::string own = own_dir(info);
  // Read <own>'s controllers afresh: `info` may describe sbx-supervisor, not <own>.
  auto avail_text = read_ctl(own + "/cgroup.controllers");
  if (!avail_text) return avail_text.error();
  auto avail = split_words(*avail_text);
  std::vector<std::string> wanted;
  for (const char* c : kControllers)
    if (contains(avail, c)) wanted.push_back(c);
  if (wanted.empty())
    return make_error(kStage,
                      "cgroup v2 at " + own + " offers none of memory, pids, cpu (cgroup.controllers: '" +
                          join_words(avail) + "'; on a v1/v2 hybrid host they are bound to cgroup v1)",
                      ENOTSUP);
  for (const auto& c : required)
    if (!contains(avail, c))
      return make_error(
          kStage,
          "the " + c + " controller is not available in " + own + " (cgroup.controllers: '" + join_words(avail) + "')",
          ENOTSUP);

  RunCgroup cg;
  std::vector<std::string> enabled_own, enabled_sbx;
  // The real root cgroup is exempt from the no-internal-processes rule; any other cgroup of ours
  // that holds processes (sbx itself, at least) answers EBUSY, and sbx moves itself into a leaf
  // first. (A cgroup namespace's root shows as "/" but is not exempt: hence no is-root shortcut.)
  Status own_ok = enable_controllers(own, wanted, required, enabled_own, cg.warnings_, &move_self_to_leaf);
  if (!own_ok.ok()) {
    Error e = own_ok.error();
    // A container's cgroup namespace root holding the container's own processes: sbx does not
    // move those (they are not its to move) unless asked to, once, by `sbx cgroup-init`.
    if (e.err == EBUSY && info.namespace_root && own == info.mount)
      e.message = "the cgroup namespace root " + own +
                  " holds the container's processes, so cgroup v2 forbids "
                  "controllers for its children; run `sbx cgroup-init` once in the container's entrypoint "
                  "(see `sbx doctor`)";
    return e;
  }

  std::string subtree = own + "/" + kSubtree;
  if (::mkdir(subtree.c_str(), 0755) != 0 && errno != EEXIST) return sys_error(kStage, "cannot create " + subtree);
  // No process ever lives directly in <own>/sbx, so this cannot hit the internal-process rule.
  SBX_TRY(enable_controllers(subtree, enabled_own, required, enabled_sbx, cg.warnings_, nullptr));

  auto start = self_starttime();
  if (!start) return start.error();
  std::string path = subtree + "/" + run_cgroup_name(run_id, ::getpid(), *start);
  if (::mkdir(path.c_str(), 0755) != 0) return sys_error(kStage, "cannot create run cgroup " + path);
  cg.path_ = path;  // from here on, the destructor removes it if anything below fails
  cg.dir_fd_.reset(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cg.dir_fd_.ok()) return sys_error(kStage, "cannot open " + path);

  // Limits are written while the cgroup is still empty: the program will enter it at clone time.
  SBX_TRY(write_run_limits(path, limits, cg.warnings_));
  return cg;
}

RunCgroup::RunCgroup(RunCgroup&& o) noexcept
    : path_(std::move(o.path_)), dir_fd_(std::move(o.dir_fd_)), warnings_(std::move(o.warnings_)) {
  o.path_.clear();
}

RunCgroup& RunCgroup::operator=(RunCgroup&& o) noexcept {
  if (this != &o) {
    reset();
    path_ = std::move(o.path_);
    dir_fd_ = std::move(o.dir_fd_);
    warnings_ = std::move(o.warnings_);
    o.path_.clear();
  }
  return *this;
}

RunCgroup::~RunCgroup() { reset(); }

void RunCgroup::reset() noexcept {
  if (!path_.empty()) {
    (void)kill_cgroup(path_);
    (void)remove_cgroup(path_);
    path_.clear();
  }
  dir_fd_.reset();
}

Status RunCgroup::add_pid(pid_t pid) {
  if (path_.empty()) return make_error(kStage, "run cgroup already removed", ENOENT);
  return write_ctl(path_ + "/cgroup.procs", std::to_string(pid));
}

Status RunCgroup::kill() {
  if (path_.empty()) return {};
  return kill_cgroup(path_);
}

CgroupUsage RunCgroup::usage() const {
  CgroupUsage u;
  if (path_.empty()) return u;
  auto single = [&](const char* f) -> std::optional<std::int64_t> {
    auto t = read_ctl(path_ + "/" + f);
    return t ? parse_single_counter(*t) : std::nullopt;
  };
  auto keyed = [&](const char* f) {
    auto t = read_ctl(path_ + "/" + f);
    return t ? parse_keyed_counters(*t) : std::map<std::string, std::int64_t>{};
  };
  auto get = [](const std::map<std::string, std::int64_t>& m, const char* k) -> std::optional<std::int64_t> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
  u.memory_peak_bytes = single("memory.peak");
  u.pids_peak = single("pids.peak");
  auto cpu = keyed("cpu.stat");
  u.cpu_usage_us = get(cpu, "usage_usec");
  u.cpu_user_us = get(cpu, "user_usec");
  u.cpu_system_us = get(cpu, "system_usec");
  u.nr_throttled = get(cpu, "nr_throttled");
  u.throttled_us = get(cpu, "throttled_usec");
  auto ev = keyed("memory.events");
  u.oom = get(ev, "oom");
  u.oom_kill = get(ev, "oom_kill");
  u.pids_max = get(keyed("pids.events"), "max");
  return u;
}

Result<std::int64_t> RunCgroup::cpu_usage_us() const {
  if (path_.empty()) return make_error(kStage, "no run cgroup", ENOENT);
  auto text = read_ctl(path_ + "/cpu.stat");
  if (!text) return text.error();
  auto m = parse_keyed_counters(*text);
  auto it = m.find("usage_usec");
  if (it == m.end()) return make_error(kStage, path_ + "/cpu.stat has no usage_usec", ENODATA);
  return it->second;
}

Status RunCgroup::remove() {
  if (path_.empty()) return {};
  dir_fd_.reset();
  Status st = remove_cgroup(path_);
  if (st.ok()) path_.clear();
  return st;
}

Status gc_stale_cgroups(const CgroupInfo& info) {
  if (info.mount.empty() || info.self_path.empty()) return {};
  const std::string own = own_dir(info);
  // Only where RunCgroup::create could have made something: never wander into a hierarchy that
  // carries none of our controllers (a hybrid host's v2).
  auto avail_text = read_ctl(own + "/cgroup.controllers");
  if (!avail_text) return {};
  auto avail = split_words(*avail_text);
  if (std::none_of(std::begin(kControllers), std::end(kControllers), [&](const char* c) { return contains(avail, c); }))
    return {};
  std::string subtree = own + "/" + kSubtree;
  DIR* d = ::opendir(subtree.c_str());
  if (!d) return errno == ENOENT ? Status{} : Status{sys_error(kStage, "cannot list " + subtree)};
  std::vector<std::string> stale;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_type != DT_DIR) continue;
    auto owner = parse_run_cgroup_name(e->d_name);
    if (owner && !owner_alive(*owner)) stale.push_back(subtree + "/" + e->d_name);
  }
  ::closedir(d);
  std::vector<std::string> failures;
  int first_err = 0;
  for (const auto& cg : stale) {
    Status st = kill_cgroup(cg);
    if (st.ok()) st = remove_cgroup(cg);
    if (!st.ok()) {
      failures.push_back(st.error().describe());
      if (!first_err) first_err = st.error().err;
    }
  }
  if (!failures.empty())
    return make_error(kStage, "stale run cgroups not removed: " + join_words(failures, "; "), first_err);
  return {};
}

}  // namespace sbx
