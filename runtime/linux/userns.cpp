#include "runtime/linux/userns.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/trace_field.hpp"

namespace sbx {

bool find_subid_range(const std::string& text, const std::string& name, std::uint32_t need, std::uint32_t& start,
                      std::uint32_t& count) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto a = line.find(':');
    auto b = line.find(':', a == std::string::npos ? a : a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    if (line.substr(0, a) != name) continue;
    try {
      unsigned long long s = std::stoull(line.substr(a + 1, b - a - 1));
      unsigned long long c = std::stoull(line.substr(b + 1));
      if (c >= need && s > 0 && s + c <= 4294967295ULL) {
        start = static_cast<std::uint32_t>(s);
        count = static_cast<std::uint32_t>(c);
        return true;
      }
    } catch (...) {}
  }
  return false;
}

std::optional<std::vector<IdMapping>> parse_id_map(std::string_view text) {
  constexpr std::size_t kMaxExtents = 340;  // UID_GID_MAP_MAX_EXTENTS
  std::vector<IdMapping> out;
  std::size_t at = 0;
  auto number = [&](std::uint64_t& v) {
    while (at < text.size() && text[at] == ' ') ++at;
    std::size_t from = at;
    v = 0;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9' && at - from < 11)
      v = v * 10 + static_cast<std::uint64_t>(text[at++] - '0');
    return at > from && at - from <= 10 && v <= 0xffffffffULL;
  };
  while (at < text.size()) {
    std::uint64_t in = 0, outside = 0, count = 0;
    if (!number(in) || !number(outside) || !number(count)) return std::nullopt;
    while (at < text.size() && text[at] == ' ') ++at;
    if (at < text.size() && text[at++] != '\n') return std::nullopt;
    if (count == 0 || in + count > 0x100000000ULL || outside + count > 0x100000000ULL) return std::nullopt;
    if (out.size() == kMaxExtents) return std::nullopt;
    out.push_back(
        {static_cast<std::uint32_t>(in), static_cast<std::uint32_t>(outside), static_cast<std::uint32_t>(count)});
  }
  return out;
}

OwnIdMaps read_own_id_maps() {
  auto bounded = [](const char* path, std::string& into) {
    UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
    if (!fd.ok()) return;
    std::string text(16384, '\0');  // 340 lines of at most 33 bytes each fit
    std::size_t have = 0;
    while (have < text.size()) {
      ssize_t n = ::read(fd.get(), text.data() + have, text.size() - have);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      have += static_cast<std::size_t>(n);
    }
    text.resize(have);
    into = std::move(text);
  };
  OwnIdMaps m;
  bounded("/proc/self/uid_map", m.uid_map);
  bounded("/proc/self/gid_map", m.gid_map);
  std::string setgroups;
  bounded("/proc/self/setgroups", setgroups);
  m.setgroups_denied = setgroups.rfind("deny", 0) == 0;
  // The effective set from the kernel directly: /proc/self/status says the same (CapEff) after
  // formatting some fifty other lines, which cost more than the rest of this function.
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2] = {};
  if (::syscall(SYS_capget, &hdr, d) == 0) m.has_setgid = (d[0].effective >> CAP_SETGID) & 1U;
  return m;
}

namespace {
bool is_initial_map(const std::optional<std::vector<IdMapping>>& m) {
  return m && m->size() == 1 && (*m)[0].inside == 0 && (*m)[0].outside == 0 && (*m)[0].count == 4294967295u;
}
}  // namespace

bool in_initial_user_namespace() { return is_initial_map(parse_id_map(read_own_id_maps().uid_map)); }

