#include "runtime/linux/mounts.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <limits.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/kernel.hpp"
#include "runtime/base/openat2.hpp"
#include "runtime/linux/mount_target.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx {
namespace {

constexpr const char* kBase = "/tmp";  // exists on every host; the tmpfs over it is ours alone

const char* const kSystemDirs[] = {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"};
// What programs need from /etc, without network (no resolv.conf): the loader cache, certificates,
// Debian's alternatives (awk, editor, ... are symlinks through it), time zone, and a few tables.
// (Python runs without /etc/python3*: those hold distutils defaults and an apport hook, and each
// directory would cost a read-only bind.) Fontconfig's configuration, without which every
// program that renders text (a browser, a PDF or plot renderer) falls back to one serif face, and
// /etc/chromium.d, which Debian's chromium wrapper (/usr/bin/chromium) sources: the browser
// profile runs `chromium` as installed. Each only where the host has it. Fontconfig's cache
// (/var/cache/fontconfig) is not bound: fontconfig builds its own under $HOME (/tmp).
const char* const kEtcEntries[] = {"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ssl",      "/etc/alternatives",
                                   "/etc/localtime",   "/etc/protocols",  "/etc/services", "/etc/mime.types",
                                   "/etc/fonts",       "/etc/chromium.d"};
constexpr off_t kEtcCopyMax = 256 * 1024;
// /proc entries covered in every sandbox (whatever the profile: the runs of other callers and
// tenants are what they tell of). Docker's and Podman's default masked paths (kernel memory,
// keyrings, timers, scheduler and latency state, ACPI, sound and SCSI trees), and two counters of
// the whole host that show what the host and concurrent sandboxes do as it happens: diskstats
// (each disk's reads and writes) and interrupts (per CPU and device). /proc/stat is not covered:
// glibc's get_nprocs (sysconf(_SC_NPROCESSORS_ONLN), Python's os.cpu_count, make -j$(nproc)'s
// callers) reads it where /sys is absent, as in every sandbox, and ps and top take the boot time
// from it (man sbx, "What is not promised").
const char* const kProcMasks[] = {"/proc/acpi",        "/proc/asound",      "/proc/scsi",          "/proc/kcore",
                                  "/proc/keys",        "/proc/key-users",   "/proc/latency_stats", "/proc/timer_list",
                                  "/proc/timer_stats", "/proc/sched_debug", "/proc/diskstats",     "/proc/interrupts"};

// The path that names an open fd for mount(2) while the host's /proc is still at /oldroot. The
// kernel follows the magic link to the file itself: no component of the mount target's own path
// is looked up again (mount_target.hpp).
std::string fd_path(int fd) { return "/oldroot/proc/self/fd/" + std::to_string(fd); }

int pivot_root(const char* new_root, const char* put_old) {
  return static_cast<int>(::syscall(SYS_pivot_root, new_root, put_old));
}

Status do_mount(const char* src, const std::string& dst, const char* type, unsigned long flags, const char* data,
                const std::string& what) {
  if (::mount(src, dst.c_str(), type, flags, data) != 0) return sys_error("mounts", what);
  return {};
}

// A bind remount inside a user namespace must keep the flags the kernel locked on the source
// mount (nosuid, nodev, noexec, atime flags), or it fails with EPERM. statvfs reports them.
unsigned long locked_flags(const std::string& path) {
  struct statvfs sv;
  if (::statvfs(path.c_str(), &sv) != 0) return 0;
  unsigned long f = 0;
  if (sv.f_flag & ST_NOSUID) f |= MS_NOSUID;
  if (sv.f_flag & ST_NODEV) f |= MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME) f |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) f |= MS_RELATIME;
  return f;
}

// `shown` names the mount in messages when `path` is an fd's (fd_path).
Status remount_ro(const std::string& path, unsigned long extra, const std::string& shown = "") {
  unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY | extra | locked_flags(path);
  return do_mount(nullptr, path, nullptr, flags, nullptr, "remount " + (shown.empty() ? path : shown) + " read-only");
}

// Mount points strictly below `path`, from mountinfo (field 5, octal escapes undone), deepest last.
std::vector<std::string> submounts(const std::string& path) {
  std::vector<std::string> out;
  FILE* f = std::fopen("/oldroot/proc/self/mountinfo", "re");
  if (!f) return out;
  char* line = nullptr;
  std::size_t cap = 0;
  while (::getline(&line, &cap, f) > 0) {
    std::string l(line), field;
    std::size_t pos = 0;
    for (int i = 0; i < 5 && pos != std::string::npos; ++i) {
      std::size_t end = l.find(' ', pos);
      field = l.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      pos = end == std::string::npos ? end : end + 1;
    }
    std::string mp;
    for (std::size_t i = 0; i < field.size(); ++i) {
      if (field[i] == '\\' && i + 3 < field.size()) {
        mp += static_cast<char>(std::strtol(field.substr(i + 1, 3).c_str(), nullptr, 8));
        i += 3;
      } else {
        mp += field[i];
      }
    }
    if (mp.size() > path.size() && mp.compare(0, path.size(), path) == 0 && mp[path.size()] == '/') out.push_back(mp);
  }
  std::free(line);
  std::fclose(f);
  return out;
}

