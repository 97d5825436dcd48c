#pragma once
// Where sbx keeps things (man/sbx.1, FILES). XDG for users; /var/lib/sbx and /run/sbx as root.
// --state-dir / SBX_STATE_DIR move the state (traces) and data (images) dirs under one root so
// tests never touch $HOME.
#include <string>
#include <vector>

#include "runtime/base/error.hpp"

namespace sbx {

struct Dirs {
  std::string state;   // $XDG_STATE_HOME/sbx, or /var/lib/sbx as root, or the override
  std::string traces;  // <state>/traces
  std::string data;    // $XDG_DATA_HOME/sbx, or /var/lib/sbx as root, or <override>/data
  std::string images;  // <data>/images
};

// The user's sbx config dir: $XDG_CONFIG_HOME/sbx, else $HOME/.config/sbx; "" when neither is set.
std::string user_config_dir();
// Where sbx looks for its config files of one kind (`kind`: "profiles", "tenants"), in order:
// <user_config_dir>/<kind> (when there is one), then /etc/sbx/<kind>.
std::vector<std::string> config_search_dirs(const std::string& kind);
// The process's working directory; "" when getcwd fails (removed, or longer than PATH_MAX).
std::string current_dir();

// `state_dir_flag` is the --state-dir value ("" when not given); SBX_STATE_DIR is consulted next.
Dirs resolve_dirs(const std::string& state_dir_flag);

// sbx trusts what it reads back from its state dir or a tenant's store (the ledger a replay
// rebuilds from, blobs, caches), so nobody but sbx's user (or root) may be able to change it:
// refuses (stage "usage", exit 125, with the chmod/chown that fixes it) a directory `path` that is
// not owned by the effective uid (or root), or is group/other-writable, or that is reached through
// a directory another user can write (owned by another user, or group/other-writable without the
// sticky bit), or through a symlink another user can replace. Parts that do not exist yet are
// created later by sbx (0700), so only the existing ones are checked. `what` names the directory
// in the message ("state dir", "tenant 't' store").
Status check_private_dir(const std::string& path, const std::string& what);

// `p` with the symlinks of the part that exists resolved (std::filesystem::weakly_canonical),
// the rest made lexically normal, and no trailing '/' (but "/" itself): the one spelling two
// paths are compared in (a tenant's store against the state dir, a bind source against what no
// bind may reach). A path, not a file: what
// it names may change after the call, so a decision that must hold until a mount is made on the
// opened file itself (runtime/linux/mounts.hpp, open_bind_sources).
std::string resolved_path(const std::string& p);

// How the path `a` stands to the path `b`, both as resolved_path spells them: "is" (the same),
// "is inside" (below it; everything is inside "/"), "holds" (above it), or "" (unrelated; a
// common prefix that ends mid-name, /srv/state and /srv/stateful, is no relation).
std::string path_relation(const std::string& a, const std::string& b);
// Whether `path` is `dir` or below it, by whole names (path_relation "is" or "is inside"):
// everything is within "/"; /srv/stateful is not within /srv/state.
bool path_within(const std::string& path, const std::string& dir);

}  // namespace sbx
