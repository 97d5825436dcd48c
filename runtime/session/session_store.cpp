#include "runtime/session/session_store.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "runtime/base/json_io.hpp"
#include "runtime/session/session_wire.hpp"

namespace sbx {
namespace {
constexpr const char* kStage = "sessions";

// A unix socket address for <dir fd>/ctl.sock: /proc/self/fd/N/ctl.sock stays short whatever
// the state dir's path is.
struct sockaddr_un socket_addr(int dir_fd) {
  struct sockaddr_un a {};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "/proc/self/fd/%d/ctl.sock", dir_fd);
  return a;
}

// Whether a server listens in the directory `dir_fd`. Without blocking: a server whose backlog is
// full (stopped, or slow) answers EAGAIN, and is alive all the same.
bool server_answers(int dir_fd) {
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  auto a = socket_addr(dir_fd);
  return s.ok() && (::connect(s.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) == 0 || errno == EAGAIN);
}

// `name` in `at`, opened without following a link, and a directory only this user (or root)
// owns and may write: what the store deletes in, reads from and connects through is its own.
// ENOENT keeps its errno (the caller may take it for "none yet"); anything else is an error that
// says what `shown` is instead and how to fix it.
Result<UniqueFd> open_own_dir(int at, const std::string& name, const std::string& shown) {
  UniqueFd fd(::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd.ok() && errno == ENOENT) return sys_error(kStage, "no " + shown);
  if (!fd.ok() && (errno == ELOOP || errno == ENOTDIR)) {
    std::string kind = ::fstatat(at, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 ? file_kind(st.st_mode) : "file";
    return make_error(kStage, shown + " is a " + kind + ", not a directory: sbx never follows it; remove it");
  }
  if (!fd.ok() || ::fstat(fd.get(), &st) != 0) return sys_error(kStage, "cannot open " + shown);
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return make_error(kStage, shown + " belongs to uid " + std::to_string(st.st_uid) + ", not to sbx's user (uid " +
                                  std::to_string(::geteuid()) + "): remove it");
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return make_error(kStage, shown + " is writable by others (mode " + mode + "): fix: chmod go-w " + shown);
  }
  return fd;
}

// A session file (session.json, a tombstone, end.json): a regular file read without following a
// link and without blocking (a FIFO planted there is refused at once, never waited on), bounded,
// and a JSON object. ENOENT keeps its errno.
Result<nlohmann::json> read_meta_at(int dir_fd, const std::string& name, const std::string& shown) {
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY));
  if (!fd.ok() && errno == ELOOP) return make_error(kStage, shown + ": a symlink, not a regular file");
  if (!fd.ok()) return sys_error(kStage, "cannot read " + shown);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return sys_error(kStage, "cannot read " + shown);
  if (!S_ISREG(st.st_mode)) return make_error(kStage, shown + ": a " + file_kind(st.st_mode) + ", not a regular file");
  auto text = read_bounded_fd(fd.get(), kMaxSessionMetaBytes, kStage, shown);
  if (!text) return text.error();
  auto j = parse_json_doc(*text, JsonBounds{kMaxSessionMetaBytes}, kStage, shown);
  if (!j) return j.error();
  if (!j->is_object()) return make_error(kStage, shown + ": not a JSON object");
  return j;
}

bool missing(const Error& e) { return e.err == ENOENT; }

// A meta file read back must be the session's own: its "id" that session's (a tombstone is named
// after its session).
Result<nlohmann::json> read_session_meta_at(int dir_fd, const std::string& name, const std::string& shown,
                                            const std::string& id) {
  auto j = read_meta_at(dir_fd, name, shown);
  if (j && json_str(*j, "id") != id) return make_error(kStage, shown + ": its \"id\" is not " + id);
  return j;
}

std::vector<std::string> entries(int dir_fd, bool dotfiles = false) {
  std::vector<std::string> out;
  int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return out;
  if (DIR* d = ::fdopendir(fd)) {
    while (struct dirent* e = ::readdir(d))
      if (std::string n = e->d_name; n != "." && n != ".." && (dotfiles || n[0] != '.')) out.push_back(n);
    ::closedir(d);
  } else {
    ::close(fd);
  }
  return out;
}

