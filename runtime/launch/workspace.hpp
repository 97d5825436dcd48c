#pragma once
// The caller's project directory (man sbx, THE PROJECT DIRECTORY). A sandbox sees none of the
// host's files but the system directories and what is bound: `sbx run -- python3 script.py` in a
// project finds no script.py (the working directory is the sandbox's private /tmp). Here: the
// binds `--workspace` and `--bind .` stand for, the checks that keep a workspace from exposing
// what it must not, and the hint a run prints when its program was handed a host path that the
// sandbox cannot see. The decisions are pure (unit-tested); the CLI prints.
#include <functional>
#include <optional>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/linux/mounts.hpp"
#include "runtime/model/spec.hpp"

namespace sbx {

// `path` made absolute against `cwd` and lexically cleaned ("." and ".." and repeated '/' gone,
// no symlink followed): what `--bind .` and a relative bind source mean as a destination.
std::string absolute_lexical(const std::string& cwd, const std::string& path);

// A bind whose source is relative and that names no destination (`--bind .`, `--bind src:rw`)
// gets the source's absolute path as its destination: the same directory at the same path.
void anchor_relative_binds(std::vector<BindMount>& binds, const std::string& cwd);

// The home directory of `uid` in `passwd` (/etc/passwd's text): its sixth field, "" if no line
// has that uid. sbx is one static binary: glibc's getpwuid there loads the host's NSS modules
// (libnss_systemd), built for another libc, and crashed sbx (`SUDO_UID=4242 sbx run --workspace`,
// 4242 not in /etc/passwd: a segfault in _nss_systemd_getpwuid_r). So the file is read here.
std::string passwd_home(std::string_view passwd, std::uint32_t uid);

// The caller's home directory: $HOME, else /etc/passwd's entry for sbx's user ("" if none).
std::string home_dir();
// The home directories a workspace must not be nor hold: home_dir(), and under sudo (root with
// SUDO_UID set) the invoking user's too, whose files are the ones a root run would expose: its
// /etc/passwd entry, else (a user of LDAP or systemd-homed, which only NSS knows) /home/$SUDO_USER.
std::vector<std::string> protected_homes();

// `--workspace`: `cwd` read-write at the same path, its `.git` (a directory or a file, as in a
// git worktree) read-only on top, and the working directory there unless `keep_workdir` (the
// caller gave --workdir). The two binds go first in spec.binds: binds are mounted in order, so
// the profile's and the caller's own binds below `cwd` (a read-only --bind of ./secrets) are
// mounted over the workspace, not hidden under it. Refused (stage "usage"): "/" , each of
// `homes` and every directory above one (a program that can write ~/.bashrc or ~/.ssh runs code
// as the caller later), and a `.git` that is a symlink (its target could not be kept read-only).
// sbx's own state is refused later, as for every read-write bind (check_binds_spare_state).
Status add_workspace(RunSpec& spec, const std::string& cwd, const std::vector<std::string>& homes, bool keep_workdir);

// The same refusals on what was opened (open_bind_sources), by identity: the workspace's bind
// source must be there and be the very directory sbx runs in (`cwd_fd`, by device and inode: a
// symlink swapped into the path after add_workspace checked it, or a directory renamed so that
// no source is the workspace any more, is no way around), neither "/" nor any of `homes` nor a
// directory above one (by device and inode, so a symlinked or bind-mounted /home is no way
// around either), and its `.git` source must be the workspace's own `.git` (not a symlink
// followed at open). `workspace` "" (none) passes.
Status check_workspace_source(const std::vector<BindSource>& sources, const std::string& workspace, int cwd_fd,
                              const std::vector<std::string>& homes);

// The host path that `sandbox_path` (absolute) shows inside the sandbox: through the bind or
// input whose destination holds it (the longest), or the same path in a system directory of the
// host root; nullopt where the sandbox has something of its own (/tmp, /out, an image's tree).
std::optional<std::string> host_path_in_sandbox(const RunSpec& spec, const std::string& sandbox_path,
                                                const std::string& cwd);

// After a program ended with `exit_status` (1, 2, 126 or 127: what interpreters and shells exit
// with for a file they cannot open, make's "No targets"): the hint when it was handed a host file
// the sandbox does not have at that path. Looked at: each argument naming a path that
// `host_has` (exists on the host, relative ones from `cwd`) but that the sandbox would resolve
// elsewhere (relative ones from spec.workdir), and a build tool's project file (make's Makefile,
// npm's package.json, cargo's Cargo.toml) in `cwd`. "" when none.
std::string missing_host_path_hint(const RunSpec& spec, int exit_status, const std::string& cwd,
                                   const std::function<bool(const std::string&)>& host_has);

// The hint's advice, also given by add_setup_hint for a program not found at all.
std::string project_dir_advice();

}  // namespace sbx
