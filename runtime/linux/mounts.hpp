#pragma once
// The sandbox's filesystem, assembled by the child inside its own mount namespace. The root is a
// small tmpfs that exists only in that namespace, so nothing is created on the host and nothing
// is left to clean up when the namespace dies (no scratch directory, no unmount on the way out).
//
// Steps (after bubblewrap): make every mount private; mount a tmpfs over /tmp (the base);
// pivot_root into it with the old root at /oldroot; assemble /newroot from /oldroot/... by running
// the plan's operation list (mount_plan.hpp); detach /oldroot; pivot_root into /newroot and
// detach the base. Host paths are then unreachable.
//
// Two kinds of root:
//   --image host  /newroot is a bind of a directory of the base, filled with read-only binds of
//                 the host's /usr, /bin, /lib*, a few /etc entries, and generated /etc files.
//   --image REF   /newroot is an overlay: lower = the stored image tree (shared by every run,
//                 never written), upper = a small tmpfs of this namespace. Mount points the image
//                 lacks (/proc, /out, /in/..., bind targets) are created in the upper directory
//                 *before* the overlay is mounted, so nothing is ever copied up: as host root the
//                 image's files belong to an unmapped uid and could not be copied up anyway.
// Either way the root is then remounted read-only; /tmp and /out are size-capped tmpfs mounts,
// the only writable places besides explicit rw binds and --tmpfs.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/model/spec.hpp"
#include "runtime/linux/mount_plan.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx {

// A --bind or --input source, opened once before the run (open_bind_sources): what every check
// looks at (preflight.hpp: no rw bind reaches sbx's state, the sandbox's root can reach it) and
// what init mounts, so that a symlink or directory swapped in after the check cannot take its
// place. The kernel does not bind from an fd of another mount namespace (do_loopback refuses a
// mount that is not in the caller's namespace), and init runs in a copy of the host's: so init
// opens `real` again in its own namespace, no symlink followed anywhere (RESOLVE_NO_SYMLINKS),
// binds from that fd, and refuses the run unless it is the very file opened here (device and
// inode), as bubblewrap does for --bind-fd. `fd` stays open until the run is over: the inode
// cannot be freed and its number reused meanwhile.
struct BindSource {
  std::string flag;  // "--bind" or "--input", for messages
  BindMount given;   // as the caller wrote it (src possibly relative)
  std::string real;  // the opened file's path (readlink of /proc/self/fd/N): absolute, no symlink
  UniqueFd fd;       // O_PATH, the symlinks the caller named followed
  std::uint64_t dev = 0, ino = 0;
  bool dir = false;
};

// Opens every --bind then every --input source of `spec` (a relative one from `caller_cwd`).
// A source that cannot be opened: stage "mounts", "--bind SRC: source PATH: <why>".
Result<std::vector<BindSource>> open_bind_sources(const RunSpec& spec, const std::string& caller_cwd);

// Supervisor side, as host root, before clone: for an idmap bind (BindMount::idmap), a detached
// copy of the opened source and its submounts (open_tree OPEN_TREE_CLONE), idmapped
// (mount_setattr MOUNT_ATTR_IDMAP) through a user namespace of its own that maps exactly the
// source's owner uid and gid (`owner_*`, set from its stat) to the program's host ids: the
// program sees the owner's files as its own, and what it creates there is stored as the owner's.
// The sandbox's own namespace is not that mapping (it sends on-disk 0-65535 to its range, root
// to root), and only host root may idmap a host file system, so init cannot make it: init moves
// it into place (MountOp::tree_fd). nosuid, nodev, and read-only unless rw. A file system or
// kernel that refuses: stage "mounts", naming the file system and what to do instead.
Result<UniqueFd> make_idmapped_tree(const BindSource& src, std::uint32_t program_uid, std::uint32_t program_gid,
                                    std::uint32_t& owner_uid, std::uint32_t& owner_gid);

// Supervisor side, as host root in the host's user namespace, before clone: a detached, read-only
// copy of the image's stored tree (`image_fd`, the fd its seal is taken through), idmapped with
// `uid_map`/`gid_map` (INSIDE: the id stored on disk, OUTSIDE: the host id it shows as): the run's
// own maps shifted to where the import stores image ids (image_manifest.hpp kOwnerIdBase), so image id
// N is sandbox id N: the image's root owns its files, its users theirs, as under podman. init attaches
// it as the overlay's lower layer (mount_image_root). Where the kernel or the store's file system
// cannot (overlay stacks on an idmapped layer from Linux 5.19), the reason, for the record: the run
// then reads the tree with its host ids, as before.
struct IdmappedImage {
  UniqueFd tree;       // -1: not idmapped
  std::string owners;  // the record's image.root.owners
};
IdmappedImage make_idmapped_image(int image_fd, const std::vector<IdMapping>& uid_map,
                                  const std::vector<IdMapping>& gid_map);

// Parent side: inspects the host (which system dirs exist, merged /usr) and generates /etc files.
// `sources` are spec's binds and inputs as open_bind_sources opened them, in its order; the plan
// binds each one's real path, pinned to its device and inode.
Result<MountPlan> plan_mounts(const RunSpec& spec, const std::vector<BindSource>& sources);

// Child side: builds the root and pivots into it, running plan.ops in order (refused when the
// list was never filled). The caller must hold CAP_SYS_ADMIN in the
// mount namespace's user namespace. Returns an O_PATH fd of the sandbox's /out tmpfs, for the
// supervisor to export from after the run (the fd keeps the tmpfs alive once the namespace is gone).
Result<int> build_root(const MountPlan& plan, int image_ns_fd);

// Init, first thing after clone: opens plan.image_path again, in the sandbox's new mount namespace
// (overlayfs takes its lower layer only from a mount of the mounter's own namespace, and the
// supervisor's fd points into the host's), while init still has the caller's host uid and so can
// search the store's parents (as host root they may be 0700). Refuses a tree that is not the one
// the supervisor checked (device and inode compared). Returns -1 for the host-derived root.
Result<int> reopen_image_in_namespace(const MountPlan& plan);

// What the trace records as image.mounts: the whole operation list of the plan as it stands
// (mount_ops_to_json of plan.ops, or of mount_ops(plan) before the list is filled).
nlohmann::json mounts_to_json(const MountPlan& plan);

// After pivot_root, in init: /proc/sys bound onto itself read-only (see mounts.cpp).
Status make_proc_sys_readonly();

}  // namespace sbx