// MS_REC binds every submount, but a bind remount (MS_REMOUNT | MS_BIND) changes the flags of the
// one mount it names: a tmpfs or a bind below a read-only bind would stay writable inside (and be
// the host's). mount_setattr(AT_RECURSIVE) sets the attributes on the whole subtree at once
// (Linux 5.12); on older kernels each submount is remounted, as bubblewrap does. Attributes are
// only added, never cleared, so the kernel's locked flags are no obstacle.
// `mnt` is an fd of the mount's root (mount_target.hpp); `shown` names it in messages.
Status restrict_subtree(int mnt, const std::string& shown, bool rdonly) {
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (rdonly ? MOUNT_ATTR_RDONLY : 0);
  if (::mount_setattr(mnt, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) == 0) return {};
  if (errno != ENOSYS)
    return sys_error("mounts", "make " + shown + " and its submounts " + (rdonly ? "read-only" : "nosuid,nodev"));
  // mountinfo names mount points by path (from init's root, as readlink of the fd does).
  char buf[PATH_MAX];
  ssize_t n = ::readlink(fd_path(mnt).c_str(), buf, sizeof buf - 1);
  if (n <= 0) return sys_error("mounts", "find the path of " + shown);
  for (auto& m : submounts(std::string(buf, static_cast<std::size_t>(n)))) {
    unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | (rdonly ? MS_RDONLY : 0) | locked_flags(m);
    SBX_TRY(do_mount(nullptr, m, nullptr, flags, nullptr, "remount submount " + m.substr(8)));
  }
  return {};
}

Status mkdir_p(const std::string& path, mode_t mode) {
  std::string cur;
  std::size_t i = 1;
  while (i <= path.size()) {
    auto j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    cur = path.substr(0, j);
    if (!cur.empty() && ::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) return sys_error("mounts", "mkdir " + cur);
    i = j + 1;
  }
  return {};
}

enum class BindKind { ro, rw, device };

// A caller's bind source (MountOp::pinned), opened again in this mount namespace: its real path
// as sbx found it, no symlink followed on the way (the path had none then; one there now was put
// there since), and refused unless it is the file sbx opened and checked before the run (device
// and inode: mounts.hpp, BindSource). The bind is then made from this fd, so nothing swapped in
// after this check is mounted either.
Result<UniqueFd> open_pinned_source(const std::string& src, const MountOp& op, struct stat& st) {
  UniqueFd fd(openat2_retrying(AT_FDCWD, src.c_str(), O_PATH | O_CLOEXEC | (op.src_dir ? O_DIRECTORY : 0),
                               RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS));
  const std::string head = "bind source " + op.src;
  if (!fd.ok() && errno == ELOOP)
    return make_error(
        "mounts",
        head + " was replaced after sbx checked it (a part of its path is a symlink now); nothing was mounted");
  if (!fd.ok() && errno == ENOTDIR)
    return make_error(
        "mounts",
        head + " was replaced after sbx checked it (a part of its path is not a directory now); nothing was mounted");
  if (!fd.ok()) return sys_error("mounts", head);
  if (::fstat(fd.get(), &st) != 0) return sys_error("mounts", head);
  if (st.st_dev != op.src_dev || st.st_ino != op.src_ino || S_ISDIR(st.st_mode) != op.src_dir)
    return make_error(
        "mounts", head + " was replaced after sbx checked it (another file is at that path now); nothing was mounted");
  return fd;
}

Status restrict_bind(const MountTarget& target, const std::string& dst, BindKind kind);

// Binds `op.src` (a host path) at `op.dst` (in-sandbox) inside the new root `root`. The mount
// point (a directory, or an empty file for file sources) is found and made by open_mount_target,
// the bind lands on its fd, and the flags are set through an fd of the new mount: no path is
// walked twice.
Status bind_mount(int root, const MountOp& op, BindKind kind) {
  const std::string& host_path = op.src;
  const std::string& dst = op.dst;
  std::string src = "/oldroot" + host_path;
  struct stat st;
  UniqueFd device;
  UniqueFd pinned;
  if (op.pinned) {
    auto opened = open_pinned_source(src, op, st);
    if (!opened) return opened.error();
    pinned = std::move(*opened);
    src = fd_path(pinned.get());
  } else if (kind == BindKind::device) {
    // A node bound without nodev must be the character device that was planned, not whatever a
    // path names by now: opened once (O_PATH, no symlink anywhere on the way), checked through
    // that fd, and bound from it, so no directory or other file swapped in can take its place.
    device = UniqueFd(openat2_retrying(AT_FDCWD, src.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC,
                                       RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS));
    if (device.get() < 0) return sys_error("mounts", "device node " + host_path);
    if (::fstat(device.get(), &st) != 0) return sys_error("mounts", "device node " + host_path);
    if (!S_ISCHR(st.st_mode))
      return make_error(
          "mounts", "device node " + host_path + " is not a character device (" + file_kind(st.st_mode) + ")", ENODEV);
    src = fd_path(device.get());
  } else if (::stat(src.c_str(), &st) != 0) {
    return sys_error("mounts", "bind source " + host_path);
  }
  auto target = open_mount_target(root, dst, S_ISDIR(st.st_mode));
  if (!target) return target.error();
  // A device node has no submounts: a plain bind (and with MS_REC, an fd path's mount would too).
  unsigned long bind = kind == BindKind::device ? MS_BIND : MS_BIND | MS_REC;
  SBX_TRY(
      do_mount(src.c_str(), fd_path(target->node.get()), nullptr, bind, nullptr, "bind " + host_path + " to " + dst));
  return restrict_bind(*target, dst, kind);
}

