#pragma once
// The sandbox's filesystem, assembled by the child inside its own mount namespace. The root is a
// small tmpfs that exists only in that namespace, so nothing is created on the host and nothing
// is left to clean up when the namespace dies (no scratch directory, no unmount on the way out).
//
// Steps (after bubblewrap): make every mount private; mount a tmpfs over /tmp (the base);
// pivot_root into it with the old root at /oldroot; assemble /newroot from /oldroot/...; detach
// /oldroot; pivot_root into /newroot and detach the base. Host paths are then unreachable.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/error.hpp"
#include "runtime/spec.hpp"

namespace sbx {

struct MountPlan {
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
  std::vector<BindMount> binds;  // src already made absolute (and canonical when it exists)
  std::vector<TmpfsMount> tmpfs;
  // Secret files for /run/secrets (name, value): written by init onto a private tmpfs, mode 0400,
  // owned by secrets_uid/gid (the program's ids inside). Never in mounts_to_json.
  std::vector<std::pair<std::string, std::string>> secret_files;
  std::uint32_t secrets_uid = 0, secrets_gid = 0;
  std::int64_t tmp_size_bytes = 64LL << 20;
  std::string workdir = "/tmp";
};

// Parent side: inspects the host (which system dirs exist, merged /usr) and generates /etc files.
Result<MountPlan> plan_mounts(const RunSpec& spec, const std::string& caller_cwd);

// Child side: builds the root and pivots into it. The caller must hold CAP_SYS_ADMIN in the
// mount namespace's user namespace.
Status build_root(const MountPlan& plan);

// What the trace records about the host-derived root: what was mounted from where.
nlohmann::json mounts_to_json(const MountPlan& plan);

}  // namespace sbx
