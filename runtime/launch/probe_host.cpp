// The host side of `sbx probe` (probe_host.hpp): what is left of a run on the host after it, and
// what the helper's targets are. cli/probe_cmd.cpp runs the probe; this judges.
#include "runtime/launch/probe_host.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "runtime/base/json_io.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/egress/egress_policy.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx {
using nlohmann::json;
namespace fs = std::filesystem;

// Every pid on the host now (the processes that were there before the probe run are not its).
std::set<pid_t> host_pids() {
  struct DirCloser {
    void operator()(DIR* d) const { ::closedir(d); }
  };
  std::set<pid_t> out;
  std::unique_ptr<DIR, DirCloser> d(::opendir("/proc"));
  if (!d) return out;
  while (dirent* e = ::readdir(d.get())) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end == 0 && pid > 0) out.insert(static_cast<pid_t>(pid));
  }
  return out;
}

namespace {
// Host pids whose command line holds `needle` (the termination probe's survivor).
std::vector<pid_t> pids_with(const std::string& needle) {
  std::vector<pid_t> out;
  for (pid_t pid : host_pids()) {
    auto text = read_bounded("/proc/" + std::to_string(pid) + "/cmdline", 1 << 16, "probe", "cmdline");
    if (text && text->find(needle) != std::string::npos) out.push_back(pid);
  }
  return out;
}
}  // namespace

// The host's mount table as seen by sbx (the caller's mount namespace, where the supervisor runs):
// "POINT FSTYPE SOURCE" per mount, counted. Mount ids are left out: they are what changes between
// two reads of the same table.
std::map<std::string, int> mount_table() {
  std::map<std::string, int> out;
  auto text = read_bounded("/proc/self/mountinfo", 16u << 20, "probe", "mountinfo");
  if (!text) return out;
  std::size_t at = 0;
  while (at < text->size()) {
    std::size_t nl = text->find('\n', at);
    std::string line = text->substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? text->size() : nl + 1;
    std::vector<std::string> f;
    for (std::size_t p = 0; p <= line.size();) {
      std::size_t sp = line.find(' ', p);
      f.push_back(line.substr(p, sp == std::string::npos ? std::string::npos : sp - p));
      if (sp == std::string::npos) break;
      p = sp + 1;
    }
    auto dash = std::find(f.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(f.size(), 6)), f.end(), "-");
    if (f.size() < 6 || dash == f.end() || dash + 2 >= f.end()) continue;
    ++out[f[4] + " " + *(dash + 1) + " " + *(dash + 2)];
  }
  return out;
}

// The allowlist's own targets (net.proxy_allowed, net.proxy_other_ports in probe/sbx_probe.c):
// for each rule (at most 8) one host:port it allows, and for each host one port it does not
// (the first of a few well-known ports the rules leave out; a host whose rules allow every port
// gets 22, which must then pass: the probe reports what the configuration does).
EgressTargets egress_targets(const json& plan) {
  EgressTargets e;
  std::vector<std::string> texts;
  if (plan.contains("network") && plan["network"].is_object() && plan["network"].contains("allow") &&
      plan["network"]["allow"].is_array())
    for (auto& r : plan["network"]["allow"])
      if (r.is_string()) texts.push_back(r.get<std::string>());
  auto rules = parse_allow_rules(texts);
  if (!rules) return e;
  std::set<std::string> hosts;
  for (const AllowRule& r : *rules) {
    if (e.allowed.size() >= 8) break;
    std::string host;
    switch (r.kind) {
      case AllowRule::Kind::name: host = r.name; break;
      // Any name below the domain: one the probe makes up (its lookup may fail: then the proxy
      // answers 502, which still shows the policy let it through).
      case AllowRule::Kind::wildcard: host = "sbx-probe." + r.name; break;
      case AllowRule::Kind::address:
      case AllowRule::Kind::cidr: {
        auto a = r.addr;
        // A CIDR's first host address (the network address itself is no host's).
        if (r.kind == AllowRule::Kind::cidr && r.prefix < (r.v6 ? 128 : 32)) a[r.v6 ? 15 : 3] |= 1;
        host = r.v6 ? "[" + address_text(true, a) + "]" : address_text(false, a);
        break;
      }
    }
    e.allowed.push_back(host + ":" + std::to_string(r.port ? *r.port : 443));
    if (!hosts.insert(host).second) continue;
    int pick = 22;
    for (int c : {22, 25, 3306, 6379, 8443, 9, 65535}) {
      auto t = parse_authority(host + ":" + std::to_string(c), std::nullopt);
      if (t && !check_egress(*rules, *t).allowed) {
        pick = c;
        break;
      }
    }
    e.other.push_back(host + ":" + std::to_string(pick));
  }
  return e;
}