namespace {

// A run of ids of our own namespace: [start, start + count).
struct IdRun {
  std::uint64_t start = 0, count = 0;
};

// Whether our namespace maps every id of [start, start + count).
bool maps_all(const std::vector<IdMapping>& own, std::uint64_t start, std::uint64_t count) {
  for (std::uint64_t at = start; at < start + count;) {
    std::uint64_t next = at;
    for (auto& m : own)
      if (at >= m.inside && at < std::uint64_t{m.inside} + m.count) next = std::uint64_t{m.inside} + m.count;
    if (next == at) return false;
    at = next;
  }
  return true;
}

// The longest run of ids our namespace maps, leaving out `self` (our own id) and 4294967295.
IdRun longest_run_without(std::vector<IdMapping> own, std::uint32_t self) {
  std::sort(own.begin(), own.end(), [](const IdMapping& a, const IdMapping& b) { return a.inside < b.inside; });
  std::vector<IdRun> merged;
  for (auto& m : own) {
    std::uint64_t end = std::uint64_t{m.inside} + m.count;
    if (!merged.empty() && m.inside <= merged.back().start + merged.back().count)
      merged.back().count = std::max(merged.back().start + merged.back().count, end) - merged.back().start;
    else merged.push_back({m.inside, m.count});
  }
  IdRun best;
  auto consider = [&](std::uint64_t from, std::uint64_t to) {
    to = std::min<std::uint64_t>(to, 0xffffffffULL);
    if (to > from && to - from > best.count) best = {from, to - from};
  };
  for (auto& r : merged) {
    std::uint64_t end = r.start + r.count;
    if (self >= r.start && self < end) {
      consider(r.start, self);
      consider(std::uint64_t{self} + 1, end);
    } else consider(r.start, end);
  }
  return best;
}

// A namespace that denies setgroups(2) (inherited by every namespace below it) leaves the
// container's supplementary groups with the sandbox's program: its group rights on files would
// pass into the sandbox unseen. Refused rather than weakened.
Error setgroups_denied_error() {
  return make_error("identity",
                    "this user namespace denies setgroups (/proc/self/setgroups is 'deny'), so sbx cannot drop its "
                    "supplementary groups for the sandbox: make it with setgroups allowed (podman and Kubernetes "
                    "do; unshare: --setgroups allow), or run sbx unprivileged there");
}

// Root of a user namespace that does not map the planned range: a range of its own ids.
Result<IdentityPlan> plan_in_own_namespace(const RunSpec& spec, uid_t caller_uid, gid_t caller_gid,
                                           const std::vector<IdMapping>& own_u, const std::vector<IdMapping>& own_g,
                                           std::uint32_t slot, bool setgroups_denied, bool has_setgid, IdentityPlan p) {
  IdRun u = longest_run_without(own_u, caller_uid), g = longest_run_without(own_g, caller_gid);
  if (u.count == 0 || g.count == 0) {
    if (slot > 0)
      return make_error("identity", "tenant id slot " + std::to_string(slot) +
                                        " needs ids of its own, and this user namespace maps no id but sbx's own: "
                                        "give the container a range of ids (podman --uidmap 0:HOST_ID:" +
                                        std::to_string(std::uint64_t{slot + 1} * kMappedRange + 1) +
                                        ", or Kubernetes hostUsers: false), or run without tenants");
    p.rootless = true;
    p.single_id_fallback = true;
    // Where our namespace allows setgroups, the map is written with our CAP_SETGID and the
    // container's groups are dropped as for any root run; where it denies it, or we lack
    // CAP_SETGID (a container started with it dropped), they cannot be.
    p.keep_groups = setgroups_denied || !has_setgid;
    p.uid_map = {{spec.uid, caller_uid, 1}};
    p.gid_map = {{spec.gid, caller_gid, 1}};
    p.range_source = "single id: own user namespace maps no other id";
    return p;
  }
  const std::uint64_t have = std::min(u.count, g.count);
  const std::uint64_t need = std::uint64_t{slot + 1} * kMappedRange;
  if (slot > 0 && have < need)
    return make_error("identity", "tenant id slot " + std::to_string(slot) + " needs " + std::to_string(need) +
                                      " ids, and this user namespace maps " + std::to_string(have) +
                                      " besides sbx's own: give the container at least " + std::to_string(need + 1) +
                                      " ids (podman --uidmap 0:HOST_ID:" + std::to_string(need + 1) +
                                      "), or use fewer tenants (each slot is " + std::to_string(kMappedRange) +
                                      " ids)");
  if (setgroups_denied) return setgroups_denied_error();
  const auto count = static_cast<std::uint32_t>(std::min<std::uint64_t>(have, kMappedRange));
  if (spec.uid >= count || spec.gid >= count)
    return make_error("usage", "--uid/--gid must be below " + std::to_string(count) +
                                   ": this user namespace maps only " + std::to_string(count) +
                                   " ids besides sbx's own (give the container more ids, or pick a lower --uid/--gid)");
  const std::uint64_t offset = std::uint64_t{slot} * kMappedRange;
  p.rootless = false;
  p.uid_map = {{0, static_cast<std::uint32_t>(u.start + offset), count}};
  p.gid_map = {{0, static_cast<std::uint32_t>(g.start + offset), count}};
  p.range_source = "own user namespace (" + std::to_string(count) + " ids)";
  return p;
}

}  // namespace

