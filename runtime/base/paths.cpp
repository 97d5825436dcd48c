#include "runtime/base/paths.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

namespace sbx {
namespace {
std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}
}  // namespace

std::string user_config_dir() {
  // Appended in place: GCC 12 misreports `std::string(x) + "..."` as out of bounds (-Warray-bounds).
  std::string dir;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) dir.append(x).append("/sbx");
  else if (const char* h = std::getenv("HOME"); h && *h) dir.append(h).append("/.config/sbx");
  return dir;
}

std::vector<std::string> config_search_dirs(const std::string& kind) {
  std::vector<std::string> dirs;
  if (std::string user = user_config_dir(); !user.empty()) dirs.push_back(user.append("/").append(kind));
  dirs.push_back(std::string("/etc/sbx/").append(kind));
  return dirs;
}

std::string current_dir() {
  char buf[4096];
  return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string();
}

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

std::string resolved_path(const std::string& p) {
  std::error_code ec;
  auto r = std::filesystem::weakly_canonical(p, ec);
  std::string s = ec ? std::filesystem::path(p).lexically_normal().string() : r.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

bool path_within(const std::string& path, const std::string& dir) {
  return path == dir || dir == "/" || path.starts_with(dir + "/");
}

std::string path_relation(const std::string& a, const std::string& b) {
  if (a == b) return "is";
  if (path_within(a, b)) return "is inside";
  if (a == "/" || b.starts_with(a + "/")) return "holds";
  return "";
}

namespace {
std::string octal_mode(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}
bool trusted_owner(uid_t u) { return u == ::geteuid() || u == 0; }
// Inside a user namespace that does not map host root (rootless podman, a pod with hostUsers:
// false, `unshare -r`), /, /tmp and /home show as the kernel's overflow uid (65534): their real
// owner is outside the namespace and nobody inside it can act as that owner. Such an ancestor is
// passed through like a root-owned one; the directory itself must still be sbx's user's own.
// In the initial namespace every id is mapped, so 65534 is a real account (nobody) and is not
// trusted.
bool unmapped_owner(uid_t u) {
  static const int overflow = [] {
    auto first_line = [](const char* path) {
      char buf[128] = {};
      FILE* f = std::fopen(path, "re");
      if (!f) return std::string();
      if (!std::fgets(buf, sizeof buf, f)) buf[0] = 0;
      std::fclose(f);
      return std::string(buf);
    };
    std::string map = first_line("/proc/self/uid_map");
    unsigned long inside = 0, outside = 0, count = 0;
    if (std::sscanf(map.c_str(), "%lu %lu %lu", &inside, &outside, &count) == 3 && inside == 0 && outside == 0 &&
        count == 4294967295UL)
      return -1;  // the initial user namespace
    std::string o = first_line("/proc/sys/kernel/overflowuid");
    int v = o.empty() ? 65534 : std::atoi(o.c_str());
    return v > 0 ? v : 65534;
  }();
  return overflow >= 0 && u == static_cast<uid_t>(overflow);
}
// One existing part of the path: `last` is the directory itself, else an ancestor sbx only
// passes through. A sticky, world-writable ancestor (/tmp) is fine: others cannot rename or
// remove what they do not own in it, and the next part's owner is checked in turn.
Status check_part(const std::string& part, const struct stat& st, bool last, const std::string& what,
                  const std::string& path) {
  const std::string head = what + " " + path + ": ";
  if (!trusted_owner(st.st_uid) && !(!last && unmapped_owner(st.st_uid)))
    return make_error("usage", head + part + " belongs to uid " + std::to_string(st.st_uid) +
                                   ", not to sbx's user (uid " + std::to_string(::geteuid()) +
                                   ") or root: its owner could change what sbx trusts there (the seccomp cache, the "
                                   "ledger a replay rebuilds from); use a directory of your own, or 'chown " +
                                   std::to_string(::geteuid()) + " " + part + "'");
  bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  if (others_write && (last || !(st.st_mode & S_ISVTX)))
    return make_error("usage", head + part + " is " + (st.st_mode & S_IWOTH ? "world" : "group") + "-writable (mode " +
                                   octal_mode(st.st_mode) +
                                   "): another user could change what sbx trusts there (the "
                                   "seccomp cache, the ledger a replay rebuilds from); fix: chmod go-w " +
                                   part);
  return {};
}
}  // namespace

Status check_private_dir(const std::string& path, const std::string& what) {
  if (path.empty()) return {};
  std::string abs = path;
  if (abs[0] != '/') {
    char buf[4096];
    if (!::getcwd(buf, sizeof buf))
      return make_error("usage", what + " " + path + ": cannot resolve the current directory");
    abs = std::string(buf) + "/" + path;
  }
  // Part by part with lstat, bounded by the path's own length: every directory passed through
  // and every symlink followed (its target's parts are checked in turn, at most 40 links, as the
  // kernel allows).
  std::vector<std::string> todo;  // parts still to walk, last first
  auto push_parts = [&](const std::string& p) {
    std::vector<std::string> parts;
    std::size_t i = 0;
    while (i < p.size()) {
      std::size_t j = p.find('/', i);
      if (j == std::string::npos) j = p.size();
      if (j > i) parts.push_back(p.substr(i, j - i));
      i = j + 1;
    }
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) todo.push_back(*it);
  };
  push_parts(abs);
  std::string cur;  // the resolved path walked so far ("" is /)
  int links = 0;
  struct stat st;
  if (::lstat("/", &st) == 0) SBX_TRY(check_part("/", st, todo.empty(), what, path));
  while (!todo.empty()) {
    std::string name = todo.back();
    todo.pop_back();
    if (name == ".") continue;
    if (name == "..") {
      auto slash = cur.rfind('/');
      cur = slash == std::string::npos ? "" : cur.substr(0, slash);
      continue;
    }
    std::string next = cur + "/" + name;
    if (::lstat(next.c_str(), &st) != 0) {
      if (errno == ENOENT) return {};  // the rest is sbx's to create (0700)
      return sys_error("usage", what + " " + path + ": cannot stat " + next);
    }
    if (S_ISLNK(st.st_mode)) {
      // The link itself: whoever owns it (in a sticky directory) could point it elsewhere.
      if (!trusted_owner(st.st_uid)) SBX_TRY(check_part(next, st, false, what, path));
      if (++links > 40) return make_error("usage", what + " " + path + ": too many symlinks");
      char target[4096];
      ssize_t n = ::readlink(next.c_str(), target, sizeof target - 1);
      if (n <= 0) return sys_error("usage", what + " " + path + ": cannot read the link " + next);
      std::string t(target, static_cast<std::size_t>(n));
      if (t[0] == '/') cur.clear();
      push_parts(t);
      continue;
    }
    SBX_TRY(check_part(next, st, todo.empty(), what, path));
    cur = next;
  }
  return {};
}

}  // namespace sbx
