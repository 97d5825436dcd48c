#include "runtime/linux/cgroup_ns.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/strings.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "cgroup-init";
constexpr const char* kOurs[] = {"memory", "pids", "cpu"};

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

std::vector<std::string> read_words(const std::string& path) {
  auto t = read_file(path);
  return t ? words(*t) : std::vector<std::string>{};
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// One write(2) per value: a cgroup control file parses each write as a whole.
int write_ctl(const std::string& path, const std::string& value) { return write_whole(path, value); }

bool valid_leaf(const std::string& leaf) {
  if (leaf.empty() || leaf.size() > 64 || leaf == "." || leaf == "..") return false;
  return std::all_of(leaf.begin(), leaf.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
  });
}

}  // namespace

CgroupNsRoot probe_cgroup_ns_root(const CgroupInfo& info) {
  CgroupNsRoot r;
  r.mount = info.mount;
  r.namespace_root = info.namespace_root;
  r.procs = info.namespace_root_procs;
  r.euid_root = ::geteuid() == 0;
  if (info.mount.empty()) return r;
  r.controllers = read_words(info.mount + "/cgroup.controllers");
  r.subtree_control = read_words(info.mount + "/cgroup.subtree_control");
  // Creating the leaf needs the directory; moving processes and enabling controllers need the
  // two control files (a read-only cgroup mount fails all three with EROFS).
  r.writable = ::access(info.mount.c_str(), W_OK) == 0 && ::access((info.mount + "/cgroup.procs").c_str(), W_OK) == 0 &&
               ::access((info.mount + "/cgroup.subtree_control").c_str(), W_OK) == 0;
  return r;
}

CheckResult assess_cgroup_namespace(const CgroupNsRoot& root) {
  CheckResult r{"cgroupns", CheckStatus::ok, false, "", ""};
  if (root.mount.empty()) {
    r.detail = "no cgroup v2 mounted (see the cgroup check)";
    return r;
  }
  if (!root.namespace_root) {
    r.detail = "not in a container's cgroup namespace: " + root.mount + " is the hierarchy's real root";
    return r;
  }
  std::vector<std::string> offered, enabled;
  for (const char* c : kOurs) {
    if (has(root.controllers, c)) offered.push_back(c);
    if (has(root.subtree_control, c)) enabled.push_back(c);
  }
  std::string where = "cgroup namespace root " + root.mount + " (" +
                      (root.procs < 0 ? std::string("? processes") : std::to_string(root.procs) + " processes") +
                      ", controllers: '" + join_words(root.controllers) + "', enabled for children: '" +
                      join_words(root.subtree_control) + "')";
  if (offered.empty()) {
    r.status = CheckStatus::degraded;
    r.detail = where + ": the container runtime delegated none of memory, pids, cpu; limits fall back to rlimits";
    r.hint =
        "give the container a cgroup v2 with its controllers (a cgroup namespace of its own on a cgroup v2 host; "
        "see deploy/README.md)";
    return r;
  }
  if (!root.writable) {
    r.status = CheckStatus::degraded;
    r.detail = where + ": mounted read-only; sbx cannot create run cgroups, limits fall back to rlimits";
    r.hint =
        "mount the container's cgroup v2 read-write (Kubernetes: see deploy/README.md, \"writable cgroup\"); "
        "then, as root in the container: sbx cgroup-init";
    return r;
  }
  if (enabled.size() == offered.size()) {
    r.detail = where + ": " + join_words(enabled, "/") + " enabled for children; run cgroups go under " + root.mount +
               "/sbx" + (root.euid_root ? "" : " (as root in the container)");
    return r;
  }
  if (root.procs == 0) {
    // Empty root: RunCgroup::create enables what it needs itself (the root may then be used as
    // the real root is).
    r.detail = where + ": no process at the root; sbx enables " + join_words(offered, "/") + " itself";
    return r;
  }
  r.status = CheckStatus::degraded;
  r.detail = where +
             ": the container's processes are at the namespace root, and cgroup v2 forbids controllers for "
             "children of a cgroup with processes (the namespace root is not exempt like the real root); "
             "limits fall back to rlimits";
  r.hint =
      "run once, as root, in the container's entrypoint before any sbx run: sbx cgroup-init "
      "(moves the container's processes into " +
      root.mount + "/init and enables +" + join_words(offered, " +") + " at " + root.mount + "; see deploy/README.md)";
  return r;
}