// Removes <sessions>/<id>/ and the files in it, through the directory opened without following a
// link: a symlink planted as <id> (or in it) is never followed to delete elsewhere.
void remove_session_dir(int root_fd, const std::string& id) {
  auto dir = open_own_dir(root_fd, id, id);
  if (!dir) return;
  for (const auto& n : entries(dir->get(), true)) ::unlinkat(dir->get(), n.c_str(), 0);
  ::unlinkat(root_fd, id.c_str(), AT_REMOVEDIR);
}

Status write_meta_at(int dir_fd, const std::string& name, const nlohmann::json& meta) {
  std::string tmp = name + ".tmp";
  UniqueFd fd(::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.ok()) return sys_error(kStage, "cannot write " + tmp);
  nlohmann::json copy = meta;  // dump_json escapes in place
  SBX_TRY(write_all(fd.get(), dump_json(copy, 2) + "\n", tmp));
  if (::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) return sys_error(kStage, "cannot rename " + tmp);
  return {};
}

// The store's sessions/ (check_session_store), opened; with `create`, made first (and its ended/).
Result<UniqueFd> open_root(const Dirs& dirs, bool create) {
  SBX_TRY(check_session_store(dirs));
  std::string root = sessions_dir(dirs);
  if (create) SBX_TRY(ensure_dir(root, 0700));
  auto fd = open_own_dir(AT_FDCWD, root, root);
  if (fd && create && ::mkdirat(fd->get(), "ended", 0700) != 0 && errno != EEXIST)
    return sys_error(kStage, "cannot create " + root + "/ended");
  return fd;
}

// The tombstones' directory ended/, opened (ENOENT: none yet).
Result<UniqueFd> open_ended(int root_fd, const Dirs& dirs) {
  return open_own_dir(root_fd, "ended", sessions_dir(dirs) + "/ended");
}

