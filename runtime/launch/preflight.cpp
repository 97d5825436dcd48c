#include "runtime/launch/preflight.hpp"
#include "runtime/launch/workspace.hpp"

#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "runtime/base/paths.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/record/ledger_key.hpp"
#include "runtime/base/units.hpp"
#include "runtime/model/limits_table.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx {
namespace {

// The flag that sets each limit of the plan (limits_table.hpp; every planned limit has one).
std::string flag_of(const std::string& limit) {
  const LimitKind* k = limit_kind_by_plan_name(limit);
  return k && k->flag[0] ? k->flag : "the " + limit + " flag";
}

// As root, init looks a bind source up as the sandbox's root: the host uid and gid that inside 0
// maps to, with no supplementary groups (userns.cpp's become_namespace_root). A child process with
// exactly those credentials takes the same look now, before anything is created, so that a path
// that uid cannot search fails here with the hint instead of inside a half-built sandbox. It
// makes only system calls (fork of a single-threaded sbx). 0 when it can; else the errno.
int stat_as_sandbox_root(const char* path, const IdentityPlan& identity) {
  uid_t uid = identity.uid_map.empty() ? 0 : identity.uid_map.front().outside;
  gid_t gid = identity.gid_map.empty() ? 0 : identity.gid_map.front().outside;
  for (auto& m : identity.uid_map)
    if (m.inside == 0) uid = m.outside;
  for (auto& m : identity.gid_map)
    if (m.inside == 0) gid = m.outside;
  pid_t pid = ::fork();
  if (pid < 0) return 0;  // cannot tell: the run finds out as before
  if (pid == 0) {
    struct stat st;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0) ::_exit(0);
    ::_exit(::stat(path, &st) == 0 ? 0 : (errno & 0xff));
  }
  // A source on a hung network or FUSE file system must not hang sbx before its run even starts:
  // the answer is awaited for at most 5 s, then the child is killed and the question left to the
  // run (whose mount would meet the same file system).
  int ws = 0;
  if (UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))); pidfd.ok()) {
    struct pollfd p = {pidfd.get(), POLLIN, 0};
    int n;
    do n = ::poll(&p, 1, 5000);
    while (n < 0 && errno == EINTR);
    if (n == 0) ::kill(pid, SIGKILL);
  }
  while (::waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 0;
}

}  // namespace

