#include "runtime/launch/workspace.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <array>

#include "runtime/base/json_io.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/base/strings.hpp"

namespace sbx {

namespace {
// The host directories a host-root sandbox shows at the same path (mounts.cpp, kSystemDirs and
// the few /etc entries): a path under one is "there" for the hint.
constexpr std::array<const char*, 8> kSameOnHost = {"/usr",   "/bin",   "/sbin",   "/lib",
                                                    "/lib64", "/lib32", "/libx32", "/etc"};

std::string dir_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

// Exit statuses that say "could not find or open what I was given": python's and perl's 2
// ("can't open file"), make's 2 ("No targets"), a shell's 127 (not found) and 126, node's 1.
bool not_found_like(int status) { return status == 1 || status == 2 || status == 126 || status == 127; }

std::string base_name(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// What a build tool reads from its working directory when given no file.
std::vector<std::string> project_files(const std::string& tool) {
  if (tool == "make" || tool == "gmake") return {"GNUmakefile", "makefile", "Makefile"};
  if (tool == "npm" || tool == "yarn" || tool == "pnpm") return {"package.json"};
  if (tool == "cargo") return {"Cargo.toml"};
  if (tool == "go") return {"go.mod"};
  return {};
}

// Whether the program, started in spec.workdir, would see the host's `host_path` at `sandbox_path`.
bool seen_at(const RunSpec& spec, const std::string& sandbox_path, const std::string& host_path,
             const std::string& cwd) {
  auto shown = host_path_in_sandbox(spec, sandbox_path, cwd);
  return shown && *shown == host_path;
}
}  // namespace

std::string absolute_lexical(const std::string& cwd, const std::string& path) {
  std::string joined = !path.empty() && path[0] == '/' ? path : cwd + "/" + path;
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (i <= joined.size()) {
    std::size_t j = joined.find('/', i);
    if (j == std::string::npos) j = joined.size();
    std::string part = joined.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out;
  for (auto& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

std::string passwd_home(std::string_view passwd, std::uint32_t uid) {
  auto entry = colon_db_entry(passwd, 2, std::to_string(uid), 6);
  return entry.empty() ? "" : std::string(entry[5]);
}

namespace {
// /etc/passwd of a host with many local users is some hundred KiB; past the bound, no entry.
constexpr std::size_t kMaxPasswdBytes = 4u << 20;
std::string host_home_of(std::uint32_t uid) {
  auto text = read_bounded("/etc/passwd", kMaxPasswdBytes, "usage", "/etc/passwd");
  return text ? passwd_home(*text, uid) : "";
}
}  // namespace

std::string home_dir() {
  if (const char* h = std::getenv("HOME"); h && *h) return h;
  return host_home_of(static_cast<std::uint32_t>(::geteuid()));
}

std::vector<std::string> protected_homes() {
  std::vector<std::string> out;
  if (std::string h = home_dir(); !h.empty()) out.push_back(h);
  const char* sudo_uid = std::getenv("SUDO_UID");
  if (::geteuid() == 0 && sudo_uid && *sudo_uid) {
    char* end = nullptr;
    unsigned long uid = std::strtoul(sudo_uid, &end, 10);
    std::string home = end && *end == '\0' && uid <= 0xFFFFFFFEUL ? host_home_of(static_cast<std::uint32_t>(uid)) : "";
    const char* user = std::getenv("SUDO_USER");
    if (home.empty() && user && *user && !std::strchr(user, '/') && std::string_view(user) != "." &&
        std::string_view(user) != "..")
      home = std::string("/home/") + user;
    if (!home.empty()) out.push_back(home);
  }
  return out;
}

void anchor_relative_binds(std::vector<BindMount>& binds, const std::string& cwd) {
  for (auto& b : binds)
    if (!b.src.empty() && b.src[0] != '/' && b.dst == b.src) b.dst = absolute_lexical(cwd, b.src);
}

Status add_workspace(RunSpec& spec, const std::string& cwd, const std::vector<std::string>& homes, bool keep_workdir) {
  const std::string fix = "; run sbx from a project directory, or bind what the program needs with --bind";
  if (cwd.empty() || cwd[0] != '/')
    return make_error("usage", "--workspace: cannot tell the current directory (removed?)" + fix);
  if (cwd == "/")
    return make_error("usage", "--workspace: the current directory is /, the whole host, read-write" + fix);
  for (auto& home : homes)
    if (!home.empty() && home != "/" && path_within(absolute_lexical("/", home), cwd))
      return make_error("usage", "--workspace: the current directory " + cwd +
                                     (absolute_lexical("/", home) == cwd ? " is" : " holds") + " the home directory " +
                                     home +
                                     ": a program that can write ~/.bashrc or ~/.ssh runs code as you later; run it "
                                     "from a project directory below it");
  std::vector<BindMount> ws = {{cwd, cwd, true}};
  const std::string git = cwd + "/.git";
  struct stat st;
  if (::lstat(git.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode))
      return make_error("usage", "--workspace: " + git +
                                     " is a symlink, which sbx cannot keep read-only; bind the directories "
                                     "yourself (--bind " +
                                     cwd + ":" + cwd + ":rw)");
    if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) ws.push_back({git, git, false});
  }
  spec.binds.insert(spec.binds.begin(), ws.begin(), ws.end());
  if (!keep_workdir) spec.workdir = cwd;
  return {};
}

namespace {
// The home directory of `homes` that `s` is or holds, by identity: each home and every directory
// above it is stat'ed (symlinks followed: a /home that is a link or a bind mount elsewhere is
// found by what it is). "" when none.
std::string home_held_by(const BindSource& s, const std::vector<std::string>& homes) {
  for (auto& home : homes) {
    if (home.empty() || home[0] != '/') continue;
    for (std::string p = absolute_lexical("/", home); p != "/"; p = dir_of(p)) {
      struct stat st;
      if (::stat(p.c_str(), &st) == 0 && st.st_dev == s.dev && st.st_ino == s.ino) return home;
    }
  }
  return "";
}
}  // namespace

Status check_workspace_source(const std::vector<BindSource>& sources, const std::string& workspace, int cwd_fd,
                              const std::vector<std::string>& homes) {
  if (workspace.empty()) return {};
  struct stat here, root;
  if (::fstat(cwd_fd, &here) != 0) return sys_error("usage", "--workspace " + workspace + ": cannot stat it");
  const BindSource* ws = nullptr;
  for (auto& s : sources)
    if (s.flag == "--bind" && s.given.src == workspace && s.given.dst == workspace && s.given.rw) ws = &s;
  if (!ws)
    return make_error("usage", "--workspace " + workspace +
                                   ": no bind is the directory sbx runs in any more (it was renamed or replaced while "
                                   "sbx planned the run); run again");
  if (ws->dev != here.st_dev || ws->ino != here.st_ino)
    return make_error("usage", "--workspace " + workspace + ": the path now leads to " + ws->real +
                                   ", not to the directory sbx runs in (moved or replaced while sbx checked it); "
                                   "run again");
  bool is_root = ::stat("/", &root) == 0 && root.st_dev == ws->dev && root.st_ino == ws->ino;
  if (is_root)
    return make_error("usage",
                      "--workspace " + workspace + " is / (reached another way); run it from a project directory");
  if (std::string home = home_held_by(*ws, homes); !home.empty())
    return make_error("usage", "--workspace " + workspace + " is or holds the home directory " + home +
                                   " (reached another way); run it from a project directory below it");
  // The .git kept read-only must be the workspace's own: one that became a symlink after
  // add_workspace's lstat was followed at open, to a directory that is then not kept read-only.
  const std::string git = workspace + "/.git";
  for (auto& s : sources)
    if (s.flag == "--bind" && s.given.src == git && !s.given.rw && s.real != ws->real + "/.git")
      return make_error("usage", "--workspace " + workspace + ": " + git + " now leads to " + s.real +
                                     " (replaced by a symlink while sbx checked it); run again");
  return {};
}

std::optional<std::string> host_path_in_sandbox(const RunSpec& spec, const std::string& sandbox_path,
                                                const std::string& cwd) {
  const BindMount* best = nullptr;
  for (const auto* list : {&spec.binds, &spec.inputs})
    for (auto& b : *list)
      if (path_within(sandbox_path, b.dst) && (!best || b.dst.size() >= best->dst.size())) best = &b;
  if (best) {
    std::string rest = sandbox_path.substr(best->dst == "/" ? 0 : best->dst.size());
    return absolute_lexical(cwd, best->src) + rest;
  }
  if (spec.image == "host")
    for (const char* d : kSameOnHost)
      if (path_within(sandbox_path, d)) return sandbox_path;
  return std::nullopt;
}

std::string project_dir_advice() {
  return "run with --workspace (the current directory read-write at the same path, .git read-only, the "
         "command started there), or --bind DIR (read-only at the same path), or pass a file with --input "
         "(read-only at /in/NAME)";
}

std::string missing_host_path_hint(const RunSpec& spec, int exit_status, const std::string& cwd,
                                   const std::function<bool(const std::string&)>& host_has) {
  if (!not_found_like(exit_status) || spec.argv.empty() || cwd.empty()) return "";
  const std::string where = "the sandbox's working directory is " + spec.workdir;
  for (std::size_t i = 0; i < spec.argv.size(); ++i) {
    const std::string& a = spec.argv[i];
    if (a.empty() || a[0] == '-' || a.find('\n') != std::string::npos || a.size() > 4096) continue;
    // A bare word as the command is looked up in PATH, not in a directory.
    if (i == 0 && a.find('/') == std::string::npos) continue;
    std::string on_host = absolute_lexical(cwd, a);
    if (on_host == "/" || !host_has(on_host)) continue;
    std::string in_sandbox = absolute_lexical(spec.workdir, a);
    if (seen_at(spec, in_sandbox, on_host, cwd)) continue;
    if (a[0] == '/')
      return a + " is on the host but not in the sandbox; bind its directory (--bind " + dir_of(a) +
             ", read-only at the same path), or " + project_dir_advice();
    return a + " is in " + cwd + " on the host, but " + where + " and " + cwd + " is not mounted there; " +
           project_dir_advice();
  }
  for (auto& f : project_files(base_name(spec.argv[0]))) {
    std::string on_host = cwd + "/" + f;
    if (!host_has(on_host) || seen_at(spec, absolute_lexical(spec.workdir, f), on_host, cwd)) continue;
    return base_name(spec.argv[0]) + " looks for " + f + " in its working directory, but " + where + " and " + cwd +
           " is not mounted there; " + project_dir_advice();
  }
  return "";
}

}  // namespace sbx