namespace {
// Files under `root` (depth <= 4, at most 20000 entries, 64 MiB read in all) changed since `since`
// whose bytes hold one of `needles`: the paths, at most 4. `*searched` counts files read.
std::vector<std::string> files_holding(const std::string& root, const std::vector<std::string>& needles,
                                       std::time_t since, std::size_t* searched) {
  std::vector<std::string> hits;
  std::error_code ec;
  std::size_t entries = 0, bytes = 0;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end && hits.size() < 4; it.increment(ec)) {
    if (++entries > 20000) break;
    if (it.depth() >= 4) it.disable_recursion_pending();
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_mtime < since) continue;
    if (bytes + static_cast<std::size_t>(st.st_size) > (64u << 20)) continue;
    auto text = read_bounded(it->path().string(), 16u << 20, "probe", "file");
    if (!text) continue;
    bytes += text->size();
    ++*searched;
    for (auto& n : needles)
      if (!n.empty() && text->find(n) != std::string::npos) {
        hits.push_back(it->path().string());
        break;
      }
  }
  return hits;
}
}  // namespace

// --tenant NAME: LABEL PATH pairs for the helper, one per resource of every other tenant that a
// sandbox of NAME must not reach: its store directory and ledger, and (as root, where tenants'
// ids differ) the files in this run's bind sources owned by its host id slice. Host paths are
// mapped through the run's binds to where they would appear inside; a path no bind covers is
// probed as it is (absent, unless the root itself holds it).
std::vector<std::string> foreign_probes(const std::string& tenant, const Dirs& dirs, const json& plan) {
  std::vector<std::string> out;
  auto t = load_tenant(tenant);
  if (!t) return out;  // the dry run accepted it; a file changed since is the run's to refuse
  std::vector<std::pair<std::string, std::string>> binds;  // src, dst
  if (plan.contains("binds") && plan["binds"].is_array())
    for (auto& b : plan["binds"])
      if (b.is_object() && b["src"].is_string() && b["dst"].is_string())
        binds.emplace_back(b["src"].get<std::string>(), b["dst"].get<std::string>());
  // Compared as real paths: a bind given as "/", with a trailing slash or through a symlink must
  // still map the other tenant's store to where the sandbox sees it, or the probe would look at a
  // path that does not exist inside and call the store unreachable.
  auto real = [](const std::string& p) {
    char buf[PATH_MAX];
    return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
  };
  auto inside = [&](const std::string& host_path) {
    const std::string host = real(host_path);
    for (auto& [src_path, dst] : binds) {
      const std::string src = real(src_path);
      if (src == "/") return (dst == "/" ? std::string() : dst) + host;
      if (host == src || host.starts_with(src + "/")) return dst + host.substr(src.size());
    }
    return host;
  };
  for (auto& o : other_tenants(*t, dirs)) {
    // probe names are [a-z0-9_.] (probe_report.cpp): the tenant's name folded to fit.
    std::string label;
    for (char c : o.name.substr(0, 40))
      label += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : (c == '-' ? '_' : c);
    out.insert(out.end(), {label + ".store", inside(o.store)});
    out.insert(out.end(), {label + ".ledger", inside(o.store + "/traces/ledger.jsonl")});
    if (::geteuid() != 0) continue;
    static const RunSpec kDefaults;
    auto plan_o = plan_identity(kDefaults, o.id_slot);
    if (!plan_o) continue;
    const std::uint64_t lo = plan_o->uid_map.at(0).outside, hi = lo + plan_o->uid_map.at(0).count;
    int files = 0;
    for (auto& [src, dst] : binds) {
      DIR* d = ::opendir(src.c_str());
      if (!d) continue;
      int seen = 0;
      while (dirent* e = ::readdir(d)) {
        if (++seen > 4096 || files >= 8) break;
        struct stat st {};
        std::string name = e->d_name;
        if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        if (st.st_uid < lo || st.st_uid >= hi) continue;
        out.insert(out.end(), {label + ".file" + std::to_string(++files), dst + "/" + name});
      }
      ::closedir(d);
    }
  }
  return out;
}

