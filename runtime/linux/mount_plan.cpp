#include "runtime/linux/mount_plan.hpp"

#include <sys/mount.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "runtime/base/paths.hpp"
#include "runtime/base/trace_field.hpp"

namespace sbx {
namespace {

constexpr unsigned long kNoSuidDev = MS_NOSUID | MS_NODEV;

std::string octal(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode));
  return buf;
}

struct OpList {
  std::vector<MountOp> ops;
  void add(MountOpKind kind, std::string dst, unsigned long flags = 0) {
    MountOp op;
    op.kind = kind;
    op.dst = std::move(dst);
    op.flags = flags;
    ops.push_back(std::move(op));
  }
  void link(const std::string& path, const std::string& target) {
    add(MountOpKind::symlink, path);
    ops.back().src = target;
  }
  void bind(MountOpKind kind, const std::string& src, const std::string& dst, bool precreate = false) {
    unsigned long flags = kind == MountOpKind::bind_ro   ? MS_RDONLY | kNoSuidDev
                          : kind == MountOpKind::bind_rw ? kNoSuidDev
                                                         : 0;
    add(kind, dst, flags);
    ops.back().src = src;
    ops.back().precreate = precreate;
  }
  void tmpfs(MountOpKind kind, const std::string& dst, std::int64_t size, mode_t mode, unsigned long flags,
             bool at_target = false) {
    add(kind, dst, flags);
    ops.back().size_bytes = size;
    ops.back().mode = mode;
    ops.back().at_target = at_target;
  }
};

// The host-derived root: read-only binds of the system directories, a small /etc of copies,
// binds and generated files in the root's own tmpfs.
void host_root(const MountPlan& plan, OpList& l) {
  l.add(MountOpKind::root_bind, "/");
  for (auto& d : plan.system_dirs) l.bind(MountOpKind::bind_ro, d, d);
  for (auto& [path, target] : plan.system_links) l.link(path, target);
  l.add(MountOpKind::mkdir, "/etc");
  l.ops.back().mode = 0755;
  for (auto& e : plan.etc_entries) l.bind(MountOpKind::bind_ro, e, e);
  for (auto& f : plan.etc_files) {
    l.add(MountOpKind::copy, f);
    l.ops.back().src = f;
  }
  for (auto& [path, target] : plan.etc_links) l.link(path, target);
  for (auto& [path, content] : plan.generated) {
    l.add(MountOpKind::write, path);
    l.ops.back().content = content;
    l.ops.back().mode = 0644;
  }
}

// A minimal /dev (mounts.cpp, build_dev): harmless character devices bound from the host (nodes
// cannot be made in a user namespace), a private devpts, shm; then the tmpfs turns read-only.
void dev(const MountPlan& plan, OpList& l) {
  l.tmpfs(MountOpKind::tmpfs, "/dev", 256 * 1024, 0755, MS_NOSUID | MS_NOEXEC);
  l.ops.back().precreate = true;
  for (const char* d : {"null", "zero", "full", "random", "urandom", "tty"}) {
    std::string host = std::string("/dev/") + d;
    l.bind(MountOpKind::bind_device, host, host);
  }
  for (auto& [host, inside] : plan.device_nodes) l.bind(MountOpKind::bind_device, host, inside);
  l.add(MountOpKind::devpts, "/dev/pts", MS_NOSUID | MS_NOEXEC);
  l.link("/dev/ptmx", "pts/ptmx");
  l.tmpfs(MountOpKind::tmpfs, "/dev/shm", plan.tmp_size_bytes, 01777, kNoSuidDev | MS_NOEXEC);
  l.link("/dev/fd", "/proc/self/fd");
  l.link("/dev/stdin", "/proc/self/fd/0");
  l.link("/dev/stdout", "/proc/self/fd/1");
  l.link("/dev/stderr", "/proc/self/fd/2");
  l.add(MountOpKind::remount_ro, "/dev", MS_RDONLY | MS_NOSUID | MS_NOEXEC);
}

}  // namespace