Result<IdentityPlan> plan_identity(const RunSpec& spec, uid_t caller_uid, gid_t caller_gid,
                                   const std::string& subuid_text, const std::string& subgid_text, std::uint32_t slot,
                                   const OwnIdMaps& own) {
  IdentityPlan p;
  p.uid = spec.uid;
  p.gid = spec.gid;
  auto own_u = parse_id_map(own.uid_map);
  p.initial_namespace = is_initial_map(own_u);
  if (caller_uid != 0) {
    p.rootless = true;
    p.keep_groups = true;
    p.uid_map = {{spec.uid, caller_uid, 1}};
    p.gid_map = {{spec.gid, caller_gid, 1}};
    p.range_source = "caller";
    return p;
  }
  p.rootless = false;
  auto own_g = parse_id_map(own.gid_map);
  if (!own_u || !own_g || own_u->empty() || own_g->empty())
    return make_error("identity", std::string("cannot parse /proc/self/") +
                                      (own_u && !own_u->empty() ? "gid_map" : "uid_map") +
                                      " (our own user namespace's ids): expected lines of INSIDE OUTSIDE COUNT");
  if (slot >= kDefaultSlices)
    return make_error("identity", "id slot " + std::to_string(slot) + " is past the last (" +
                                      std::to_string(kDefaultSlices - 1) + ")");
  // A tenant's slice must lie wholly inside the range: ask for a range that holds slot + 1 slices.
  const std::uint64_t need = static_cast<std::uint64_t>(slot + 1) * kMappedRange;
  std::uint32_t ustart = kDefaultHostBase, ucount = kMappedRange, gstart = kDefaultHostBase, gcount = kMappedRange;
  bool have_u = find_subid_range(subuid_text, "sbx", kMappedRange, ustart, ucount);
  bool have_g = find_subid_range(subgid_text, "sbx", kMappedRange, gstart, gcount);
  if (have_u != have_g) { ustart = gstart = kDefaultHostBase; }
  p.range_source = have_u && have_g ? "/etc/subuid and /etc/subgid (sbx)" : "built-in default";
  std::uint32_t offset = slot * kMappedRange;
  // Only the ids our own namespace maps can be mapped further (the initial namespace maps all).
  if (!maps_all(*own_u, std::uint64_t{ustart} + offset, kMappedRange) ||
      !maps_all(*own_g, std::uint64_t{gstart} + offset, kMappedRange))
    return plan_in_own_namespace(spec, caller_uid, caller_gid, *own_u, *own_g, slot, own.setgroups_denied,
                                 own.has_setgid, std::move(p));
  if (own.setgroups_denied) return setgroups_denied_error();
  if (spec.uid >= kMappedRange || spec.gid >= kMappedRange)
    return make_error("usage", "--uid/--gid must be below " + std::to_string(kMappedRange) +
                                   " when sbx runs as root (the sandbox's mapped range)");
  if (have_u && have_g) {
    if (ucount < need || gcount < need)
      return make_error("identity", "id slot " + std::to_string(slot) + " needs " + std::to_string(need) +
                                        " subordinate ids, and the 'sbx' range of /etc/subuid or /etc/subgid holds " +
                                        std::to_string(std::min(ucount, gcount)) + ": widen it (each tenant slot is " +
                                        std::to_string(kMappedRange) + " ids)");
  }
  p.uid_map = {{0, ustart + offset, kMappedRange}};
  p.gid_map = {{0, gstart + offset, kMappedRange}};
  return p;
}

Result<IdentityPlan> plan_identity(const RunSpec& spec, std::uint32_t slot) {
  std::string su, sg;
  OwnIdMaps own;
  if (::geteuid() == 0) {
    auto a = read_file("/etc/subuid");
    auto b = read_file("/etc/subgid");
    if (a) su = *a;
    if (b) sg = *b;
    own = read_own_id_maps();
  }
  return plan_identity(spec, ::geteuid(), ::getegid(), su, sg, slot, own);
}

namespace {
Status write_proc_file(pid_t pid, const char* name, const std::string& content) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  bool opened = false;
  if (int err = write_whole(path, content, &opened)) {
    if (!opened) return make_error("userns", "open " + path, err);
    return make_error("userns", "write '" + content.substr(0, content.find('\n')) + "' to " + path, err);
  }
  return {};
}

std::string map_text(const std::vector<IdMapping>& m) {
  std::string s;
  for (auto& e : m)
    s += std::to_string(e.inside) + " " + std::to_string(e.outside) + " " + std::to_string(e.count) + "\n";
  return s;
}
}  // namespace

Status write_id_maps(pid_t child, const IdentityPlan& plan) {
  // An unprivileged writer of gid_map must first give up setgroups(2) in the namespace;
  // otherwise a process could drop a group that was denying it access (CVE-2014-8989).
  if (plan.keep_groups) SBX_TRY(write_proc_file(child, "setgroups", "deny"));
  SBX_TRY(write_proc_file(child, "uid_map", map_text(plan.uid_map)));
  SBX_TRY(write_proc_file(child, "gid_map", map_text(plan.gid_map)));
  return {};
}