Result<CgroupInitReport> cgroup_init(const CgroupInfo& info, const std::string& leaf) {
  if (!valid_leaf(leaf) || leaf == "sbx" || leaf == "sbx-supervisor")
    return make_error(kStage,
                      "invalid leaf name '" + leaf + "': one path component of [A-Za-z0-9_.-], at most 64 characters",
                      EINVAL);
  if (info.mount.empty() || info.layout == "v1" || info.layout == "none")
    return make_error(kStage, "no cgroup v2 hierarchy is mounted", ENOENT);
  CgroupInitReport rep;
  rep.root = info.mount;
  // Nothing to do is not a failure: an entrypoint that runs cgroup-init also runs where the
  // container shares the host's cgroup namespace.
  if (is_real_cgroup_root(info.mount)) {
    rep.nothing_to_do = info.mount +
                        " is the hierarchy's real root, exempt from the no-internal-processes rule "
                        "(not a container's cgroup namespace)";
    return rep;
  }
  if (!info.namespace_root) {
    rep.nothing_to_do =
        info.mount + " is not the root of sbx's cgroup namespace (/proc/self/cgroup: '" + info.self_path + "')";
    return rep;
  }
  rep.leaf = info.mount + "/" + leaf;
  auto avail = read_words(info.mount + "/cgroup.controllers");
  std::vector<std::string> offered;
  for (const char* c : kOurs)
    if (has(avail, c)) offered.push_back(c);
  if (offered.empty())
    return make_error(kStage,
                      "cgroup v2 at " + info.mount + " offers none of memory, pids, cpu (cgroup.controllers: '" +
                          join_words(avail) + "'): the container runtime delegated no controller",
                      ENOTSUP);
  if (::mkdir(rep.leaf.c_str(), 0755) != 0 && errno != EEXIST) return sys_error(kStage, "cannot create " + rep.leaf);
  // A process may fork while we move its siblings; go round until the root reads empty.
  for (int round = 0;; ++round) {
    auto procs = read_file(info.mount + "/cgroup.procs");
    if (!procs) {
      procs.error().stage = kStage;
      return procs.error();
    }
    auto list = words(*procs);
    if (list.empty()) break;
    if (round >= 100)
      return make_error(kStage, info.mount + " still holds processes after 100 rounds of moving them (a fork loop?)",
                        EBUSY);
    for (const auto& w : list) {
      long pid = std::strtol(w.c_str(), nullptr, 10);
      if (pid <= 0)
        return make_error(kStage,
                          info.mount +
                              " holds a process of a pid namespace sbx cannot see (listed as 0): "
                              "run sbx cgroup-init in the container's pid namespace",
                          EBUSY);
      int err = write_ctl(rep.leaf + "/cgroup.procs", std::to_string(pid));
      if (err == ESRCH) continue;  // exited meanwhile
      if (err) {
        errno = err;
        return sys_error(kStage, "cannot move process " + std::to_string(pid) + " into " + rep.leaf + "/cgroup.procs");
      }
      rep.moved.push_back(static_cast<pid_t>(pid));
    }
  }
  auto current = read_words(info.mount + "/cgroup.subtree_control");
  for (const auto& c : offered) {
    if (has(current, c)) {
      rep.already.push_back(c);
      continue;
    }
    if (int err = write_ctl(info.mount + "/cgroup.subtree_control", "+" + c)) {
      errno = err;
      Error e =
          sys_error(kStage, "cannot enable the " + c + " controller in " + info.mount + "/cgroup.subtree_control");
      if (err == EBUSY) e.message += " (a process entered the root meanwhile; run sbx cgroup-init again)";
      return e;
    }
    rep.enabled.push_back(c);
  }
  return rep;
}

}  // namespace sbx