// An idmapped bind: the supervisor's detached mount of the source (make_idmapped_tree), moved
// onto its mount point; it already is the very file sbx opened and checked, so nothing is looked
// up by path. Then restricted as every bind.
Status move_idmapped(int root, const MountOp& op, BindKind kind) {
  UniqueFd tree(op.tree_fd);  // closed once moved: the mount is the namespace's then
  struct stat st;
  if (::fstat(tree.get(), &st) != 0) return sys_error("mounts", "idmapped bind of " + op.src);
  auto target = open_mount_target(root, op.dst, S_ISDIR(st.st_mode));
  if (!target) return target.error();
  if (::move_mount(tree.get(), "", target->node.get(), "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0)
    return sys_error("mounts", "move the idmapped bind of " + op.src + " to " + op.dst);
  return restrict_bind(*target, op.dst, kind);
}

// After a bind landed on `target`: nosuid and nodev (read-only unless rw) on it and its submounts.
Status restrict_bind(const MountTarget& target, const std::string& dst, BindKind kind) {
  auto mnt = open_mounted(target, dst);
  if (!mnt) return mnt.error();
  std::string at = fd_path(mnt->get());
  if (kind == BindKind::device) return {};  // nodev would make the node useless
  if (kind == BindKind::ro) {
    SBX_TRY(remount_ro(at, MS_NOSUID | MS_NODEV, dst));
  } else {
    unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | locked_flags(at);
    SBX_TRY(do_mount(nullptr, at, nullptr, flags, nullptr, "remount " + dst + " nosuid,nodev"));
  }
  return restrict_subtree(mnt->get(), dst, kind == BindKind::ro);
}

Status write_file(const std::string& path, const std::string& content, mode_t mode) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd.ok()) return sys_error("mounts", "create " + path);
  ssize_t n = ::write(fd.get(), content.data(), content.size());
  if (n != static_cast<ssize_t>(content.size())) return sys_error("mounts", "write " + path);
  return {};
}

