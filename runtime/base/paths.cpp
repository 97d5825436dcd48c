#include "runtime/base/paths.hpp"

#include <unistd.h>

#include <cstdlib>

namespace sbx {
namespace {
std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}
}  // namespace

Dirs resolve_dirs(const std::string& state_dir_flag) {
  Dirs d;
  std::string override_dir = !state_dir_flag.empty() ? state_dir_flag : env_or("SBX_STATE_DIR", "");
  if (!override_dir.empty()) {
    d.state = override_dir;
    d.data = override_dir + "/data";
  } else if (::geteuid() == 0) {
    d.state = "/var/lib/sbx";
    d.data = "/var/lib/sbx";
  } else {
    std::string home = env_or("HOME", "/tmp");
    d.state = env_or("XDG_STATE_HOME", home + "/.local/state") + "/sbx";
    d.data = env_or("XDG_DATA_HOME", home + "/.local/share") + "/sbx";
  }
  d.traces = d.state + "/traces";
  d.images = d.data + "/images";
  return d;
}

}  // namespace sbx
