#pragma once
// Where sbx keeps things (man/sbx.1, FILES). XDG for users; /var/lib/sbx and /run/sbx as root.
// --state-dir / SBX_STATE_DIR move the state (traces) and data (images) dirs under one root so
// tests never touch $HOME.
#include <string>

namespace sbx {

struct Dirs {
  std::string state;   // $XDG_STATE_HOME/sbx, or /var/lib/sbx as root, or the override
  std::string traces;  // <state>/traces
  std::string data;    // $XDG_DATA_HOME/sbx, or /var/lib/sbx as root, or <override>/data
  std::string images;  // <data>/images
};

// `state_dir_flag` is the --state-dir value ("" when not given); SBX_STATE_DIR is consulted next.
Dirs resolve_dirs(const std::string& state_dir_flag);

}  // namespace sbx
