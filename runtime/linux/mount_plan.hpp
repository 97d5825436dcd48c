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
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace sbx {

struct MountPlan;

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
  std::string src;  // host path (binds, copy) or link target (symlink)
  std::string dst;  // in-sandbox path
  std::string content;  // write (small generated /etc files)
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