// Copies a small host file (read through /oldroot) into the new root. sendfile copies page cache
// to page cache inside the kernel: a user-space buffer would be fresh memory of init's, and each
// of its pages costs a page fault (~14 us on a nested VM; ld.so.cache alone is 13 pages).
Status copy_in(const std::string& host_path) {
  std::string src = "/oldroot" + host_path;
  UniqueFd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (in.get() < 0) return sys_error("mounts", "open " + host_path);
  struct stat st;
  if (::fstat(in.get(), &st) != 0) return sys_error("mounts", "stat " + host_path);
  std::string dst = "/newroot" + host_path;
  UniqueFd out(::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (out.get() < 0) return sys_error("mounts", "create " + dst);
  // The plan only lists files up to kEtcCopyMax; one that grew since is copied up to that size.
  off_t left = std::min<off_t>(st.st_size, kEtcCopyMax);
  while (left > 0) {
    ssize_t n = ::sendfile(out.get(), in.get(), nullptr, static_cast<std::size_t>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("mounts", "copy " + host_path);
    if (n == 0) break;  // shrank meanwhile
    left -= n;
  }
  return {};
}

Status symlink_at(const std::string& target, const std::string& path) {
  if (::symlink(target.c_str(), path.c_str()) != 0 && errno != EEXIST) return sys_error("mounts", "symlink " + path);
  return {};
}

std::string tmpfs_data(std::int64_t size, mode_t mode) {
  char m[16];
  std::snprintf(m, sizeof m, "%04o", static_cast<unsigned>(mode));
  return std::string("mode=") + m + ",size=" + std::to_string(size) +
         ",nr_inodes=" + std::to_string(tmpfs_inodes(size));
}

Status tmpfs_at(const std::string& dst, std::int64_t size, mode_t mode, unsigned long flags) {
  SBX_TRY(mkdir_p(dst, 0755));
  std::string data = tmpfs_data(size, mode);
  std::string shown = dst.starts_with("/newroot/") ? dst.substr(8) : dst;
  return do_mount("tmpfs", dst, "tmpfs", flags, data.c_str(), "tmpfs on " + shown);
}

// A tmpfs at `dst` (in-sandbox) inside the new root, its mount point made by open_mount_target.
// Returns an O_PATH fd of the new mount's root.
Result<UniqueFd> tmpfs_in_root(int root, const std::string& dst, std::int64_t size, mode_t mode, unsigned long flags) {
  auto target = open_mount_target(root, dst, true);
  if (!target) return target.error();
  std::string data = tmpfs_data(size, mode);
  SBX_TRY(do_mount("tmpfs", fd_path(target->node.get()), "tmpfs", flags, data.c_str(), "tmpfs on " + dst));
  return open_mounted(*target, dst);
}

// Secrets live only in this tmpfs, in this mount namespace: nothing reaches the host's disk, and
// the tmpfs is gone with the namespace when the run ends. noexec, and read-only once written.
Status write_secrets(int root, const MountOp& op, const MountPlan& plan) {
  auto dir = tmpfs_in_root(root, op.dst, op.size_bytes, op.mode, op.flags & ~static_cast<unsigned long>(MS_RDONLY));
  if (!dir) return dir.error();
  for (auto& [name, value] : plan.secret_files) {
    UniqueFd fd(::openat(dir->get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0400));
    // The messages name the secret, never its value.
    if (!fd.ok()) return sys_error("secrets", "create /run/secrets/" + name);
    ssize_t n = ::write(fd.get(), value.data(), value.size());
    if (n != static_cast<ssize_t>(value.size()))
      return make_error("secrets", "write /run/secrets/" + name, n < 0 ? errno : EIO);
    if (::fchown(fd.get(), plan.owner_uid, plan.owner_gid) != 0)
      return sys_error("secrets", "chown /run/secrets/" + name);
  }
  if (::fchownat(dir->get(), "", plan.owner_uid, plan.owner_gid, AT_EMPTY_PATH) != 0)
    return sys_error("secrets", "chown /run/secrets");
  return remount_ro(fd_path(dir->get()), op.flags, op.dst);
}

// Creates `dst` (an absolute in-sandbox path) as a directory or an empty file in the overlay's
// upper directory, with its missing parents. Parents that the image has as directories are
// created too: the overlay merges them with the image's. A component that the image has as a
// symlink or a file is refused: the mount would not land where the path says.
Status precreate_in_upper(int image_fd, const std::string& upper, const std::string& dst, bool dir) {
  std::size_t i = 1;
  while (i <= dst.size()) {
    std::size_t j = dst.find('/', i);
    if (j == std::string::npos) j = dst.size();
    std::string rel = dst.substr(1, j - 1);
    bool last = j == dst.size();
    bool want_dir = !last || dir;
    struct stat st;
    if (::fstatat(image_fd, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISLNK(st.st_mode))
        return make_error("mounts", "cannot mount at " + dst + ": /" + rel + " is a symlink in the image", ELOOP);
      if (want_dir != S_ISDIR(st.st_mode))
        return make_error("mounts",
                          "cannot mount at " + dst + ": /" + rel + " is " +
                              (S_ISDIR(st.st_mode) ? "a directory" : "not a directory") + " in the image",
                          want_dir ? ENOTDIR : EISDIR);
    }
    std::string path = upper + "/" + rel;
    if (want_dir) {
      if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return sys_error("mounts", "create mount point " + dst);
    } else {
      UniqueFd made(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
      if (!made.ok()) return sys_error("mounts", "create mount point " + dst);
    }
    i = j + 1;
  }
  return {};
}

// The supervisor's idmapped copy of the image (make_idmapped_image) attached at /layer/lower: overlay
// takes only a lower layer mounted in its own namespace. It is the sealed tree itself (same
// device and inode as init's fd of it), checked rather than assumed.
Status attach_idmapped_image(int tree_fd, int image_fd, std::string& lower) {
  UniqueFd tree(tree_fd);  // closed once attached: the mount is the namespace's then
  if (::mkdir("/layer/lower", 0755) != 0) return sys_error("mounts", "mkdir /layer/lower");
  if (::move_mount(tree.get(), "", AT_FDCWD, "/layer/lower", MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return sys_error("mounts", "attach the idmapped image");
  struct stat a, b;
  if (::stat("/layer/lower", &a) != 0 || ::fstat(image_fd, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
    return make_error("mounts", "the idmapped image is not the tree whose seal was checked", EXDEV);
  lower = "/layer/lower";
  return {};
}

// The image root: an overlay of the stored tree under a tmpfs upper layer (see mounts.hpp). The
// mount points the image may lack are the list's operations marked `precreate`.
Status mount_image_root(const MountPlan& plan, const MountOp& op, int image_fd) {
  UniqueFd lower(image_fd);  // the overlay holds its own reference once mounted
  SBX_TRY(tmpfs_at("/layer", op.size_bytes, 0755, MS_NOSUID | MS_NODEV));
  if (::mkdir("/layer/upper", 0755) != 0 || ::mkdir("/layer/work", 0700) != 0)
    return sys_error("mounts", "mkdir in the upper layer");
  for (auto& p : plan.ops) {
    if (!p.precreate) continue;
    bool dir = p.kind != MountOpKind::file;
    if (p.pinned) {
      dir = p.src_dir;  // the type of the file sbx opened (bind_mount refuses any other)
    } else if (p.kind == MountOpKind::bind_ro || p.kind == MountOpKind::bind_rw) {
      struct stat st;
      if (::stat(("/oldroot" + p.src).c_str(), &st) != 0) return sys_error("mounts", "bind source " + p.src);
      dir = S_ISDIR(st.st_mode);
    }
    SBX_TRY(precreate_in_upper(image_fd, "/layer/upper", p.dst, dir));
  }
  // The lower layer is named through the fd init opened (reopen_image_in_namespace): a lookup
  // through /proc/self/fd needs no search permission on the store's parents (as host root,
  // init's uid is now an unprivileged mapped one) and cannot be redirected by a rename.
  // userxattr: overlay's own metadata goes to user.* xattrs, the only ones a user namespace may set.
  std::string lowerdir = "/oldroot/proc/self/fd/" + std::to_string(image_fd);
  if (plan.image_tree_fd >= 0) SBX_TRY(attach_idmapped_image(plan.image_tree_fd, image_fd, lowerdir));
  std::string opts = "lowerdir=" + lowerdir + ",upperdir=/layer/upper,workdir=/layer/work,userxattr";
  return do_mount("sbx-root", "/newroot", "overlay", op.flags, opts.c_str(), "overlay root from the image");
}

// The one interpreter of the mount plan (mount_plan.hpp): runs each operation in the order the
// supervisor planned and recorded. Paths in the new root are "/newroot" + dst while the host's
// root is still at /oldroot; a caller's path is resolved through `root` (mount_target.hpp).
struct RootBuilder {
  const MountPlan& plan;
  int image_fd;
  UniqueFd root;              // /newroot, once its root mount exists
  UniqueFd out;               // /out, for the export after the run
  std::size_t generated = 0;  // files written to /gen so far
  bool covers = false;        // /cover/file and /cover/dir made (cover_proc_entry)

  static std::string in_new(const std::string& dst) { return dst == "/" ? "/newroot" : "/newroot" + dst; }

  Status open_root() {
    root = UniqueFd(::open("/newroot", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root.ok()) return sys_error("mounts", "open /newroot");
    return {};
  }

  // Generated files are written to the base tmpfs (this namespace only) and bound read-only.
  Status place_file(const MountOp& op) {
    if (generated == 0) SBX_TRY(mkdir_p("/gen", 0755));
    std::string src = "/gen/" + std::to_string(generated++);
    if (op.index >= plan.files.size())
      return make_error("mounts", "generated file " + op.dst + " is not in the plan", EINVAL);
    SBX_TRY(write_file(src, plan.files[op.index].content, op.mode));
    auto target = open_mount_target(root.get(), op.dst, false);
    if (!target) return target.error();
    SBX_TRY(
        do_mount(src.c_str(), fd_path(target->node.get()), nullptr, MS_BIND, nullptr, "bind generated file " + op.dst));
    auto mnt = open_mounted(*target, op.dst);
    if (!mnt) return mnt.error();
    return remount_ro(fd_path(mnt->get()), op.flags, op.dst);
  }

  // /out: a size-capped tmpfs owned by the program. The supervisor exports from it after the run
  // through the O_PATH fd kept here (artifact_export.hpp), so no host directory is ever writable from inside.
  Status make_out(const MountOp& op) {
    std::string at = in_new(op.dst);
    SBX_TRY(tmpfs_at(at, op.size_bytes, op.mode, op.flags));
    if (::chown(at.c_str(), plan.owner_uid, plan.owner_gid) != 0) return sys_error("mounts", "chown " + op.dst);
    out = UniqueFd(::open(at.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!out.ok()) return sys_error("mounts", "open " + op.dst);
    return {};
  }

  // A /proc entry covered by an empty file or directory (MountPlan::proc_masks). Both covers are
  // made once, on a tmpfs of the base (this namespace only) whose superblock is then read-only, and
  // a bind keeps its source's flags: each entry costs one mount call and no cover can be written.
  // The new proc is the sandbox's own and nothing runs in this namespace yet, so its fixed paths
  // are named as they are. An entry that this proc lacks has nothing to hide.
  Status cover_proc_entry(const MountOp& op) {
    std::string at = in_new(op.dst);
    struct stat st;
    if (::lstat(at.c_str(), &st) != 0) {
      if (errno == ENOENT) return {};
      return sys_error("mounts", "stat " + op.dst);
    }
    if (!covers) {
      SBX_TRY(tmpfs_at("/cover", 64 * 1024, 0755, MS_NOSUID | MS_NODEV | MS_NOEXEC));
      if (::mkdir("/cover/dir", 0555) != 0) return sys_error("mounts", "mkdir /cover/dir");
      SBX_TRY(write_file("/cover/file", "", 0444));
      SBX_TRY(do_mount(nullptr, "/cover", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr,
                       "remount /cover read-only"));
      covers = true;
    }
    const char* cover = S_ISDIR(st.st_mode) ? "/cover/dir" : "/cover/file";
    return do_mount(cover, at, nullptr, MS_BIND, nullptr, "cover " + op.dst);
  }

  Status run(const MountOp& op) {
    switch (op.kind) {
      case MountOpKind::root_bind:
        // pivot_root needs the new root to be a mount point: bind /newroot onto itself.
        SBX_TRY(do_mount("/newroot", "/newroot", nullptr, MS_BIND | MS_REC, nullptr, "bind /newroot"));
        return open_root();
      case MountOpKind::root_overlay:
        if (image_fd < 0) return make_error("mounts", "the plan mounts an image but init holds none", EINVAL);
        SBX_TRY(mount_image_root(plan, op, image_fd));
        return open_root();
      case MountOpKind::mount_point: return {};  // made in the upper layer by root_overlay
      default: break;
    }
    if (!root.ok()) return make_error("mounts", "the mount plan does not start with its root", EINVAL);
    switch (op.kind) {
      case MountOpKind::bind_ro:
        return op.tree_fd >= 0 ? move_idmapped(root.get(), op, BindKind::ro) : bind_mount(root.get(), op, BindKind::ro);
      case MountOpKind::bind_rw:
        return op.tree_fd >= 0 ? move_idmapped(root.get(), op, BindKind::rw) : bind_mount(root.get(), op, BindKind::rw);
      case MountOpKind::bind_device: return bind_mount(root.get(), op, BindKind::device);
      case MountOpKind::symlink: return symlink_at(op.src, in_new(op.dst));
      case MountOpKind::mkdir: return mkdir_p(in_new(op.dst), op.mode);
      case MountOpKind::copy: return copy_in(op.src);
      case MountOpKind::write: return write_file(in_new(op.dst), op.content, op.mode);
      case MountOpKind::proc:
        SBX_TRY(mkdir_p(in_new(op.dst), op.mode));
        return do_mount("proc", in_new(op.dst), "proc", op.flags, nullptr, "proc on " + op.dst);
      case MountOpKind::mask: return cover_proc_entry(op);
      case MountOpKind::tmpfs:
        if (op.at_target) {
          auto mnt = tmpfs_in_root(root.get(), op.dst, op.size_bytes, op.mode, op.flags);
          if (!mnt) return mnt.error();
          return {};
        }
        return tmpfs_at(in_new(op.dst), op.size_bytes, op.mode, op.flags);
      case MountOpKind::devpts:
        // A private instance, so the sandbox's ptys are its own.
        SBX_TRY(mkdir_p(in_new(op.dst), 0755));
        return do_mount("devpts", in_new(op.dst), "devpts", op.flags, kDevptsOptions, "devpts on " + op.dst);
      case MountOpKind::out: return make_out(op);
      case MountOpKind::file: return place_file(op);
      case MountOpKind::secrets: return write_secrets(root.get(), op, plan);
      case MountOpKind::remount_ro: return remount_ro(in_new(op.dst), op.flags);
      case MountOpKind::proc_sys_ro: return {};  // init, after the pivot (make_proc_sys_readonly)
      default: return {};
    }
  }
};

}  // namespace

Result<std::vector<BindSource>> open_bind_sources(const RunSpec& spec, const std::string& caller_cwd) {
  std::vector<BindSource> out;
  auto open_one = [&](const BindMount& b, const char* flag) -> Status {
    BindSource s;
    s.flag = flag;
    s.given = b;
    std::string path = !b.src.empty() && b.src[0] == '/' ? b.src : caller_cwd + "/" + b.src;
    auto failed = [&] { return sys_error("mounts", std::string(flag) + " " + b.src + ": source " + path); };
    // O_DIRECTORY first: only an open that asks for a directory triggers an automount (a bare
    // O_PATH open would pin the autofs trigger itself); anything else is opened as it is.
    s.fd = UniqueFd(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!s.fd.ok() && errno == ENOTDIR) s.fd = UniqueFd(::open(path.c_str(), O_PATH | O_CLOEXEC));
    if (!s.fd.ok()) return failed();
    struct stat st;
    if (::fstat(s.fd.get(), &st) != 0) return failed();
    s.dev = st.st_dev;
    s.ino = st.st_ino;
    s.dir = S_ISDIR(st.st_mode);
    // The kernel's name for the opened file: every symlink on the way resolved, as it was found.
    char buf[PATH_MAX];
    std::string link = "/proc/self/fd/" + std::to_string(s.fd.get());
    ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
    if (n <= 0 || n >= static_cast<ssize_t>(sizeof buf) || buf[0] != '/')
      return make_error("mounts",
                        std::string(flag) + " " + b.src + ": cannot tell where " + path + " is (readlink " + link +
                            "; is /proc mounted?)",
                        n < 0 ? errno : ENAMETOOLONG);
    s.real.assign(buf, static_cast<std::size_t>(n));
    out.push_back(std::move(s));
    return {};
  };
  for (auto& b : spec.binds) SBX_TRY(open_one(b, "--bind"));
  for (auto& in : spec.inputs) SBX_TRY(open_one(in, "--input"));
  return out;
}

namespace {
std::string fs_name(unsigned long type) {
  switch (type) {
    case EXT4_SUPER_MAGIC: return "ext2/3/4";
    case XFS_SUPER_MAGIC: return "xfs";
    case BTRFS_SUPER_MAGIC: return "btrfs";
    case TMPFS_MAGIC: return "tmpfs";
    case OVERLAYFS_SUPER_MAGIC: return "overlayfs";
    case NFS_SUPER_MAGIC: return "nfs";
    case FUSE_SUPER_MAGIC: return "fuse";
    case PROC_SUPER_MAGIC: return "proc";
    case SYSFS_MAGIC: return "sysfs";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "type 0x%lx", type);
      return buf;
    }
  }
}
}  // namespace

Result<UniqueFd> make_idmapped_tree(const BindSource& src, std::uint32_t program_uid, std::uint32_t program_gid,
                                    std::uint32_t& owner_uid, std::uint32_t& owner_gid) {
  const std::string head =
      "--bind " + src.given.src + ":" + src.given.dst + ":" + (src.given.rw ? "rw" : "ro") + ",idmap: ";
  struct stat st;
  if (::fstat(src.fd.get(), &st) != 0) return sys_error("mounts", head + "stat " + src.real);
  owner_uid = st.st_uid;
  owner_gid = st.st_gid;
  // Checked before (preflight.cpp check_binds_writable, with the why); kept here, where it is used.
  if (owner_uid == 0 || owner_gid == 0)
    return make_error("mounts", head + src.real + " is owned by root: idmap only a directory of an ordinary user",
                      EPERM);
  auto userns = make_idmap_userns({{owner_uid, program_uid, 1}}, {{owner_gid, program_gid, 1}});
  if (!userns) return make_error("mounts", head + userns.error().message, userns.error().err);
  UniqueFd tree(::open_tree(src.fd.get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE));
  struct statfs fs = {};
  (void)::fstatfs(src.fd.get(), &fs);
  const std::string fsname = fs_name(static_cast<unsigned long>(fs.f_type));
  const std::string fallback = "; drop idmap and let host uid " + std::to_string(program_uid) +
                               " write it (chown/chmod), or bind a directory on ext4, xfs, btrfs or tmpfs";
  // In a container's user namespace the host's namespace owns the mounts and the file system: the
  // kernel refuses both steps there, whatever the file system.
  const std::string nested =
      "sbx runs in a user namespace of its own (a container's), and the kernel lets only the "
      "host's namespace idmap a host file system; drop idmap and chown it to this namespace's uid " +
      std::to_string(program_uid) + " (the program's)";
  if (!tree.ok()) {
    if (errno == EPERM && !in_initial_user_namespace())
      return make_error("mounts", head + "open_tree " + src.real + ": " + nested, EPERM);
    if (errno == ENOSYS)
      return make_error("mounts", head + "this kernel has no open_tree (idmapped mounts need Linux 5.12+)" + fallback,
                        ENOSYS);
    return sys_error("mounts", head + "open_tree " + src.real);
  }
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (src.given.rw ? 0 : MOUNT_ATTR_RDONLY);
  attr.userns_fd = static_cast<__u64>(userns->get());
  if (::mount_setattr(tree.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0) {
    int err = errno;
    std::string why = err == EINVAL
                          ? "its file system (" + fsname + "), or one mounted below it, has no idmapped mounts"
                      : err == ENOSYS ? "this kernel has no idmapped mounts (Linux 5.12+)"
                      : err == EPERM && !in_initial_user_namespace() ? nested
                      : err == EPERM                                 ? "the kernel refused to idmap it (" + fsname + ")"
                                     : "mount_setattr(MOUNT_ATTR_IDMAP) on " + fsname + " failed";
    const bool in_container = err == EPERM && !in_initial_user_namespace();
    return make_error("mounts", head + src.real + ": " + why + (in_container ? "" : fallback), err);
  }
  return tree;
}

IdmappedImage make_idmapped_image(int image_fd, const std::vector<IdMapping>& uid_map,
                                  const std::vector<IdMapping>& gid_map) {
  IdmappedImage out;
  if (!kernel_at_least("5.19")) {
    out.owners = "host ids: this kernel cannot stack an overlay on an idmapped layer (Linux 5.19+)";
    return out;
  }
  auto userns = make_idmap_userns(uid_map, gid_map);
  if (!userns) {
    out.owners = "host ids: " + userns.error().message;
    return out;
  }
  UniqueFd tree(::open_tree(image_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
  struct statfs fs = {};
  (void)::fstatfs(image_fd, &fs);
  const std::string fsname = fs_name(static_cast<unsigned long>(fs.f_type));
  if (!tree.ok()) {
    out.owners = "host ids: open_tree of the image failed (" + std::string(std::strerror(errno)) + ")";
    return out;
  }
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  attr.userns_fd = static_cast<__u64>(userns->get());
  if (::mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
    out.owners = "host ids: the image store's file system (" + fsname + ") has no idmapped mounts (" +
                 std::strerror(errno) + ")";
    return out;
  }
  out.tree = std::move(tree);
  out.owners = "idmapped";
  return out;
}

Result<MountPlan> plan_mounts(const RunSpec& spec, const std::vector<BindSource>& sources) {
  if (sources.size() != spec.binds.size() + spec.inputs.size())
    return make_error("mounts", "the bind sources were not opened before the mount plan", EINVAL);
  MountPlan p;
  bool host_root = spec.image == "host";  // an image brings its own /usr, /lib and /etc
  for (const char* d : kSystemDirs) {
    if (!host_root) break;
    struct stat st;
    if (::lstat(d, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char buf[PATH_MAX];
      ssize_t n = ::readlink(d, buf, sizeof buf - 1);
      if (n > 0) p.system_links.push_back({d, std::string(buf, static_cast<std::size_t>(n))});
    } else if (S_ISDIR(st.st_mode)) {
      p.system_dirs.push_back(d);
    }
  }
  for (const char* e : kEtcEntries) {
    if (!host_root) break;
    struct stat st;
    if (::lstat(e, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char buf[PATH_MAX];
      ssize_t n = ::readlink(e, buf, sizeof buf - 1);
      if (n > 0) p.etc_links.push_back({e, std::string(buf, static_cast<std::size_t>(n))});
    } else if (S_ISREG(st.st_mode) && st.st_size <= kEtcCopyMax) {
      p.etc_files.push_back(e);
    } else {
      p.etc_entries.push_back(e);
    }
  }
  std::string uid = std::to_string(spec.uid), gid = std::to_string(spec.gid);
  std::string passwd = "root:x:0:0:root:/tmp:/bin/sh\n";
  std::string group = "root:x:0:\n";
  if (spec.uid != 0) passwd += "sbx:x:" + uid + ":" + gid + ":sandbox user:/tmp:/bin/sh\n";
  if (spec.gid != 0) group += "sbx:x:" + gid + ":\n";
  passwd += "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
  group += "nogroup:x:65534:\n";
  // localhost and the sandbox's own hostname resolve without DNS (which the sandbox may not have).
  const std::string hosts = "127.0.0.1\tlocalhost " + spec.hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n";
  if (host_root)
    p.generated = {{"/etc/passwd", passwd},
                   {"/etc/group", group},
                   {"/etc/hostname", spec.hostname + "\n"},
                   {"/etc/hosts", hosts},
                   {"/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n"}};
  // An image brings its own /etc, whose hosts file a container engine replaces at run time (an
  // image's is empty or absent): the same one, bound read-only over it, unless the caller binds
  // their own there.
  bool caller_hosts = false;
  for (auto& b : spec.binds) caller_hosts = caller_hosts || b.dst == "/etc/hosts" || b.dst == "/etc";
  if (!host_root && !caller_hosts) p.files.push_back({"/etc/hosts", hosts, 0444});
  // The sources as they were opened and checked (the caller's symlinks followed then, once):
  // init binds each real path only if it still leads, without a symlink, to that very file.
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const BindSource& src = sources[i];
    BindMount b = src.given;
    b.src = src.real;
    if (i >= spec.binds.size()) b.rw = false;  // an input
    p.binds.push_back({b, true, src.dev, src.ino, src.dir});
  }
  // Listed only where the kernel has them, so the record names what init covers.
  for (const char* m : kProcMasks) {
    struct stat st;
    if (::lstat(m, &st) == 0) p.proc_masks.push_back(m);
  }
  p.image_root = !host_root;
  p.tmpfs = spec.tmpfs;
  p.tmp_size_bytes = spec.limits.tmp_size_bytes;
  p.out_size_bytes = spec.limits.out_size_bytes;
  p.workdir = spec.workdir;
  return p;
}

Result<int> reopen_image_in_namespace(const MountPlan& plan) {
  if (plan.image_fd < 0) return -1;
  UniqueFd sealed(plan.image_fd);  // the supervisor's fd of the sealed tree: compared, then closed
  UniqueFd fd(::open(plan.image_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.ok()) return sys_error("image", "open " + plan.image_path + " in the sandbox's mount namespace");
  struct stat a, b;
  bool same =
      ::fstat(fd.get(), &a) == 0 && ::fstat(sealed.get(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
  if (!same) return make_error("image", plan.image_path + " was replaced after its seal was checked");
  return fd.release();
}

Result<int> build_root(const MountPlan& plan, int image_ns_fd) {
  if (plan.ops.empty()) return make_error("mounts", "the mount plan has no operations (mount_ops was not run)", EINVAL);
  // Our copy of the host's mounts must not propagate anything back (nor receive host changes).
  SBX_TRY(do_mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr, "make / private"));
  std::size_t base_size = 4 << 20;
  for (auto& op : plan.ops)
    if (op.kind == MountOpKind::file) base_size += static_cast<std::size_t>(op.size_bytes) + 4096;
  std::string base_opts = tmpfs_data(static_cast<std::int64_t>(base_size), 0755);
  SBX_TRY(do_mount("sbx-base", kBase, "tmpfs", MS_NOSUID | MS_NODEV, base_opts.c_str(), "tmpfs base"));
  if (::chdir(kBase) != 0) return sys_error("mounts", "chdir base");
  if (::mkdir("newroot", 0755) != 0 || ::mkdir("oldroot", 0755) != 0) return sys_error("mounts", "mkdir in base");
  // After this, "/" is the base tmpfs and the host's root is reachable only under /oldroot.
  if (pivot_root(kBase, "oldroot") != 0) return sys_error("mounts", "pivot_root into base");
  if (::chdir("/") != 0) return sys_error("mounts", "chdir /");
  RootBuilder b{plan, image_ns_fd, {}, {}, 0};
  // The list ends with the root remounted read-only (mount_plan.cpp); only /proc/sys follows,
  // which init makes read-only after the pivot.
  for (auto& op : plan.ops) SBX_TRY(b.run(op));
  if (!b.out.ok()) return make_error("mounts", "the mount plan has no /out", EINVAL);
  if (::umount2("/oldroot", MNT_DETACH) != 0) return sys_error("mounts", "detach old root");
  if (::chdir("/newroot") != 0) return sys_error("mounts", "chdir /newroot");
  // pivot_root(".", ".") stacks the old root (the base) on top of the new one; detaching "."
  // then removes the base and leaves /newroot as "/" (see pivot_root(2), NOTES).
  if (pivot_root(".", ".") != 0) return sys_error("mounts", "pivot_root into new root");
  if (::umount2(".", MNT_DETACH) != 0) return sys_error("mounts", "detach base");
  if (::chdir("/") != 0) return sys_error("mounts", "chdir /");
  return b.out.release();
}

nlohmann::json mounts_to_json(const MountPlan& plan) {
  return mount_ops_to_json(plan.ops.empty() ? mount_ops(plan) : plan.ops);
}

// The sandbox's /proc/sys, read-only (as Docker and Podman make it): the sysctls of the run's own
// namespaces are writable by their root, which the program may be (uid 0 in the sandbox). The
// SysV shm cap that init writes there (child.cpp, bound_sysv_ipc) would otherwise be undone by
// the program (ipc_permissions in ipc/ipc_sysctl.c checks the euid, not a capability), and so
// would the uts/net ones. Called by init after its own writes, once the root is pivoted.
Status make_proc_sys_readonly() {
  SBX_TRY(do_mount("/proc/sys", "/proc/sys", nullptr, MS_BIND | MS_REC, nullptr, "bind /proc/sys"));
  return remount_ro("/proc/sys", MS_NOSUID | MS_NODEV | MS_NOEXEC);
}

}  // namespace sbx
