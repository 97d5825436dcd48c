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

// Whether a server listens there. Without blocking: a server whose backlog is full (stopped, or
// slow) answers EAGAIN, and is alive all the same.
bool server_answers(const std::string& dir) {
  UniqueFd d(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d.ok()) return false;
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  auto a = socket_addr(d.get());
  return s.ok() && (::connect(s.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) == 0 || errno == EAGAIN);
}

void remove_tree_flat(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") ::unlink((dir + "/" + n).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

nlohmann::json read_meta(const std::string& path) {
  auto j = read_json_file(path, JsonBounds{kMaxSessionMetaBytes}, kStage, "session file");
  return j && j->is_object() ? *j : nlohmann::json(nullptr);
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

// A running session's directory whose server is gone (killed, or the host rebooted): its
// tombstone says so, and the directory goes.
nlohmann::json bury_stale(const Dirs& dirs, const std::string& id) {
  // A server that ends writes its tombstone before it removes its directory (retire_session_dir),
  // whose socket may go before its session.json: a directory met in between is that server's,
  // and its own tombstone (how it ended: "stop", "idle_max", ...) stands.
  if (nlohmann::json own = read_meta(sessions_dir(dirs) + "/ended/" + id + ".json"); own.is_object()) {
    remove_tree_flat(session_dir(dirs, id));
    return own;
  }
  nlohmann::json meta = read_meta(session_dir(dirs, id) + "/session.json");
  if (!meta.is_object()) meta = {{"id", id}};
  meta["state"] = "ended";
  meta["ended_by"] = "server_gone";
  retire_session_dir(dirs, id, meta);
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

Result<UniqueFd> create_session_dir(const Dirs& dirs, const std::string& id, int max) {
  std::string root = sessions_dir(dirs);
  SBX_TRY(ensure_dir(root + "/ended", 0700));
  UniqueFd lock(::open((root + "/.lock").c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!lock.ok() || ::flock(lock.get(), LOCK_EX) != 0) return sys_error(kStage, "cannot lock " + root);
  int running = 0;
  for (const auto& e : entries(root)) {
    if (!valid_session_id(e)) continue;
    if (server_answers(session_dir(dirs, e))) ++running;
    else if (::access((session_dir(dirs, e) + "/session.json").c_str(), F_OK) == 0)
      bury_stale(dirs, e);  // a session still starting has no session.json yet: left alone
  }
  if (running >= max)
    return make_error(kStage, std::to_string(running) + " sessions are running in " + root + " (at most " +
                                  std::to_string(max) + "): end one with 'sbx session stop ID' (see 'sbx session ls')");
  if (::mkdir(session_dir(dirs, id).c_str(), 0700) != 0)
    return sys_error(kStage, "cannot create the session's directory");
  // Listening before the lock is released: the next start counts this session.
  return listen_session(session_dir(dirs, id));
}

std::vector<nlohmann::json> list_sessions(const Dirs& dirs, bool all) {
  std::vector<nlohmann::json> out;
  std::string root = sessions_dir(dirs);
  for (const auto& e : entries(root)) {
    if (!valid_session_id(e)) continue;
    nlohmann::json meta = read_meta(session_dir(dirs, e) + "/session.json");
    if (!meta.is_object()) continue;  // still starting
    if (server_answers(session_dir(dirs, e))) {
      meta["state"] = "running";
      out.push_back(std::move(meta));
    } else if (all) {
      bury_stale(dirs, e);  // listed with the ended ones below, from its tombstone
    }
  }
  if (all)
    for (const auto& e : entries(root + "/ended"))
      if (e.size() == 37 && valid_session_id(e.substr(0, 32)))
        if (auto meta = read_meta(root + "/ended/" + e); meta.is_object()) out.push_back(std::move(meta));
  std::sort(out.begin(), out.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a.value("started_at", "") > b.value("started_at", "");
  });
  return out;
}

Result<nlohmann::json> find_session(const Dirs& dirs, const std::string& id) {
  if (!valid_session_id(id))
    return make_error("usage", "'" + id + "' is no session id (32 hex digits, as 'sbx session start' printed)");
  std::string dir = session_dir(dirs, id);
  if (nlohmann::json meta = read_meta(dir + "/session.json"); meta.is_object()) {
    if (server_answers(dir)) {
      meta["state"] = "running";
      return meta;
    }
    return bury_stale(dirs, id);
  }
  if (nlohmann::json meta = read_meta(sessions_dir(dirs) + "/ended/" + id + ".json"); meta.is_object()) return meta;
  return make_error("usage", "no session " + id + " in " + sessions_dir(dirs) +
                                 " (unknown, or another user's or tenant's; see 'sbx session ls')");
}

Status write_session_meta(const std::string& path, const nlohmann::json& meta) {
  nlohmann::json copy = meta;
  std::string tmp = path + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.ok()) return sys_error(kStage, "cannot write " + tmp);
  SBX_TRY(write_all(fd.get(), dump_json(copy, 2) + "\n", tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0) return sys_error(kStage, "cannot rename " + tmp);
  return {};
}

void retire_session_dir(const Dirs& dirs, const std::string& id, const nlohmann::json& end) {
  std::string ended = sessions_dir(dirs) + "/ended";
  (void)write_session_meta(ended + "/" + id + ".json", end);
  remove_tree_flat(session_dir(dirs, id));
  // A bounded table: past kMaxTombstones the oldest go (the ledger keeps every session's records).
  auto names = entries(ended);
  if (names.size() <= kMaxTombstones) return;
  std::vector<std::pair<std::int64_t, std::string>> by_age;  // mtime in ns, name
  for (auto& n : names) {
    struct stat st;
    if (::lstat((ended + "/" + n).c_str(), &st) == 0)
      by_age.push_back({static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, n});
  }
  std::sort(by_age.begin(), by_age.end());
  for (std::size_t i = 0; i + kMaxTombstones < by_age.size(); ++i) ::unlink((ended + "/" + by_age[i].second).c_str());
}

Result<UniqueFd> connect_session(const Dirs& dirs, const std::string& id) {
  auto meta = find_session(dirs, id);
  if (!meta) return meta.error();
  if (meta->value("state", "") != "running")
    return make_error("usage", "session " + id + " has ended (" + meta->value("ended_by", "?") +
                                   "); start a new one with 'sbx session start'");
  UniqueFd d(::open(session_dir(dirs, id).c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!d.ok() || !s.ok()) return sys_error(kStage, "cannot open session " + id);
  auto a = socket_addr(d.get());
  if (::connect(s.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a) != 0)
    return sys_error(kStage, "cannot reach session " + id + "'s server");
  return s;
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