Status check_trace_file(const std::string& path) {
  if (path.empty()) return {};
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return sys_error("usage", "--trace-file " + path + ": directory " + dir);
  if (!S_ISDIR(st.st_mode)) return make_error("usage", "--trace-file " + path + ": " + dir + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return sys_error("usage", "--trace-file " + path + ": directory " + dir);
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return make_error("usage", "--trace-file " + path + " is a directory");
  return {};
}

Status check_sources(const std::vector<BindSource>& sources, const RunSpec& spec, const std::string& cwd,
                     const IdentityPlan* identity) {
  if (!identity || identity->rootless) return {};
  for (auto& src : sources) {
    if (src.given.idmap) continue;  // sbx (host root) opens and mounts it: the sandbox looks nothing up
    if (int err = stat_as_sandbox_root(src.real.c_str(), *identity)) {
      Error e = make_error("mounts", "bind source " + src.real, err);
      add_setup_hint(e, spec, *identity, cwd);
      return e;
    }
  }
  return {};
}

BindWrite bind_write_access(const BindOwnership& src, const IdentityPlan& id, const std::vector<std::uint32_t>& groups,
                            bool idmap) {
  auto uid = host_id(id.uid_map, id.uid), gid = host_id(id.gid_map, id.gid);
  if (!uid || !gid) return BindWrite::uncertain;
  if (idmap && id.rootless) return src.uid == *uid ? BindWrite::writable : BindWrite::idmap_rootless;
  // Idmapped, the source's owner and group are the program's own inside (mounts.hpp).
  const std::uint32_t owner = idmap ? *uid : src.uid, group = idmap ? *gid : src.gid;
  // The kernel's order: the owner's bits for the owner, else the group's for a member, else the
  // others' (a matching class that denies is not overridden by a later one that grants).
  unsigned bits = owner == *uid ? (src.mode >> 6) & 7U
                  : group == *gid || std::find(groups.begin(), groups.end(), group) != groups.end()
                      ? (src.mode >> 3) & 7U
                      : src.mode & 7U;
  const unsigned need = src.dir ? 3U : 2U;  // a directory's entries need write and search
  if ((bits & need) == need) return BindWrite::writable;
  // The namespace's root has CAP_DAC_OVERRIDE over a file whose owner and group both map into it
  // (capable_wrt_inode_uidgid); a profile may drop the capability, but the check refuses only when
  // it is certain.
  if (id.uid == 0 && maps_host_id(id.uid_map, owner) && maps_host_id(id.gid_map, group)) return BindWrite::writable;
  return src.acl || !src.generic_perms ? BindWrite::uncertain : BindWrite::unwritable;
}

namespace {
// What the pre-check reads of an opened bind source: its stat, whether it carries an access ACL,
// and whether its file system checks permissions by the mode alone. The NFS server, a FUSE
// daemon without default_permissions, ZFS's or CIFS's own ACLs may grant what the mode denies:
// those are only warned about.
BindOwnership read_ownership(const BindSource& src) {
  BindOwnership o;
  struct stat st;
  if (::fstat(src.fd.get(), &st) != 0) return {0, 0, 0777, src.dir, false, false};  // unknown: not refused
  o.uid = st.st_uid;
  o.gid = st.st_gid;
  o.mode = st.st_mode & 07777;
  o.dir = S_ISDIR(st.st_mode);
  const std::string at = "/proc/self/fd/" + std::to_string(src.fd.get());
  ssize_t n = ::getxattr(at.c_str(), "system.posix_acl_access", nullptr, 0);
  o.acl = n > 0 || (n < 0 && errno != ENODATA && errno != ENOTSUP);  // cannot tell: as if it had one
  struct statfs fs;
  if (::fstatfs(src.fd.get(), &fs) != 0) return o.generic_perms = false, o;
  const auto type = static_cast<unsigned long>(fs.f_type);
  o.generic_perms = type == EXT4_SUPER_MAGIC || type == XFS_SUPER_MAGIC || type == BTRFS_SUPER_MAGIC ||
                    type == TMPFS_MAGIC || type == OVERLAYFS_SUPER_MAGIC || type == F2FS_SUPER_MAGIC;
  return o;
}

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}
}  // namespace

namespace {
bool root_owned(const BindOwnership& o) { return o.uid == 0 || o.gid == 0; }
}  // namespace

bool wants_owner_idmap(const BindOwnership& src, const IdentityPlan& id, bool initial_userns,
                       std::optional<std::uint32_t> invoking_uid) {
  return !id.rootless && initial_userns && invoking_uid && src.uid == *invoking_uid && !root_owned(src) &&
         bind_write_access(src, id, {}, false) == BindWrite::unwritable;
}

std::optional<std::uint32_t> sudo_invoking_uid(const char* value) {
  if (!value || !*value || std::strlen(value) > 10) return std::nullopt;
  std::uint64_t n = 0;
  for (const char* c = value; *c; ++c) {
    if (*c < '0' || *c > '9') return std::nullopt;
    n = n * 10 + static_cast<std::uint64_t>(*c - '0');
  }
  if (n == 0 || n >= 4294967295ULL) return std::nullopt;
  return static_cast<std::uint32_t>(n);
}

void idmap_owned_binds(std::vector<BindSource>& sources, const IdentityPlan& identity, const std::string& cwd,
                       bool tenanted) {
  if (identity.rootless || tenanted) return;
  const auto invoking = sudo_invoking_uid(std::getenv("SUDO_UID"));
  if (!invoking) return;
  const bool initial = identity.initial_namespace;
  for (BindSource& src : sources) {
    if (src.flag != "--bind" || !src.given.rw || src.given.idmap) continue;
    // A symlink on the way: only what was named is the user's.
    if (absolute_lexical(cwd, src.given.src) != src.real) continue;
    BindOwnership o = read_ownership(src);
    if (!wants_owner_idmap(o, identity, initial, invoking)) continue;
    src.given.idmap = true;
    spdlog::info(
        "--bind {}: owned by uid {} (SUDO_UID), which the sandbox cannot write as its own: idmapped, the "
        "program writes as that owner",
        src.given.src, o.uid);
  }
}

