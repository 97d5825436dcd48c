#pragma once
// The checks a run makes before it creates anything, shared by the real run (sandbox.cpp, the
// facilities of facility.cpp) and `--dry-run` (dry_run.hpp), which makes every one of them and
// prints what would be enforced, by which mechanism, instead of running (man sbx, DRY RUN).
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/linux/cgroup.hpp"
#include "runtime/linux/limits_plan.hpp"
#include "runtime/linux/mounts.hpp"
#include "runtime/linux/userns.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/model/spec.hpp"

namespace sbx {

// --trace-file PATH: its directory exists and is writable, checked before the program runs (a
// record that cannot be written is otherwise discovered after the run).
Status check_trace_file(const std::string& path);

// As root (`identity` not rootless), the sandbox's root can reach every --bind and --input source
// (opened by open_bind_sources, so each exists), else EACCES with the hint.
Status check_sources(const std::vector<BindSource>& sources, const RunSpec& spec, const std::string& cwd,
                     const IdentityPlan* identity);

// A --bind source as the write pre-check sees it: one fstat, one getxattr and one fstatfs of the
// opened source (nothing below it is walked).
struct BindOwnership {
  std::uint32_t uid = 0, gid = 0;
  mode_t mode = 0;
  bool dir = false;
  bool acl = false;           // a POSIX access ACL: named users or groups may have more than the mode says
  bool generic_perms = true;  // a local file system whose permission check is the mode's (ext4, xfs, tmpfs...)
};

enum class BindWrite {
  writable,        // the program can write it (or, rootless idmap, nothing is needed)
  unwritable,      // certain: the mode denies the program's host ids and nothing else grants
  uncertain,       // the mode denies, but an ACL or the file system (NFS, FUSE) may grant: warn only
  idmap_rootless,  // idmap asked for rootless on a source another user owns: it cannot be done
};

// Whether the sandbox's program can write a read-write bind's source, from its owner, group and
// mode and the host ids the program's uid and gid map to (`id`; `groups`: the supplementary
// groups the program keeps, the caller's rootless, none as root). `idmap`: as root, the source's
// owner and group show inside as the program's (its owner's bits apply). The program as the
// namespace's root overrides the mode of a file whose owner and group both map into the sandbox.
BindWrite bind_write_access(const BindOwnership& src, const IdentityPlan& id, const std::vector<std::uint32_t>& groups,
                            bool idmap);

// As root, whether a read-write bind of `src` is idmapped without being asked (idmap_owned_binds):
// its owner is the user who ran sbx through sudo (`invoking_uid`, SUDO_UID), never another account
// (idmap gives the program the owner's rights over the tree, setuid files included: postgres's or
// www-data's directory must not make the program them), its owner and group are not 0 (a
// setuid-root file could be left), the program could not write it otherwise (unwritable: certain
// by the mode; where an ACL or the file system may grant, nothing changes), and an idmapped mount
// can be made (`initial_userns`: sbx runs in the host's user namespace, whose file systems these
// are; in a container's, mount_setattr refuses).
bool wants_owner_idmap(const BindOwnership& src, const IdentityPlan& id, bool initial_userns,
                       std::optional<std::uint32_t> invoking_uid);

// The uid in SUDO_UID (decimal, not 0), the user sudo ran sbx for; nullopt when unset or odd.
std::optional<std::uint32_t> sudo_invoking_uid(const char* value);

// Turns on idmap (BindMount::idmap of the opened source, which idmap_binds and the mount plan
// follow) for each read-write --bind that wants_owner_idmap and was named without a symlink (its
// path from `cwd`, made lexically normal, is the opened file's: a symlink in a checkout, `out ->
// ~bob/.ssh`, must not turn into bob's rights), in an untenanted run (`tenanted`: a tenant writes
// as its own id slice, never as a host account). `sudo sbx run --workspace -- git status` in your
// repository then sees the files as the program's own (git's "dubious ownership" check passes)
// and what it writes is yours on the host, not the sandbox's unprivileged host uid's, as a
// rootless run. The record's image.mounts says idmap (its spec keeps the bind as given: a replay
// decides again). Before check_sources: an idmapped source is opened by sbx, so the sandbox's root
// need not reach it.
void idmap_owned_binds(std::vector<BindSource>& sources, const IdentityPlan& identity, const std::string& cwd,
                       bool tenanted);

// The pre-check of every read-write --bind (and rootless, of every idmap one): the run is refused
// (stage "usage", exit 125) when the program certainly cannot write the source, naming its owner
// and mode, the host uid the sandbox writes as, and the fix (idmap, chown/chmod); a warning when
// an ACL or the file system leaves it open. A rw bind nothing inside can write is a mistake found
// otherwise only when the program fails with EACCES halfway through its work. `workspace` (the
// --workspace directory, "" when none) only warns: it is also the program's cwd and its project to
// read, which an unwritable mode does not spoil.
Status check_binds_writable(const std::vector<BindSource>& sources, const IdentityPlan& identity,
                            const std::string& workspace = "");

// No read-write --bind may reach sbx's own state: the run's state dir (or tenant store), its data
// dir (images), the config dir holding the ledger's signing key, and the directories in `also`
// (RunRequest::tenant.guarded_dirs: under a tenant, the untenanted state dir and the other tenants'
// stores), the bind's source being one of them, inside one, or above one ($HOME, /). A program
// that can write there can change what later runs trust (the seccomp cache, the ledger a replay
// rebuilds from, the key). Decided on the opened source (open_bind_sources), the very file init
// mounts: by device and inode against each guarded directory and those above it (a symlink or
// another bind mount of it is no way around), and by its real path. Stage "usage": exit 125 with
// what to bind instead.
Status check_binds_spare_state(const std::vector<BindSource>& sources, const Dirs& dirs,
                               const std::vector<std::pair<std::string, std::string>>& also);

// --require-limits against a limit plan: the error the run fails with, naming each limit that
// cannot be enforced, the layer that set it (`layers`: limit -> "profile 'untrusted'", "flag
// --cpus", "pack.json", ...) and how to clear it; nullopt when the plan is enough.
std::optional<Error> require_limits_shortfall(const LimitPlan& plan, const CgroupInfo& cg,
                                              const std::map<std::string, std::string>& layers);

// The line a run killed at its wall-time limit ends with: the limit, the layer that set it
// (RunRequest::limit_layers' "timeout": "profile 'untrusted'", "flag --timeout", a manifest's
// path) and how to raise it, so that the profile's default of 30 s is not mistaken for a hang.
// `how`: the caller's surface (RunRequest::limit_raise); where it takes no --timeout (exec, MCP),
// the fix is the profile's ceiling_raise_hint (profile.hpp), the one wording of it.
std::string wall_time_message(std::int64_t timeout_ms, const std::string& layer,
                              CeilingRaise how = CeilingRaise::by_flag);

// A setup failure the caller can fix gets its hint (Error::hint): a program not found by a path
// relative to the sandbox's working directory (the caller's current directory is not mounted),
// a bind source that the sandbox's host uid cannot reach as root.
void add_setup_hint(Error& e, const RunSpec& spec, const IdentityPlan& identity, const std::string& cwd);

// Why the kernel refused the sandbox's new procfs (mount("proc") EPERM, "proc on /proc"), from
// the host's /proc/self/mountinfo (nullopt: unreadable, no /proc at all), and the fix. In a user
// namespace a new procfs is allowed only while a complete one is visible: a mount covering a path
// under the visible /proc (a container runtime's masked /proc: /proc/keys, /proc/timer_list...)
// or no /proc at all forbids it. "" when mountinfo shows neither (the reason is elsewhere).
std::string proc_mount_refused_hint(const std::optional<std::string>& mountinfo);

// Whether /proc is a procfs (statfs of /proc/self): where it is not, every /proc path sbx opens
// is missing and add_setup_hint says how to mount one.
bool procfs_at_proc();

}  // namespace sbx