std::vector<MountOp> mount_ops(const MountPlan& plan) {
  OpList l;
  const bool image = plan.image_root;
  if (image) {
    l.add(MountOpKind::root_overlay, "/", kNoSuidDev);
    l.ops.back().size_bytes = plan.upper_size_bytes;
  } else {
    host_root(plan, l);
  }
  l.add(MountOpKind::proc, "/proc", kNoSuidDev | MS_NOEXEC);
  l.ops.back().mode = 0555;
  l.ops.back().precreate = true;
  for (auto& m : plan.proc_masks) l.add(MountOpKind::mask, m, MS_RDONLY | kNoSuidDev | MS_NOEXEC);
  dev(plan, l);
  l.tmpfs(MountOpKind::tmpfs, "/tmp", plan.tmp_size_bytes, 01777, kNoSuidDev);
  l.ops.back().precreate = true;
  for (auto& t : plan.tmpfs) {
    l.tmpfs(MountOpKind::tmpfs, t.dst, t.size_bytes, 01777,
            kNoSuidDev | (t.noexec ? static_cast<unsigned long>(MS_NOEXEC) : 0UL), true);
    l.ops.back().precreate = true;
  }
  l.tmpfs(MountOpKind::out, "/out", plan.out_size_bytes, 0755, kNoSuidDev);
  l.ops.back().precreate = true;
  for (auto& b : plan.binds) {
    l.bind(b.bind.rw ? MountOpKind::bind_rw : MountOpKind::bind_ro, b.bind.src, b.bind.dst, true);
    l.ops.back().pinned = b.pinned;
    l.ops.back().src_dev = b.dev;
    l.ops.back().src_ino = b.ino;
    l.ops.back().src_dir = b.dir;
    l.ops.back().tree_fd = b.tree_fd;
    l.ops.back().idmap = b.tree_fd >= 0;
    l.ops.back().idmap_uid = b.owner_uid;
    l.ops.back().idmap_gid = b.owner_gid;
  }
  for (std::size_t i = 0; i < plan.files.size(); ++i) {
    const auto& f = plan.files[i];
    l.add(MountOpKind::file, f.dst, MS_RDONLY | kNoSuidDev);
    l.ops.back().index = i;
    l.ops.back().size_bytes = static_cast<std::int64_t>(f.content.size());
    l.ops.back().mode = f.mode;
    l.ops.back().precreate = true;
  }
  if (!plan.secret_files.empty()) {
    std::int64_t size = 64 * 1024;
    for (auto& [name, value] : plan.secret_files) size += static_cast<std::int64_t>(value.size()) + 4096;
    l.tmpfs(MountOpKind::secrets, "/run/secrets", size, 0500, MS_RDONLY | kNoSuidDev | MS_NOEXEC);
    l.ops.back().precreate = true;
  }
  // Everything not mounted over stays the root's own tmpfs (or the overlay): read-only now.
  l.add(MountOpKind::remount_ro, "/", MS_RDONLY | kNoSuidDev);
  l.add(MountOpKind::proc_sys_ro, "/proc/sys", MS_RDONLY | kNoSuidDev | MS_NOEXEC);
  if (image) {
    // The working directory must exist to chdir into; in an image it may not, and the upper
    // layer is the only place to make it (the root is read-only by then).
    // A mount at "/" (the root's own) covers only a workdir of "/" itself.
    bool mounted = false;
    for (auto& op : l.ops)
      mounted = mounted || (op.precreate && (op.dst == "/" ? plan.workdir == "/" : path_within(plan.workdir, op.dst)));
    if (!mounted) {
      MountOp op;
      op.kind = MountOpKind::mount_point;
      op.dst = plan.workdir;
      op.precreate = true;
      l.ops.insert(l.ops.begin() + 1, std::move(op));
    }
  }
  return std::move(l.ops);
}

std::vector<std::string> mount_flag_names(unsigned long flags) {
  std::vector<std::string> out;
  if (flags & MS_RDONLY) out.push_back("rdonly");
  if (flags & MS_NOSUID) out.push_back("nosuid");
  if (flags & MS_NODEV) out.push_back("nodev");
  if (flags & MS_NOEXEC) out.push_back("noexec");
  return out;
}