// Refuse, rather than warn: a read-write bind nothing inside can write is a mistake (the caller
// asked for rw), and it shows only as EACCES deep inside the program's work ("ld: cannot open
// output file"), after the run's setup and time are spent. Refused only when the mode settles
// it; where an ACL or the file system may still grant, a warning says what to do if writes fail.
Status check_binds_writable(const std::vector<BindSource>& sources, const IdentityPlan& identity,
                            const std::string& workspace) {
  std::vector<std::uint32_t> groups;
  if (identity.keep_groups) {  // the caller's supplementary groups stay with the program (userns.hpp)
    int n = ::getgroups(0, nullptr);
    std::vector<gid_t> g(static_cast<std::size_t>(std::max(n, 0)));
    if (n > 0 && ::getgroups(n, g.data()) == n) groups.assign(g.begin(), g.end());
  }
  const std::string uid = std::to_string(host_id(identity.uid_map, identity.uid).value_or(0));
  const bool initial = identity.rootless || identity.initial_namespace;
  for (auto& src : sources) {
    if (src.flag != "--bind" || !(src.given.rw || src.given.idmap)) continue;
    BindOwnership o = read_ownership(src);
    BindWrite w = bind_write_access(o, identity, groups, src.given.idmap);
    const std::string name = "--bind " + src.given.src + ":" + src.given.dst + ":" + (src.given.rw ? "rw" : "ro") +
                             (src.given.idmap ? ",idmap" : "");
    const std::string what = src.real + " is owned by uid " + std::to_string(o.uid) + " gid " + std::to_string(o.gid) +
                             " mode " + octal_mode(o.mode);
    const std::string who = identity.rootless ? "you (uid " + uid + ")" : "host uid " + uid;
    // idmap gives the program the owner's rights over the tree, setuid and setgid bits included:
    // on a root-owned one it could leave a setuid-root program on the host (nosuid holds only on
    // the sandbox's copy of the mount). Only a source owned by an ordinary user and group.
    if (src.given.idmap && !identity.rootless && root_owned(o))
      return make_error("usage", name + ": " + what +
                                     ": idmap would let the program write as root there (a setuid-root "
                                     "file it leaves would be live on the host): idmap a directory owned by an "
                                     "ordinary user (chown it), or drop idmap");
    if (!src.given.rw && !identity.rootless) continue;  // read-only: nothing to write
    switch (w) {
      case BindWrite::writable: break;
      case BindWrite::idmap_rootless:
        return make_error("usage", name + ": " + what + ", and rootless the sandbox writes only as " + who +
                                       ": idmap needs sbx to run as root (drop idmap, or bind a directory you own)");
      case BindWrite::uncertain:
        spdlog::warn(
            "{}: {}, which gives the sandbox ({}) no write access by its mode; its ACL or file system may: "
            "if writes fail inside, {}",
            name, what, who,
            identity.rootless           ? "let your uid write it (chmod, setfacl)"
            : root_owned(o) || !initial ? "let host uid " + uid + " write it (chmod, chown, setfacl)"
                                        : "add idmap to write as its owner, or let host uid " + uid + " write it");
        break;
      case BindWrite::unwritable:
        if (!workspace.empty() && src.given.src == workspace && src.given.dst == workspace && !src.given.idmap) {
          spdlog::warn(
              "--workspace {}: {}, and the sandbox writes as {}{}, who cannot write it: the program reads "
              "it, its writes fail; {}",
              workspace, what, who, identity.rootless ? "" : " (its root)",
              identity.rootless           ? "chmod/chown it, or run where you can write"
              : root_owned(o) || !initial ? "chmod/chown it for uid " + uid + ", or run sbx as an ordinary user"
                                          : "to write as its owner, --bind " + workspace + ":" + workspace +
                                                ":rw,idmap --workdir " + workspace + " instead of --workspace");
          break;
        }
        if (src.given.idmap)
          return make_error("usage", name + ": " + what + ": even as its owner (idmap) the sandbox cannot write it: " +
                                         "chmod u+w" + (o.dir ? "x " : " ") + src.real);
        if (identity.rootless)
          return make_error("usage", name + ": " + what + ", and the sandbox writes as " + who +
                                         ", who cannot write it: chmod/chown it, or bind a directory you can write");
        if (!initial)
          return make_error("usage", name + ": " + what + ", and the sandbox writes as " + who +
                                         " (its root), which cannot write it: chown/chmod it for uid " + uid +
                                         " (no idmapped mount can be made in this user namespace)");
        if (root_owned(o))
          return make_error("usage", name + ": " + what + ", and the sandbox writes as " + who +
                                         " (its root), which cannot write it: chown it to an ordinary user and add "
                                         "idmap to write as that user (--bind " +
                                         src.given.src + ":" + src.given.dst +
                                         ":rw,idmap), or chmod/chown it for uid " + uid);
        return make_error("usage", name + ": " + what + ", and the sandbox writes as " + who +
                                       " (its root), which cannot write it: add idmap to write as its owner (--bind " +
                                       src.given.src + ":" + src.given.dst + ":rw,idmap), or chown/chmod it for uid " +
                                       uid);
    }
  }
  return {};
}

