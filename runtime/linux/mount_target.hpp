#pragma once
// Mount points inside the new root, found and created without ever leaving it.
//
// A mount target's parents come from places sbx does not control: an image's layers, the host
// directories bound earlier in the same run (a bind source another sandbox could write into), the
// host's own /etc. A plain path walk from init's root follows their symlinks: `/src/evil` ->
// `/oldroot/home/u` would put a mount point (a new directory or file) on the host and the mount
// with it. Here every component is resolved with openat2(RESOLVE_IN_ROOT), the way crun resolves
// container paths: absolute symlinks and ".." are taken relative to the new root, so whatever a
// symlink says, the walk stays inside. Missing components are created relative to the directory
// fd their parent resolved to, and the mount is then placed on the resolved fd (mounts.cpp mounts
// onto /proc/self/fd/N), so nothing is looked up by path a second time.
#include <string>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"

namespace sbx {

struct MountTarget {
  UniqueFd parent;   // O_PATH directory that holds the mount point (inside the root)
  std::string name;  // the mount point's name in `parent`: never a symlink
  UniqueFd node;     // O_PATH fd of the mount point itself: the mount goes onto it
};

// Resolves `dst` (absolute, without ".." components, not "/") inside `root_fd`, creating missing
// components: directories 0755, the last one a directory (`dir`) or an empty file 0644. Symlinks
// on the way are followed inside the root; the last component must not be a symlink (a mount
// would land where the link points, not at the path given). Errors name `dst`.
Result<MountTarget> open_mount_target(int root_fd, const std::string& dst, bool dir);

// After a mount was placed on t.node: an O_PATH fd of the new mount's root. The name is looked up
// again in the parent (the lookup steps onto the topmost mount there), refusing symlinks.
Result<UniqueFd> open_mounted(const MountTarget& t, const std::string& dst);

}  // namespace sbx