void prune_tombstones(int ended_fd) {
  // A bounded table: past kMaxTombstones the oldest go (the ledger keeps every session's records).
  auto names = entries(ended_fd);
  if (names.size() <= kMaxTombstones) return;
  std::vector<std::pair<std::int64_t, std::string>> by_age;  // mtime in ns, name
  for (auto& n : names) {
    struct stat st;
    if (::fstatat(ended_fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      by_age.push_back({static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, n});
  }
  std::sort(by_age.begin(), by_age.end());
  for (std::size_t i = 0; i + kMaxTombstones < by_age.size(); ++i) ::unlinkat(ended_fd, by_age[i].second.c_str(), 0);
}

void retire_at(int root_fd, const Dirs& dirs, const std::string& id, const nlohmann::json& end) {
  if (auto ended = open_ended(root_fd, dirs)) {
    (void)write_meta_at(ended->get(), id + ".json", end);
    remove_session_dir(root_fd, id);
    prune_tombstones(ended->get());
  }
}

// A running session's directory whose server is gone (killed, or the host rebooted): its
// tombstone says so, and the directory goes.
nlohmann::json bury_stale(int root_fd, const Dirs& dirs, const std::string& id, int dir_fd) {
  // A server that ends writes its tombstone before it removes its directory (retire_session_dir),
  // whose socket may go before its session.json: a directory met in between is that server's,
  // and its own tombstone (how it ended: "stop", "idle_max", ...) stands.
  if (auto ended = open_ended(root_fd, dirs))
    if (auto own = read_session_meta_at(ended->get(), id + ".json", id, id)) {
      remove_session_dir(root_fd, id);
      return *own;
    }
  auto read = read_session_meta_at(dir_fd, "session.json", id, id);
  nlohmann::json meta = read ? *read : nlohmann::json{{"id", id}};
  meta["state"] = "ended";
  meta["ended_by"] = "server_gone";
  retire_at(root_fd, dirs, id, meta);
  return meta;
}
}  // namespace

std::string sessions_dir(const Dirs& dirs) { return dirs.state + "/sessions"; }
std::string session_dir(const Dirs& dirs, const std::string& id) { return sessions_dir(dirs) + "/" + id; }

std::string new_session_id() {
  unsigned char b[16];
  std::size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  std::string id;
  char hex[3];
  for (unsigned char c : b) {
    std::snprintf(hex, sizeof hex, "%02x", c);
    id += hex;
  }
  return id;
}

bool valid_session_id(const std::string& id) {
  return id.size() == 32 &&
         std::all_of(id.begin(), id.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Result<int> max_sessions() {
  const char* v = std::getenv("SBX_MAX_SESSIONS");
  if (!v || !*v) return kDefaultMaxSessions;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > kDefaultMaxSessions)
    return make_error("usage", "SBX_MAX_SESSIONS=" + std::string(v) + ": give a number from 1 to " +
                                   std::to_string(kDefaultMaxSessions));
  return static_cast<int>(n);
}

Status check_session_store(const Dirs& dirs) {
  SBX_TRY(check_private_dir(dirs.state, "sbx's state dir"));
  return check_private_dir(sessions_dir(dirs), "sbx's sessions dir");
}

Result<UniqueFd> create_session_dir(const Dirs& dirs, const std::string& id, int max) {
  auto root = open_root(dirs, true);
  if (!root) return root.error();
  if (auto ended = open_ended(root->get(), dirs); !ended) return ended.error();
  std::string shown = sessions_dir(dirs);
  UniqueFd lock(::openat(root->get(), ".lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  struct stat st {};
  if (!lock.ok() || ::fstat(lock.get(), &st) != 0 || !S_ISREG(st.st_mode) || ::flock(lock.get(), LOCK_EX) != 0)
    return make_error(kStage, "cannot lock " + shown + "/.lock (" + (lock.ok() ? "not a regular file" : "unopenable") +
                                  "): remove it");
  int running = 0;
  for (const auto& e : entries(root->get())) {
    if (!valid_session_id(e)) continue;
    auto dir = open_own_dir(root->get(), e, shown + "/" + e);
    if (!dir) continue;  // not a session's: `ls` names it
    if (server_answers(dir->get())) ++running;
    else if (::fstatat(dir->get(), "session.json", &st, AT_SYMLINK_NOFOLLOW) == 0)
      bury_stale(root->get(), dirs, e, dir->get());  // a session still starting has no session.json yet: left alone
  }
  if (running >= max)
    return make_error(kStage, std::to_string(running) + " sessions are running in " + shown + " (at most " +
                                  std::to_string(max) + "): end one with 'sbx session stop ID' (see 'sbx session ls')");
  if (::mkdirat(root->get(), id.c_str(), 0700) != 0) return sys_error(kStage, "cannot create the session's directory");
  // Listening before the lock is released: the next start counts this session.
  return listen_session(session_dir(dirs, id));
}

namespace {
// The ended sessions' tombstones, for `ls --all`; a file that is not one is named in `skipped`.
void list_ended(int root_fd, const Dirs& dirs, std::vector<nlohmann::json>& out, std::vector<std::string>& skipped) {
  auto ended = open_ended(root_fd, dirs);
  if (!ended) {
    if (!missing(ended.error())) skipped.push_back(ended.error().message);
    return;
  }
  std::string shown = sessions_dir(dirs) + "/ended/";
  for (const auto& e : entries(ended->get())) {
    if (e.size() != 37 || !valid_session_id(e.substr(0, 32)) || !e.ends_with(".json")) continue;
    auto meta = read_session_meta_at(ended->get(), e, shown + e, e.substr(0, 32));
    if (meta) out.push_back(std::move(*meta));
    else if (!missing(meta.error())) skipped.push_back(meta.error().describe());
  }
}
}  // namespace

Result<std::vector<nlohmann::json>> list_sessions(const Dirs& dirs, bool all, std::vector<std::string>* skipped) {
  std::vector<nlohmann::json> out;
  std::vector<std::string> bad;
  auto root = open_root(dirs, false);
  if (!root && missing(root.error())) return out;
  if (!root) return root.error();
  std::string shown = sessions_dir(dirs) + "/";
  for (const auto& e : entries(root->get())) {
    if (!valid_session_id(e)) continue;
    auto dir = open_own_dir(root->get(), e, shown + e);
    if (!dir) {
      if (!missing(dir.error())) bad.push_back(dir.error().message);
      continue;
    }
    auto meta = read_session_meta_at(dir->get(), "session.json", shown + e + "/session.json", e);
    if (!meta) {
      if (!missing(meta.error())) bad.push_back(meta.error().describe());
      continue;  // still starting, or not a session's
    }
    if (server_answers(dir->get())) {
      (*meta)["state"] = "running";
      out.push_back(std::move(*meta));
    } else if (all) {
      bury_stale(root->get(), dirs, e, dir->get());  // listed with the ended ones below, from its tombstone
    }
  }
  if (all) list_ended(root->get(), dirs, out, bad);
  std::sort(out.begin(), out.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return json_str(a, "started_at") > json_str(b, "started_at");
  });
  if (skipped) *skipped = std::move(bad);
  return out;
}

Result<nlohmann::json> find_session(const Dirs& dirs, const std::string& id) {
  if (!valid_session_id(id))
    return make_error("usage", "'" + id + "' is no session id (32 hex digits, as 'sbx session start' printed)");
  auto unknown = make_error("usage", "no session " + id + " in " + sessions_dir(dirs) +
                                         " (unknown, or another user's or tenant's; see 'sbx session ls')");
  auto root = open_root(dirs, false);
  if (!root) return missing(root.error()) ? unknown : root.error();
  std::string shown = session_dir(dirs, id);
  auto dir = open_own_dir(root->get(), id, shown);
  if (!dir && !missing(dir.error())) return dir.error();
  if (dir) {
    auto meta = read_session_meta_at(dir->get(), "session.json", shown + "/session.json", id);
    if (!meta && !missing(meta.error())) return meta.error();
    if (meta && server_answers(dir->get())) {
      (*meta)["state"] = "running";
      return meta;
    }
    if (meta) return bury_stale(root->get(), dirs, id, dir->get());
  }
  auto ended = open_ended(root->get(), dirs);
  if (!ended) return missing(ended.error()) ? unknown : ended.error();
  auto meta = read_session_meta_at(ended->get(), id + ".json", sessions_dir(dirs) + "/ended/" + id + ".json", id);
  if (!meta) return missing(meta.error()) ? unknown : meta.error();
  return meta;
}

Result<nlohmann::json> read_session_file(const std::string& dir, const std::string& name) {
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d.ok()) return sys_error(kStage, "cannot open " + dir);
  return read_meta_at(d.get(), name, dir + "/" + name);
}

Status write_session_meta(const std::string& path, const nlohmann::json& meta) {
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d.ok()) return sys_error(kStage, "cannot open " + dir);
  return write_meta_at(d.get(), path.substr(slash + 1), meta);
}

void retire_session_dir(const Dirs& dirs, const std::string& id, const nlohmann::json& end) {
  if (auto root = open_root(dirs, false)) retire_at(root->get(), dirs, id, end);
}

Result<UniqueFd> connect_session(const Dirs& dirs, const std::string& id) {
  auto meta = find_session(dirs, id);
  if (!meta) return meta.error();
  if (json_str(*meta, "state") != "running")
    return make_error("usage", "session " + id + " has ended (" + json_str(*meta, "ended_by", "?") +
                                   "); start a new one with 'sbx session start'");
  auto root = open_root(dirs, false);
  if (!root) return root.error();
  auto d = open_own_dir(root->get(), id, session_dir(dirs, id));
  if (!d) return d.error();
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.ok()) return sys_error(kStage, "cannot open session " + id);
  auto a = socket_addr(d->get());
  if (::connect(s.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) != 0)
    return sys_error(kStage, "cannot reach session " + id + "'s server");
  // Whoever listens there must be this user's own server: nothing of a call (its argv, its code,
  // its secrets) goes to another's, and nothing another says is taken for the session's answer.
  struct ucred cred {};
  socklen_t len = sizeof cred;
  if (::getsockopt(s.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::geteuid())
    return make_error(kStage, "session " + id + "'s socket " + session_dir(dirs, id) + "/ctl.sock is served by uid " +
                                  std::to_string(cred.uid) + ", not by sbx's user (uid " + std::to_string(::geteuid()) +
                                  "): nothing was sent; remove that directory");
  return s;
}

bool session_server_answers(const std::string& dir) {
  UniqueFd d(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  return d.ok() && server_answers(d.get());
}

Result<UniqueFd> listen_session(const std::string& dir) {
  UniqueFd d(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!d.ok() || !s.ok()) return sys_error(kStage, "cannot make the session's socket in " + dir);
  auto a = socket_addr(d.get());
  if (::bind(s.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) != 0 || ::listen(s.get(), 16) != 0)
    return sys_error(kStage, "cannot listen on " + dir + "/ctl.sock");
  return s;
}

}  // namespace sbx