namespace {
// A file's identity: what a bind source and a guarded directory are compared by, whatever path
// (a symlink, a bind mount elsewhere on the host) reaches either.
struct FileId {
  std::uint64_t dev = 0, ino = 0;
  bool operator==(const FileId&) const = default;
};
std::optional<FileId> id_of(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

// The directory `dir` (an fd; consumed) and every directory above it, by "..", up to this
// process's root: the kernel's own parents, not a path's. A step that cannot be taken (a
// directory sbx's user cannot search) ends the list there.
std::vector<FileId> dir_and_above(UniqueFd dir) {
  std::vector<FileId> out;
  for (int i = 0; i < 4096 && dir.ok(); ++i) {
    auto id = id_of(dir.get());
    if (!id || (!out.empty() && out.back() == *id)) break;  // "/" is its own parent
    out.push_back(*id);
    dir = UniqueFd(::openat(dir.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
  }
  return out;
}

// What no read-write bind may reach: the directory (when it exists) and every directory above
// it, the nearest existing one first when it does not exist yet.
struct Guarded {
  std::string path;  // resolved_path
  std::string what;
  std::optional<FileId> self;
  std::vector<FileId> above;
};
Guarded guard(const std::string& dir, const std::string& what) {
  Guarded g{resolved_path(dir), what, std::nullopt, {}};
  std::string p = g.path;
  for (bool exists = true;; exists = false) {
    UniqueFd fd(::open(p.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (fd.ok()) {
      g.above = dir_and_above(std::move(fd));
      if (exists && !g.above.empty()) {
        g.self = g.above.front();
        g.above.erase(g.above.begin());
      }
      return g;
    }
    if (p == "/" || p == ".") return g;  // nothing of it can be looked at: the path check is all
    auto slash = p.rfind('/');
    p = slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
  }
}

// How an opened bind source stands to a guarded directory, by identity: "" when unrelated.
// `above`: the directories above the source.
std::string id_relation(const BindSource& src, const std::vector<FileId>& above, const Guarded& g) {
  const FileId self{src.dev, src.ino};
  auto has = [](const std::vector<FileId>& v, const FileId& id) {
    return std::find(v.begin(), v.end(), id) != v.end();
  };
  if (src.dir && g.self && self == *g.self) return "is";
  if (g.self && has(above, *g.self)) return "is inside";
  if (src.dir && has(g.above, self)) return "holds";
  return "";
}
}  // namespace

Status check_binds_spare_state(const std::vector<BindSource>& sources, const Dirs& dirs,
                               const std::vector<std::pair<std::string, std::string>>& also) {
  std::vector<Guarded> guarded;
  for (auto& src : sources) {
    // A read-only idmap bind reads as the owner (root's 0600 files included): guarded as well.
    if (src.flag != "--bind" || !(src.given.rw || src.given.idmap)) continue;
    if (guarded.empty()) {  // worked out once, and only for a run with a read-write bind
      if (!dirs.state.empty()) guarded.push_back(guard(dirs.state, "sbx's state dir"));
      if (!dirs.data.empty()) guarded.push_back(guard(dirs.data, "sbx's data dir"));
      if (auto k = ledger_key_paths(); k && !k->dir.empty())
        guarded.push_back(guard(k->dir, "sbx's config dir (the ledger key)"));
      for (auto& [dir, what] : also)
        if (!dir.empty()) guarded.push_back(guard(dir, what));
    }
    // The directories above the opened source, walked from its fd (a file's from its parent's,
    // checked to hold that very file).
    std::vector<FileId> above;
    if (src.dir) {
      UniqueFd parent(::openat(src.fd.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
      above = dir_and_above(std::move(parent));
      if (!above.empty() && above.front() == FileId{src.dev, src.ino}) above.clear();  // "/": nothing above
    } else {
      auto slash = src.real.rfind('/');
      std::string parent = slash == 0 ? "/" : src.real.substr(0, slash);
      UniqueFd pfd(::open(parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      struct stat st;
      if (pfd.ok() && ::fstatat(pfd.get(), src.real.substr(slash + 1).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          st.st_dev == src.dev && st.st_ino == src.ino)
        above = dir_and_above(std::move(pfd));
      else
        return make_error("usage", src.flag + " " + src.given.src + ":" + src.given.dst + ":rw: " + src.real +
                                       " was moved or replaced while sbx checked it; run again");
    }
    for (auto& g : guarded) {
      // By identity (a path through another bind mount or symlink reaches the same directory),
      // and by the opened file's real path, which names it in the message.
      std::string rel = id_relation(src, above, g);
      if (rel.empty()) rel = path_relation(src.real, g.path);
      if (rel.empty()) continue;
      return make_error("usage",
                        src.flag + " " + src.given.src + ":" + src.given.dst + ":rw: " + src.real + " " + rel + " " +
                            g.what + " " + g.path +
                            ": a program that can write there changes what later runs trust (the seccomp cache, "
                            "the ledger a replay rebuilds from); bind a directory outside it, or read-only");
    }
  }
  return {};
}

namespace {
// The decision keeps the raw value (bytes, milliseconds) for the trace; a message says it the
// way the flag takes it ("64M", "2s"), so a user can match it against the command line.
std::string value_as_flag_spells_it(const LimitDecision& d) {
  try {
    const LimitKind* k = limit_kind_by_plan_name(d.limit);
    if (LimitFormat fmt = k ? limit_format(k->unit) : nullptr) return fmt(std::stoll(d.value));
  } catch (const std::exception&) {}
  return d.value;
}
}  // namespace

std::optional<Error> require_limits_shortfall(const LimitPlan& plan, const CgroupInfo& cg,
                                              const std::map<std::string, std::string>& layers) {
  std::string missing;
  // Not applied at all, or applied per process only where the limit is on the total (memory in
  // the rlimit fallback: LimitPlan::unbounded).
  for (auto* d : plan.unbounded()) {
    auto layer = layers.find(d->limit);
    std::string what = d->limit + (d->applied ? " in total" : "") + " (" + value_as_flag_spells_it(*d);
    if (layer != layers.end() && layer->second.rfind("flag", 0) == 0)
      what += ", set by " + layer->second + ": leave it out to run without it)";
    else if (layer != layers.end())
      what += ", set by " + layer->second + ": clear it with " + flag_of(d->limit) + " none)";
    else what += ")";
    missing += (missing.empty() ? "" : ", ") + what;
  }
  if (missing.empty()) return std::nullopt;
  return make_error("limits", "--require-limits: cannot enforce " + missing +
                                  " on this host (cgroup v2 layout: " + cg.layout + "; see 'sbx doctor')");
}

std::string wall_time_message(std::int64_t timeout_ms, const std::string& layer, CeilingRaise how) {
  const std::string limit = format_duration_ms(timeout_ms);
  std::string line = "wall-time limit of " + limit + " reached: sandbox killed (exit 124)";
  if (layer.rfind("flag ", 0) == 0) return line;  // the caller's own number: nothing to explain
  std::string more = format_duration_ms(std::max<std::int64_t>(timeout_ms * 4, 60000));
  bool from_profile = layer.rfind("profile ", 0) == 0 || layer == "sbx's defaults" || layer.empty();
  std::string profile = layer.empty() ? "the profile" : layer;
  if (how == CeilingRaise::by_profile) {
    // The profile's limit is the request's ceiling: a request may lower it, never raise it.
    const LimitKind* k = limit_kind_by_plan_name("timeout");
    std::string raise = k ? ceiling_raise_hint(*k, how) : std::string();
    if (from_profile)
      return line + "; " + limit + " is the ceiling of " + profile +
             ": a request's limits.timeout may lower it, not raise it" + raise;
    return line + "; set by " + layer + ": raise limits.timeout there, up to the profile's ceiling" + raise;
  }
  if (from_profile)
    return line + "; " + limit + " is the default of " + profile + ": raise it with --timeout, e.g. --timeout " + more +
           " (none: no limit)";
  return line + "; set by " + layer + ": raise limits.timeout there, e.g. \"" + more + "\"";
}

bool procfs_at_proc() {
  struct statfs fs {};
  return ::statfs("/proc/self", &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC;
}

void add_setup_hint(Error& e, const RunSpec& spec, const IdentityPlan& identity, const std::string& cwd) {
  if (!e.hint.empty()) return;
  if (e.stage == "execve" && (e.err == ENOENT || e.err == ENOTDIR) && !spec.argv.empty() && !spec.argv[0].empty()) {
    const std::string& cmd = spec.argv[0];
    struct stat st;
    if (cmd[0] == '/') {
      const std::string bind_dir =
          "--bind " + cmd.substr(0, std::max<std::size_t>(cmd.rfind('/'), 1)) + ", read-only at the same path";
      auto bound = [&](const BindMount& b) { return cmd.rfind(b.dst + "/", 0) == 0 || cmd == b.dst; };
      if (!spec.image.empty() && spec.image != "host") {
        // On an image the root is the image's: what the host has says nothing. A program under a
        // bind is there, and its ENOENT is its interpreter's or dynamic loader's; otherwise the
        // image lacks it (an exec request's language whose interpreter it lacks, usually).
        if (std::any_of(spec.binds.begin(), spec.binds.end(), bound))
          e.hint = cmd + " is bound from the host, but image " + spec.image +
                   " lacks what it needs to start (a script's interpreter, or a binary's dynamic loader and "
                   "libraries): use a static binary, or an image that has them";
        else
          e.hint = cmd + " is not in image " + spec.image +
                   ", the sandbox's root: use an image that has it (sbx image ls; an exec request's language needs "
                   "its interpreter there), or bind it from the host (" +
                   bind_dir + ")";
      } else if (::stat(cmd.c_str(), &st) == 0) {
        // An absolute path the host has: a script of the caller's, outside what the sandbox mounts.
        e.hint = cmd + " is on the host but not in the sandbox; bind its directory (" + bind_dir + "), or " +
                 project_dir_advice();
      }
      return;
    }
    bool relative = cmd.find('/') != std::string::npos;
    bool in_cwd = ::stat((cwd + "/" + cmd).c_str(), &st) == 0;
    if (relative || in_cwd)
      e.hint = "the sandbox's working directory is " + spec.workdir + " and the current directory is not mounted; " +
               project_dir_advice();
    return;
  }
  // No procfs at /proc at all (a bwrap without --proc, a bare chroot): the first /proc path sbx
  // opens is missing, long before a proc mount is tried. The fix is the same as a masked /proc's.
  if (e.err == ENOENT && e.message.find("/proc/") != std::string::npos && !procfs_at_proc()) {
    e.hint = proc_mount_refused_hint(std::nullopt);
    return;
  }
  bool bind = e.stage == "mounts" && e.message.rfind("bind source ", 0) == 0;
  if (bind && e.err == EACCES && !identity.rootless && !identity.uid_map.empty()) {
    std::uint32_t host_uid = identity.uid_map.front().outside;
    for (auto& m : identity.uid_map)
      if (m.inside == 0) host_uid = m.outside;
    e.hint = "as root, the sandbox runs as host uid " + std::to_string(host_uid) +
             ", which cannot reach this path: make every directory above it searchable for that uid "
             "(e.g. chmod o+x), or run sbx as an ordinary user (rootless), whose own files the sandbox can read";
  }
  if (e.stage == "mounts" && e.err == EPERM && e.message.rfind("proc on ", 0) == 0) {
    // The supervisor's view is the host's: the sandbox's mount namespace was copied from it.
    auto text = read_file("/proc/self/mountinfo");
    e.hint = proc_mount_refused_hint(text ? std::optional<std::string>(std::move(*text)) : std::nullopt);
  }
}

namespace {

// mountinfo escapes a space, tab, newline and backslash in a path as \ooo.
std::string unescape_mountinfo(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::string proc_mount_refused_hint(const std::optional<std::string>& mountinfo) {
  bool proc_seen = false;
  std::vector<std::string> covered;
  std::size_t at = 0;
  while (mountinfo && at < mountinfo->size()) {
    std::size_t end = mountinfo->find('\n', at);
    if (end == std::string::npos) end = mountinfo->size();
    std::string_view line(mountinfo->data() + at, end - at);
    at = end + 1;
    // "<id> <parent> <major:minor> <root> <mount point> <options> [optional...] - <fstype> ..."
    std::vector<std::string_view> f;
    for (std::size_t p = 0; p < line.size() && f.size() < 5;) {
      std::size_t q = line.find(' ', p);
      if (q == std::string_view::npos) q = line.size();
      f.push_back(line.substr(p, q - p));
      p = q + 1;
    }
    if (f.size() < 5) continue;
    std::string point = unescape_mountinfo(f[4]);
    std::size_t dash = line.find(" - ");
    std::string_view fstype =
        dash == std::string_view::npos ? "" : line.substr(dash + 3, line.find(' ', dash + 3) - dash - 3);
    if (point == "/proc" && fstype == "proc") proc_seen = true;
    // binfmt_misc sits on a permanently empty directory, which the kernel allows.
    else if (point.rfind("/proc/", 0) == 0 && point.rfind("/proc/sys/fs/binfmt_misc", 0) != 0 &&
             std::find(covered.begin(), covered.end(), point) == covered.end())
      covered.push_back(point);
  }
  const std::string unmasked =
      "Kubernetes: securityContext.procMount: Unmasked; podman: --security-opt unmask=ALL --security-opt "
      "seccomp=deploy/seccomp-sbx.json; docker: --security-opt systempaths=unconfined --security-opt "
      "seccomp=deploy/seccomp-sbx.json";
  if (!proc_seen)
    return "no /proc is mounted where sbx runs, and the kernel lets a user namespace mount a new procfs only "
           "while a complete one is visible: mount /proc first (bwrap: --proc /proc; a container: " +
           unmasked + "); see deploy/README.md";
  if (covered.empty()) return "";
  std::string paths;
  for (std::size_t i = 0; i < covered.size() && i < 3; ++i) paths += (i ? ", " : "") + covered[i];
  if (covered.size() > 3) paths += " and " + std::to_string(covered.size() - 3) + " more";
  return "this host's /proc has paths covered by other mounts (" + paths +
         ": a container runtime's masked /proc), and the kernel refuses a new procfs in a user namespace "
         "while any is covered: run the container with an unmasked /proc (" +
         unmasked + "); see deploy/README.md";
}

}  // namespace sbx
