#pragma once
// The sandbox's filesystem as an ordered list of operations (after bubblewrap's SetupOp list).
// The supervisor builds the whole list before clone (`mount_ops`); init only reads it and runs
// each operation in order (`build_root` in mounts.cpp, the one interpreter); the trace records
// the same list (`mount_ops_to_json`, the record's `image.mounts`). So what the record says was
// mounted and what init mounts cannot drift apart, and the overlay's pre-created mount points
// are the operations marked `precreate` rather than a second list kept by hand.
//
// The list covers what is built inside /newroot; the scaffolding around it is fixed and not
// listed (mounts.hpp: make "/" private, the base tmpfs, the two pivot_roots, detaching the old
// root). The list is built in the parent: from "go" to kStarted init may run ordinary code
// (docs/ARCHITECTURE.md section 3), but nothing in the plan is computed there, so what init does
// is exactly what the supervisor recorded.
//
// The plan itself (MountPlan: what plan_mounts, mounts.hpp, decides from the spec and the host)
// is declared here too, beside the list made from it, so that mounts.hpp (which plans and runs
// it) sits on top of this header and nothing here needs mounts.hpp.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/model/spec.hpp"

namespace sbx {

// A tmpfs's size= bounds its blocks, not its inodes: an empty file takes no block, and each
// inode costs the host ~1 KiB of kernel memory. A program that made 1.2 million empty files in
// a 64 MiB /out held that much kernel memory and then an export that listed every name (354 MB,
// 11.5 s of the supervisor). Every tmpfs a sandbox can write to (mount_ops here, base and upper
// layers in mounts.cpp, a template call's in warm_template.py via its job) holds one inode per
// kTmpfsBytesPerInode of its size: its kernel memory for inodes is about its size, and /out's
// export lists at most that many names. 65,536 files in the default 64 MiB /tmp and /out.
inline constexpr std::int64_t kTmpfsBytesPerInode = 1024;
inline constexpr std::int64_t kMinTmpfsInodes = 64;
inline std::int64_t tmpfs_inodes(std::int64_t size_bytes) {
  return size_bytes / kTmpfsBytesPerInode > kMinTmpfsInodes ? size_bytes / kTmpfsBytesPerInode : kMinTmpfsInodes;
}

// The sandbox's own devpts instance. Its ptys come from the host's one pool (kernel.pty.max,
// 4096 by default, kernel.pty.reserve of them for the initial instance only): without max=, one
// sandbox that opened 3,072 /dev/ptmx left none to any other sandbox or container. 64 serve a
// shell, tmux and script(1) many times over. One definition: build_root (mounts.cpp), the record
// (mount_ops_to_json) and a template call's driver (warm_template.py, given it in the job).
inline constexpr const char* kDevptsOptions = "newinstance,ptmxmode=0666,mode=0620,max=64";

enum class MountOpKind : std::uint8_t {
  root_bind,     // host-derived root: /newroot, a directory of the base tmpfs, bound onto itself
  root_overlay,  // --image: overlay of the stored tree under a tmpfs upper layer (size_bytes)
  mount_point,   // --image: a directory created in the upper layer only (the working directory)
  bind_ro,       // host path `src` bound at `dst`, read-only, nosuid, nodev (also submounts)
  bind_rw,       // the same, writable (nosuid, nodev)
  bind_device,   // a character device bound without nodev (no remount: nodev would disable it)
  symlink,       // `dst` -> `src`
  mkdir,         // directory `dst` with `mode` in the root's own tmpfs
  copy,          // small host file `src` copied to `dst` in the root's own tmpfs
  write,         // `content` written to `dst` (mode) in the root's own tmpfs
  proc,          // a proc instance of the sandbox's pid namespace
  mask,          // a /proc entry covered by an empty read-only file or directory (MountPlan::proc_masks)
  tmpfs,         // size_bytes, mode, flags; `at_target`: `dst` resolved by open_mount_target
  devpts,        // a private devpts instance (newinstance)
  out,           // /out: a tmpfs owned by the program's ids; init keeps an fd for the export
  file,          // plan.files[index] written on the base tmpfs and bound read-only at `dst`
  secrets,       // /run/secrets: a tmpfs of the plan's secret files (values never recorded)
  remount_ro,    // the mount at `dst` (a fixed path, not a caller's) made read-only
  proc_sys_ro,   // /proc/sys bound onto itself read-only: listed last, run by init after the
                 // pivot and its own sysctl writes (make_proc_sys_readonly), not by build_root
};

struct MountOp {
  MountOpKind kind = MountOpKind::mkdir;
  std::string src;              // host path (binds, copy) or link target (symlink)
  std::string dst;              // in-sandbox path
  std::string content;          // write (small generated /etc files)
  std::size_t index = 0;        // file: which of MountPlan::files (not copied: exec code may be large)
  std::int64_t size_bytes = 0;  // tmpfs sizes, the overlay's upper layer, a file's length
  mode_t mode = 0;
  unsigned long flags = 0;  // MS_* flags of the mount (or remount)
  bool at_target = false;   // tmpfs at a caller's path: through open_mount_target, not by name
  bool precreate = false;   // --image: `dst` is created in the upper layer before the overlay
  // bind_ro/bind_rw of a caller's source (mounts.hpp, BindSource): init binds `src` only if what
  // it opens there, following no symlink, is this device and inode; `src_dir` is its type.
  bool pinned = false;
  std::uint64_t src_dev = 0, src_ino = 0;
  bool src_dir = false;
  // An idmapped bind (BindMount::idmap, as root): `tree_fd` is the detached mount the supervisor
  // made of the opened source (make_idmapped_tree, mounts.hpp), which init moves to `dst` instead
  // of binding `src`; idmap_uid/gid are the source's owner, shown inside as the program's ids.
  int tree_fd = -1;
  bool idmap = false;
  std::uint32_t idmap_uid = 0, idmap_gid = 0;
};

// A file sbx generates for the sandbox (pack records, exec code and inputs): written by init on
// the base tmpfs of its own mount namespace and bound read-only at `dst` — never on the host.
struct GeneratedFile {
  std::string dst;
  std::string content;
  mode_t mode = 0444;
};

// A bind of the plan: a caller's source (pinned: init mounts only the file sbx opened and
// checked, see BindSource) or one of sbx's own (GPU driver files: bound by path).
struct PlannedBind {
  BindMount bind;  // src absolute
  bool pinned = false;
  std::uint64_t dev = 0, ino = 0;
  bool dir = false;
  int tree_fd = -1;  // bind.idmap as root: the idmapped detached mount (MountOp::tree_fd)
  std::uint32_t owner_uid = 0, owner_gid = 0;
};

struct MountPlan {
  // --image REF: the stored tree's host path, and the directory fd the supervisor checked against
  // the image's seal before clone (inherited by init). -1 / "" for the host-derived root.
  int image_fd = -1;
  std::string image_path;
  // The same tree idmapped with the run's maps (make_idmapped_image), a detached mount that init
  // attaches as the lower layer; -1 where the tree is read with its host ids.
  int image_tree_fd = -1;
  bool image_root = false;  // --image REF: the root is the overlay (set by plan_mounts)
  std::int64_t upper_size_bytes = 16LL << 20;
  // Host directories bound read-only at the same path (those that exist and are not symlinks).
  std::vector<std::string> system_dirs;
  // Host top-level symlinks recreated as-is (merged /usr: /bin -> usr/bin).
  std::vector<std::pair<std::string, std::string>> system_links;  // path, target
  // /etc directories bound read-only from the host; small /etc files are copied into the new
  // root instead (a copy is a few microseconds, a read-only bind is two mount calls and a
  // mount to tear down), and symlinks are recreated.
  std::vector<std::string> etc_entries;
  std::vector<std::string> etc_files;
  std::vector<std::pair<std::string, std::string>> etc_links;  // path, target
  // Generated files: /etc/passwd, /etc/group, /etc/hosts, /etc/hostname, /etc/nsswitch.conf.
  std::vector<std::pair<std::string, std::string>> generated;  // path, content
  std::vector<PlannedBind> binds;                              // the caller's binds and inputs (pinned), then sbx's own
  std::vector<GeneratedFile> files;
  std::vector<TmpfsMount> tmpfs;
  // GPU device nodes (gpu.hpp): host path, in-sandbox path under /dev. Bound into the sandbox's
  // /dev like /dev/null is, without nodev (build_dev), before /dev turns read-only.
  std::vector<std::pair<std::string, std::string>> device_nodes;
  // Secret files for /run/secrets (name, value): written by init onto a private tmpfs, mode 0400,
  // owned by owner_uid/gid (the program's ids inside). Their values never reach the trace.
  std::vector<std::pair<std::string, std::string>> secret_files;
  std::uint32_t owner_uid = 0, owner_gid = 0;  // the program's ids inside: own /out and secrets
  std::int64_t tmp_size_bytes = 64LL << 20;
  std::int64_t out_size_bytes = 64LL << 20;
  std::string workdir = "/tmp";
  // The operations init runs, in order (MountOp above): filled by the supervisor with
  // mount_ops(*this) once everything above is final. build_root reads nothing else of the plan
  // but owner_uid/gid and the contents of `files` and `secret_files`.
  std::vector<MountOp> ops;
  // The /proc entries covered in the sandbox's proc (kProcMasks in mounts.cpp, those the host's
  // kernel has): host-wide counters and kernel state that tell one sandbox what the host and the
  // others do (disk and interrupt activity, timers, the keyring list, kernel memory).
  std::vector<std::string> proc_masks;
};

// The whole list for `plan` as it stands (call it once the plan is final: files, secrets, pool
// directories and scaled tmpfs sizes included). Pure: no system call.
std::vector<MountOp> mount_ops(const MountPlan& plan);

// The list as the trace records it: one object per operation, in order, with `op`, `dst` and the
// operation's own members (flags as names, modes in octal). Generated files give their size;
// no content, no secret and no secret's size is recorded.
nlohmann::json mount_ops_to_json(const std::vector<MountOp>& ops);

// "nosuid,nodev,..." names of MS_* flags, in a fixed order (for the trace and messages).
std::vector<std::string> mount_flag_names(unsigned long flags);

}  // namespace sbx