namespace {

// The members of image.mounts' items that say what a bind, root or copy is (mount_ops_to_json).
nlohmann::json bind_op_json(const MountOp& op) {
  switch (op.kind) {
    case MountOpKind::root_bind:
      return trace_object(
          {{"image/mounts/[]/op", "root"}, {"image/mounts/[]/dst", op.dst}, {"image/mounts/[]/type", "tmpfs"}});
    case MountOpKind::root_overlay:
      return trace_object({{"image/mounts/[]/op", "root"},
                           {"image/mounts/[]/dst", op.dst},
                           {"image/mounts/[]/type", "overlay"},
                           {"image/mounts/[]/upper_size_bytes", op.size_bytes}});
    case MountOpKind::bind_ro:
    case MountOpKind::bind_rw: {
      auto j = trace_object({{"image/mounts/[]/op", "bind"},
                             {"image/mounts/[]/src", op.src},
                             {"image/mounts/[]/dst", op.dst},
                             {"image/mounts/[]/rw", op.kind == MountOpKind::bind_rw}});
      if (op.idmap)
        put(j, "image/mounts/[]/idmap",
            trace_object({{"image/mounts/[]/idmap/uid", op.idmap_uid}, {"image/mounts/[]/idmap/gid", op.idmap_gid}}));
      return j;
    }
    case MountOpKind::bind_device:
      return trace_object({{"image/mounts/[]/op", "bind"},
                           {"image/mounts/[]/src", op.src},
                           {"image/mounts/[]/dst", op.dst},
                           {"image/mounts/[]/rw", true},
                           {"image/mounts/[]/device", true}});
    case MountOpKind::copy:
      return trace_object({{"image/mounts/[]/op", "copy"},
                           {"image/mounts/[]/src", op.src},
                           {"image/mounts/[]/dst", op.dst},
                           {"image/mounts/[]/rw", false}});
    case MountOpKind::proc_sys_ro:
      return trace_object({{"image/mounts/[]/op", "bind"},
                           {"image/mounts/[]/src", op.dst},
                           {"image/mounts/[]/dst", op.dst},
                           {"image/mounts/[]/rw", false},
                           {"image/mounts/[]/after_pivot", true}});
    default: return nullptr;
  }
}

// The same for what is made in the sandbox's own filesystems: tmpfs, proc, files, links.
nlohmann::json made_op_json(const MountOp& op) {
  auto op_dst = [&](const char* kind) {
    return trace_object({{"image/mounts/[]/op", kind}, {"image/mounts/[]/dst", op.dst}});
  };
  nlohmann::json j;
  switch (op.kind) {
    case MountOpKind::mount_point: return op_dst("mount_point");
    case MountOpKind::symlink:
      j = op_dst("symlink");
      put(j, "image/mounts/[]/target", op.src);
      return j;
    case MountOpKind::mkdir:
      j = op_dst("mkdir");
      put(j, "image/mounts/[]/mode", octal(op.mode));
      return j;
    case MountOpKind::write:
      j = op_dst("write");
      put(j, "image/mounts/[]/mode", octal(op.mode));
      put(j, "image/mounts/[]/bytes", op.content.size());
      return j;
    case MountOpKind::proc: return op_dst("proc");
    case MountOpKind::mask: return op_dst("mask");
    case MountOpKind::tmpfs: return op_dst("tmpfs");
    case MountOpKind::devpts:
      j = op_dst("devpts");
      put(j, "image/mounts/[]/options", kDevptsOptions);
      return j;
    case MountOpKind::out:
      j = op_dst("tmpfs");
      put(j, "image/mounts/[]/owner", "program");
      return j;
    case MountOpKind::file:
      j = op_dst("file");
      put(j, "image/mounts/[]/rw", false);
      put(j, "image/mounts/[]/mode", octal(op.mode));
      put(j, "image/mounts/[]/bytes", op.size_bytes);
      return j;
    case MountOpKind::secrets:
      // The size would tell the secrets' total length: not recorded (their names are, elsewhere).
      j = op_dst("secrets");
      put(j, "image/mounts/[]/mode", octal(op.mode));
      return j;
    case MountOpKind::remount_ro: return op_dst("remount_ro");
    default: return nullptr;
  }
}

}  // namespace

nlohmann::json mount_ops_to_json(const std::vector<MountOp>& ops) {
  nlohmann::json a = nlohmann::json::array();
  for (auto& op : ops) {
    nlohmann::json j = bind_op_json(op);
    if (j.is_null()) j = made_op_json(op);
    switch (op.kind) {  // the mount flags, and a tmpfs's size and mode
      case MountOpKind::root_bind:
      case MountOpKind::mount_point:
      case MountOpKind::bind_device:
      case MountOpKind::symlink:
      case MountOpKind::mkdir:
      case MountOpKind::copy:
      case MountOpKind::write: break;
      case MountOpKind::tmpfs:
      case MountOpKind::out:
        put(j, "image/mounts/[]/size_bytes", op.size_bytes);
        put(j, "image/mounts/[]/mode", octal(op.mode));
        [[fallthrough]];
      default: put(j, "image/mounts/[]/flags", mount_flag_names(op.flags));
    }
    a.push_back(std::move(j));
  }
  return a;
}

}  // namespace sbx