std::string joined(const std::vector<std::string>& v, std::size_t max) {
  std::string out;
  for (std::size_t i = 0; i < v.size() && i < max; ++i) out += (out.empty() ? "" : ", ") + v[i];
  if (v.size() > max) out += ", ... (" + std::to_string(v.size()) + " in all)";
  return printable(out);
}

std::vector<std::string> run_mount_roots(const nlohmann::json& plan, const std::vector<std::string>& extra) {
  // /tmp: where build_root (runtime/linux/mounts.cpp, kBase) mounts the sandbox's base tmpfs
  // before the pivot; without the private propagation it would show up there first.
  std::vector<std::string> out = {"/tmp"};
  if (plan.is_object() && plan.contains("binds") && plan["binds"].is_array())
    for (auto& b : plan["binds"])
      if (b.is_object() && b.contains("src") && b["src"].is_string()) out.push_back(b["src"].get<std::string>());
  for (auto& e : extra)
    if (!e.empty()) out.push_back(e);
  for (auto& p : out)
    while (p.size() > 1 && p.back() == '/') p.pop_back();
  return out;
}

bool mount_within_reach(const std::string& key, const std::vector<std::string>& roots) {
  // mount_table's key: "POINT FSTYPE SOURCE" (mountinfo escapes blanks as \040).
  const std::string point = key.substr(0, key.find(' '));
  const std::size_t last = key.rfind(' ');
  const std::string source = last == std::string::npos ? "" : key.substr(last + 1);
  if (source.starts_with("sbx-")) return true;  // sbx names its own tmpfs mounts so
  for (auto& r : roots)
    if (path_within(point, r)) return true;
  return false;
}