Status become_namespace_root(const IdentityPlan& plan) {
  // Host root's supplementary groups (gid 0 among them), or a container's, would still grant group
  // access on host files by kgid; drop them while we still may.
  if (!plan.keep_groups && ::setgroups(0, nullptr) != 0) return sys_error("identity", "setgroups([])");
  if (plan.rootless) return {};  // already the mapped caller, with full capabilities in the ns
  if (::setresgid(0, 0, 0) != 0) return sys_error("identity", "setresgid(0)");
  if (::setresuid(0, 0, 0) != 0) return sys_error("identity", "setresuid(0)");
  return {};
}

Status switch_to_program_identity(const IdentityPlan& plan) {
  if (!plan.keep_groups && ::setgroups(0, nullptr) != 0) return sys_error("identity", "setgroups([])");
  if (::setresgid(plan.gid, plan.gid, plan.gid) != 0)
    return sys_error("identity", "setresgid(" + std::to_string(plan.gid) + ")");
  if (::setresuid(plan.uid, plan.uid, plan.uid) != 0)
    return sys_error("identity", "setresuid(" + std::to_string(plan.uid) + ")");
  return {};
}

std::optional<std::uint32_t> host_id(const std::vector<IdMapping>& map, std::uint32_t inside) {
  for (auto& m : map)
    if (inside >= m.inside && inside - m.inside < m.count) return m.outside + (inside - m.inside);
  return std::nullopt;
}

bool maps_host_id(const std::vector<IdMapping>& map, std::uint32_t outside) {
  for (auto& m : map)
    if (outside >= m.outside && outside - m.outside < m.count) return true;
  return false;
}

Result<UniqueFd> make_idmap_userns(const std::vector<IdMapping>& uid_map, const std::vector<IdMapping>& gid_map) {
  // A user namespace is made by a process: a child unshares one, says so, and waits (a pipe)
  // while its maps are written and the namespace opened; the fd keeps the namespace once the
  // child is gone. The child makes only system calls (a fork of a possibly threaded sbx).
  int ready[2], hold[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return sys_error("mounts", "idmap: pipe");
  UniqueFd ready_r(ready[0]), ready_w(ready[1]);
  if (::pipe2(hold, O_CLOEXEC) != 0) return sys_error("mounts", "idmap: pipe");
  UniqueFd hold_r(hold[0]), hold_w(hold[1]);
  pid_t pid = ::fork();
  if (pid < 0) return sys_error("mounts", "idmap: fork");
  if (pid == 0) {
    char c = ::unshare(CLONE_NEWUSER) == 0 ? 1 : 0;
    if (::write(ready_w.get(), &c, 1) != 1) ::_exit(1);
    ::close(hold_w.get());
    (void)::read(hold_r.get(), &c, 1);  // until the parent closes its end
    ::_exit(0);
  }
  ready_w.reset();
  hold_r.reset();
  char c = 0;
  ssize_t n;
  do n = ::read(ready_r.get(), &c, 1);
  while (n < 0 && errno == EINTR);
  Result<UniqueFd> out = make_error("mounts", "idmap: unshare a user namespace", EPERM);
  if (n == 1 && c == 1) {
    Status st = write_proc_file(pid, "uid_map", map_text(uid_map));
    if (st) st = write_proc_file(pid, "gid_map", map_text(gid_map));
    std::string ns = "/proc/" + std::to_string(pid) + "/ns/user";
    if (!st) out = st.error();
    else if (UniqueFd fd(::open(ns.c_str(), O_RDONLY | O_CLOEXEC)); fd.ok()) out = std::move(fd);
    else out = sys_error("mounts", "idmap: open " + ns);
  }
  hold_w.reset();
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {}
  return out;
}

nlohmann::json identity_to_json(const IdentityPlan& plan) {
  auto maps = [](const std::vector<IdMapping>& m) {
    nlohmann::json a = nlohmann::json::array();
    // gid_map's items are the same definition (#/definitions/id_map).
    for (auto& e : m)
      a.push_back(trace_object({{"enforcement/identity/uid_map/[]/inside", e.inside},
                                {"enforcement/identity/uid_map/[]/outside", e.outside},
                                {"enforcement/identity/uid_map/[]/count", e.count}}));
    return a;
  };
  return trace_object({{"enforcement/identity/mode", plan.rootless ? "rootless" : "root"},
                       {"enforcement/identity/uid", plan.uid},
                       {"enforcement/identity/gid", plan.gid},
                       {"enforcement/identity/uid_map", maps(plan.uid_map)},
                       {"enforcement/identity/gid_map", maps(plan.gid_map)},
                       {"enforcement/identity/range_source", plan.range_source}});
}

}  // namespace sbx