// Cleanup, judged on the host after `sbx run` has returned: nothing of the run may be left.
namespace {
const json& enforcement_of(const json& record) {
  static const json none;
  return record.is_object() && record.contains("enforcement") ? record["enforcement"] : none;
}
std::string run_id_of(const json& record) {
  return record.is_object() && record.contains("run_id") && record["run_id"].is_string()
             ? record["run_id"].get<std::string>()
             : "";
}

void cleanup_mounts(std::vector<ProbeResult>& results, const std::map<std::string, int>& mounts_before,
                    const std::vector<std::string>& reachable) {
  // Mounts: the whole table of the caller's namespace, before and after. The sandbox's own mounts
  // live in its mount namespace and die with it; a new one the run could have made here is its
  // leftover. Other processes on the host mount too (a CI runner's containers, automounts): a new
  // mount nowhere the run reaches is reported, not judged (run_mount_roots).
  const auto after = mount_table();
  std::vector<std::string> added, elsewhere;
  for (auto& [k, n] : after) {
    auto b = mounts_before.find(k);
    if (n > (b == mounts_before.end() ? 0 : b->second))
      (mount_within_reach(k, reachable) ? added : elsewhere).push_back(k);
  }
  std::size_t before_n = 0, after_n = 0;
  for (auto& [k, n] : mounts_before) before_n += static_cast<std::size_t>(n);
  for (auto& [k, n] : after) after_n += static_cast<std::size_t>(n);
  if (!added.empty()) {
    results.push_back({"cleanup.mounts", "breached", "mounts added to the host's table by the run: " + joined(added)});
    return;
  }
  std::string evidence = "/proc/self/mountinfo: " + std::to_string(before_n) + " mounts before the run, " +
                         std::to_string(after_n) + " after; none added where the run reaches";
  if (!elsewhere.empty())
    evidence += "; " + std::to_string(elsewhere.size()) +
                " added meanwhile outside every path the run could reach (another process's, not judged): " +
                joined(elsewhere, 3);
  results.push_back({"cleanup.mounts", "held", evidence});
}

void cleanup_cgroup(std::vector<ProbeResult>& results, const json& record) {
  const json& enf = enforcement_of(record);
  const std::string run_id = run_id_of(record);
  // The run's cgroup: the record says which one it made (enforcement.cgroup "v2 PATH"); sbx's
  // cgroup.hpp layout also names it run-<run_id>@... below this process's own cgroup's sbx/.
  const std::string cg =
      enf.is_object() && enf.contains("cgroup") && enf["cgroup"].is_string() ? enf["cgroup"].get<std::string>() : "";
  std::vector<std::string> cg_left;
  struct stat st {};
  if (cg.starts_with("v2 ") && ::lstat(cg.substr(3).c_str(), &st) == 0) cg_left.push_back(cg.substr(3));
  if (!run_id.empty())
    if (auto own = read_bounded("/proc/self/cgroup", 64u << 10, "probe", "cgroup")) {
      auto at = own->find("0::");
      if (at != std::string::npos) {
        std::string rel = own->substr(at + 3, own->find('\n', at) - at - 3);
        std::string sbx_dir = "/sys/fs/cgroup" + (rel == "/" ? std::string() : rel) + "/sbx";
        if (DIR* d = ::opendir(sbx_dir.c_str())) {
          while (dirent* e = ::readdir(d))
            if (std::string(e->d_name).starts_with("run-" + run_id + "@")) cg_left.push_back(sbx_dir + "/" + e->d_name);
          ::closedir(d);
        }
      }
    }
  if (!cg_left.empty())
    results.push_back({"cleanup.cgroup", "breached", "the run's cgroup is still on the host: " + joined(cg_left)});
  else if (cg.starts_with("v2 "))
    results.push_back({"cleanup.cgroup", "held", "the run's cgroup " + printable(cg.substr(3)) + " is gone"});
  else
    results.push_back({"cleanup.cgroup", "held",
                       "the run made no cgroup (record: cgroup " + printable(cg.empty() ? "?" : cg) +
                           "), and none named run-" + printable(run_id) + "@ is left under sbx's own"});
}

void cleanup_processes(std::vector<ProbeResult>& results, const ProbeOutput& po, const json& record,
                       const std::set<pid_t>& pids_before, const std::string& token) {
  const json& enf = enforcement_of(record);
  // Processes: none in the run's pid namespace (the helper's inode, "I pidns"), and none in the
  // run's host id range that carries this probe's token (other runs share sbx's range).
  auto ns = po.info.find("pidns");
  std::uint64_t ns_ino = ns == po.info.end() ? 0 : std::strtoull(ns->second.c_str(), nullptr, 10);
  std::uint64_t lo = 0, hi = 0;
  if (enf.is_object() && enf.contains("identity") && enf["identity"].is_object()) {
    const json& m = enf["identity"].value("uid_map", json::array());
    if (m.is_array() && !m.empty() && m[0].is_object() && m[0].contains("outside") && m[0].contains("count") &&
        m[0]["outside"].is_number_unsigned() && m[0]["count"].is_number_unsigned()) {
      lo = m[0]["outside"].get<std::uint64_t>();
      hi = lo + m[0]["count"].get<std::uint64_t>();
      if (::getuid() >= lo && ::getuid() < hi) lo = hi = 0;  // rootless: the range is the caller's own uid
    }
  }
  std::vector<std::string> in_ns, in_range;
  std::size_t unreadable = 0;
  for (pid_t p : host_pids()) {
    if (pids_before.count(p) || p == ::getpid()) continue;
    std::string base = "/proc/" + std::to_string(p);
    struct stat ps {};
    if (ns_ino && ::stat((base + "/ns/pid").c_str(), &ps) == 0) {
      if (ps.st_ino == ns_ino) in_ns.push_back(std::to_string(p));
    } else if (ns_ino && errno != ENOENT) {
      ++unreadable;
    }
    if (hi > lo && ::stat(base.c_str(), &ps) == 0 && ps.st_uid >= lo && ps.st_uid < hi) {
      auto cmd = read_bounded(base + "/cmdline", 1 << 16, "probe", "cmdline");
      if (cmd && cmd->find(token) != std::string::npos) in_range.push_back(std::to_string(p));
    }
  }
  if (!ns_ino) results.push_back({"cleanup.processes", "skipped", "the helper did not report its pid namespace"});
  else if (!in_ns.empty() || !in_range.empty())
    results.push_back({"cleanup.processes", "breached",
                       "left on the host after the run: " +
                           (in_ns.empty() ? "" : "in its pid namespace: pid " + joined(in_ns) + " ") +
                           (in_range.empty() ? "" : "in its host id range: pid " + joined(in_range))});
  else
    results.push_back({"cleanup.processes", "held",
                       "no process left in the run's pid namespace (inode " + std::to_string(ns_ino) + ")" +
                           (hi > lo ? ", none with the probe's token in its host uid range " + std::to_string(lo) +
                                          "-" + std::to_string(hi - 1)
                                    : "") +
                           (unreadable ? " (" + std::to_string(unreadable) + " other processes unreadable)" : "")});
}

void cleanup_files(std::vector<ProbeResult>& results, const json& record, const std::string& run_tmp,
                   const std::string& token) {
  const std::string run_id = run_id_of(record);
  // Files: the TMPDIR the run was given is empty again, and nothing in /dev/shm names the run.
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = fs::directory_iterator(run_tmp, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (files.size() < 20) files.push_back(it->path().string());
  for (auto it = fs::directory_iterator("/dev/shm", ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string n = it->path().filename().string();
    if (n.find(token) != std::string::npos || (!run_id.empty() && n.find(run_id) != std::string::npos))
      files.push_back(it->path().string());
  }
  if (files.empty())
    results.push_back(
        {"cleanup.files", "held",
         "the run's TMPDIR (" + printable(run_tmp) + ") is empty again; nothing in /dev/shm names the run"});
  else results.push_back({"cleanup.files", "breached", "left on the host after the run: " + joined(files)});
}
}  // namespace

void degraded_limits(std::vector<ProbeResult>& results, const nlohmann::json& record) {
  const json& enf = enforcement_of(record);
  if (!enf.is_object() || !enf.contains("limits_applied") || !enf["limits_applied"].is_object()) return;
  const json& applied = enf["limits_applied"];
  for (auto& r : results) {
    if (r.status != "held" || !r.name.starts_with("limit.")) continue;
    const std::string key = r.name.substr(6);
    if (!applied.contains(key) || !applied[key].is_object()) continue;
    const json& a = applied[key];
    if (!a.contains("degraded") || a["degraded"] != true) continue;
    // What the helper tried (one process) held; what it could not try (several processes
    // together, say) is not bounded on this host, and the record says so: not "held".
    const std::string how =
        a.contains("mechanism") && a["mechanism"].is_string() ? a["mechanism"].get<std::string>() : "a fallback";
    r.status = "degraded";
    r.evidence += "; but enforced only by " + printable(how) +
                  ", not for the run as a whole (no cgroup v2 controller: see 'sbx doctor' and the record's "
                  "enforcement.limits_applied." +
                  key + ")";
  }
}

void cleanup_checks(std::vector<ProbeResult>& results, const ProbeOutput& po, const json& record,
                    const std::map<std::string, int>& mounts_before, const std::set<pid_t>& pids_before,
                    const std::string& run_tmp, const std::string& token, const std::vector<std::string>& reachable) {
  cleanup_mounts(results, mounts_before, reachable);
  cleanup_cgroup(results, record);
  cleanup_processes(results, po, record, pids_before, token);
  cleanup_files(results, record, run_tmp, token);
}

// --secret NAME: readable at /run/secrets/NAME during the run, with all its bytes (the helper's
// "I secret.K" count against the value sbx read).
void secret_file_check(std::vector<ProbeResult>& results, const ProbeOutput& po,
                       const std::vector<std::pair<std::string, std::string>>& secrets) {
  std::vector<std::string> bad, good;
  for (std::size_t k = 0; k < secrets.size(); ++k) {
    const auto& [name, value] = secrets[k];
    auto n = po.info.find("secret." + std::to_string(k));
    auto mode = po.info.find("secret." + std::to_string(k) + ".mode");
    long long got = n == po.info.end() ? -1 : std::strtoll(n->second.c_str(), nullptr, 10);
    std::string path = "/run/secrets/" + name;
    if (n == po.info.end()) bad.push_back(path + ": not reported");
    else if (got < 0) bad.push_back(path + ": " + std::strerror(static_cast<int>(-got)));
    else if (static_cast<std::size_t>(got) != value.size())
      bad.push_back(path + ": " + std::to_string(got) + " bytes inside, the secret has " +
                    std::to_string(value.size()));
    else
      good.push_back(path + ": all " + std::to_string(got) + " bytes" +
                     (mode == po.info.end() ? "" : ", mode " + mode->second));
  }
  if (bad.empty())
    results.push_back({"secret.file", "held", "readable where declared during the run: " + joined(good)});
  else results.push_back({"secret.file", "breached", "not readable as declared: " + joined(bad)});
}

// After the run no copy of a secret is left on the host: no mount of /run/secrets in the host's
// table, no process started since holding a value in its environment, no file changed since the
// run began (in the run's TMPDIR, /dev/shm and sbx's state directory) holding a value. Values
// under 8 bytes are not searched for (they would match by chance).
void secret_after_check(std::vector<ProbeResult>& results,
                        const std::vector<std::pair<std::string, std::string>>& secrets,
                        const std::set<pid_t>& pids_before, const std::map<std::string, int>& mounts_before,
                        const std::vector<std::string>& roots, std::time_t since) {
  std::vector<std::string> needles, names, shortv, left;
  for (auto& [name, value] : secrets) {
    (value.size() >= 8 ? names : shortv).push_back(name);
    if (value.size() >= 8) needles.push_back(value);
  }
  for (auto& [k, n] : mount_table())
    if (k.find("secrets") != std::string::npos && n > (mounts_before.count(k) ? mounts_before.at(k) : 0))
      left.push_back("mount " + k);
  std::size_t procs = 0;
  for (pid_t p : host_pids()) {
    if (pids_before.count(p) || p == ::getpid()) continue;
    auto env = read_bounded("/proc/" + std::to_string(p) + "/environ", 1u << 20, "probe", "environ");
    if (!env) continue;
    ++procs;
    for (auto& v : needles)
      if (env->find(v) != std::string::npos) {
        left.push_back("the environment of pid " + std::to_string(p));
        break;
      }
  }
  std::size_t searched = 0;
  for (auto& r : roots)
    for (auto& h : files_holding(r, needles, since, &searched)) left.push_back("file " + h);
  if (!left.empty())
    results.push_back(
        {"secret.after", "breached", "a secret's value is still on the host after the run: " + joined(left)});
  else
    results.push_back({"secret.after", "held",
                       "after the run: no mount of /run/secrets on the host, no value in the environment of " +
                           std::to_string(procs) + " processes started since, none in " + std::to_string(searched) +
                           " files changed since (run TMPDIR, /dev/shm, " + printable(roots.back()) + "); values of " +
                           joined(names, 8) +
                           (shortv.empty() ? "" : " (not searched, under 8 bytes: " + joined(shortv, 8) + ")")});
}

// The survivor: double-forked, in its own session, ignoring SIGTERM/SIGHUP/SIGINT. sbx ends a
// run by ending its pid namespace, so it must be gone by the time `sbx run` has returned; a short
// grace covers the kernel's reaping of the namespace's last processes.
void survivor_check(std::vector<ProbeResult>& results, const std::string& token) {
  std::vector<pid_t> left;
  const std::string survivor = std::string("sbx-probe-survivor") + '\0' + "survive" + '\0' + token;
  for (int i = 0; i < 40; ++i) {
    left = pids_with(survivor);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::erase_if(results, [](auto& r) { return r.name == "term.survivor_started"; });
  if (left.empty()) {
    results.push_back({"term.survivor", "held", "the double-forked, signal-ignoring survivor is gone after the run"});
    return;
  }
  std::string list;
  for (pid_t p : left) {
    list += (list.empty() ? "" : " ") + std::to_string(p);
    ::kill(p, SIGKILL);  // ours: started by this probe (the token names it)
  }
  results.push_back(
      {"term.survivor", "breached", "still running on the host after the run: pid " + list + " (killed now)"});
}

void export_check(std::vector<ProbeResult>& results, const std::string& exported) {
  if (std::any_of(results.begin(), results.end(),
                  [](auto& r) { return r.name == "export.prepared" && r.evidence.starts_with("/out holds"); })) {
    struct stat file {
    }, hard{}, st{};
    bool have_file = ::lstat((exported + "/probe-file").c_str(), &file) == 0 && S_ISREG(file.st_mode);
    std::vector<std::string> bad;
    if (::lstat((exported + "/probe-link").c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      bad.push_back("a symlink was exported");
    if (::lstat((exported + "/probe-fifo").c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
      bad.push_back("a FIFO was exported");
    bool have_hard = ::lstat((exported + "/probe-hard").c_str(), &hard) == 0;
    if (have_hard && (!S_ISREG(hard.st_mode) || hard.st_nlink != 1 || (have_file && hard.st_ino == file.st_ino)))
      bad.push_back("the hard link was exported as a link, not a copy");
    if (!have_file) bad.push_back("the regular file was not exported");
    std::string b;
    for (auto& x : bad) b += (b.empty() ? "" : "; ") + x;
    if (bad.empty())
      results.push_back({"export.entries", "held",
                         "--output exported the regular file; the symlink and the FIFO were "
                         "skipped; the hard link " +
                             std::string(have_hard ? "became an independent copy" : "was skipped")});
    else results.push_back({"export.entries", "breached", b});
  }
  std::erase_if(results, [](auto& r) { return r.name == "export.prepared"; });
}

std::string record_and_ledger_text(const std::string& trace_file, const json& record, const std::string& ledger) {
  auto written = read_bounded(trace_file, 64u << 20, "probe", "trace");
  json copy = record;
  std::string text = written ? *written : dump_json(copy, -1);
  if (auto fd = ::open(ledger.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      off_t from = st.st_size > (8 << 20) ? st.st_size - (8 << 20) : 0;
      std::string tail(static_cast<std::size_t>(st.st_size - from), '\0');
      ssize_t n = ::pread(fd, tail.data(), tail.size(), from);
      if (n > 0) text += tail.substr(0, static_cast<std::size_t>(n));
    }
    ::close(fd);
  }
  return text;
}

void secret_record_check(std::vector<ProbeResult>& results, const std::string& text,
                         const std::vector<std::pair<std::string, std::string>>& secrets) {
  std::string found, names;
  for (auto& [name, value] : secrets) {
    json as_json = value;
    std::string escaped = dump_json(as_json, -1);
    escaped = escaped.substr(1, escaped.size() - 2);
    names += (names.empty() ? "" : ", ") + name;
    if (value.size() >= 4 && (text.find(value) != std::string::npos || text.find(escaped) != std::string::npos))
      found += (found.empty() ? "" : ", ") + name;
  }
  if (!found.empty())
    results.push_back(
        {"secret.record", "breached", "the value of " + printable(found) + " is in the trace record or the ledger"});
  else
    results.push_back(
        {"secret.record", "held",
         "the record and the ledger's newest lines hold no value of " + printable(names) + " (raw or JSON-escaped)"});
}

void record_names_check(std::vector<ProbeResult>& results, const json& record_in, const std::string& token,
                        const std::string& status) {
  json record = record_in;  // read with operator[] as the probe always did: absent members are null
  const json& inv = record["invocation"];
  std::vector<std::string> missing;
  if (!record["image"].is_object() || !record["image"].contains("name")) missing.push_back("image");
  if (!inv.is_object() || !inv["profile"].is_object() || !inv["profile"]["sha256"].is_string())
    missing.push_back("profile");
  if (!inv.is_object() || !inv["spec"].is_object() || !inv["spec"]["argv"].is_array() ||
      inv["spec"]["argv"].size() < 2 || inv["spec"]["argv"][0] != "/sbx-probe" || inv["spec"]["argv"][1] != token)
    missing.push_back("command");
  const json& enf = record["enforcement"];
  if (!enf.is_object() || !enf["seccomp"].is_object()) missing.push_back("seccomp policy");
  if (!enf.is_object() || !enf["identity"].is_object()) missing.push_back("identity");
  if (missing.empty())
    results.push_back(
        {"record.names", "held",
         "image " + printable(record["image"]["name"].is_string() ? record["image"]["name"].get<std::string>() : "?") +
             ", profile " +
             printable(inv["profile"]["name"].is_string() ? inv["profile"]["name"].get<std::string>() : "?") +
             ", command, seccomp policy and identity are named; status " + printable(status)});
  else {
    std::string m;
    for (auto& x : missing) m += (m.empty() ? "" : ", ") + x;
    results.push_back({"record.names", "breached", "the record does not name: " + m});
  }
}

}  // namespace sbx
