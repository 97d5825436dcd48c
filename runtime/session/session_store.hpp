#pragma once
// Where sessions live (sbx session; session_server.hpp): <state>/sessions/<id>/ for a running one
// (mode 0700: session.json, the control socket ctl.sock, the runner's log), and a small
// <state>/sessions/ended/<id>.json once it ended. A tenant's sessions live in the tenant's store,
// so one tenant cannot even name another's. Ids are 128 random bits in hex: unguessable.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/paths.hpp"

namespace sbx {

inline constexpr std::size_t kMaxSessionMetaBytes = 64u << 10;
// Running sessions per store (a user's, or a tenant's) unless SBX_MAX_SESSIONS lowers it.
inline constexpr int kDefaultMaxSessions = 32;
// Ended sessions' tombstones kept per store (`ls --all`, `show`, an ended id's refusal); the
// oldest go past it.
inline constexpr std::size_t kMaxTombstones = 1024;

std::string sessions_dir(const Dirs& dirs);
std::string session_dir(const Dirs& dirs, const std::string& id);
std::string new_session_id();
bool valid_session_id(const std::string& id);

// The most running sessions a store may hold: SBX_MAX_SESSIONS when set (1..kDefaultMaxSessions),
// else kDefaultMaxSessions.
Result<int> max_sessions();

// sbx reads back, deletes in and connects through what its store holds, so nobody but sbx's user
// (or root) may be able to change it: check_private_dir of the state dir and of its sessions/
// (stage "usage": whose it is, or its mode, and the chown or chmod that fixes it). Every function
// below checks it first; a command checks it before it does anything else.
Status check_session_store(const Dirs& dirs);

// Makes <state>/sessions/<id>/ for a new session and its listening socket, under the store's
// lock, unless `max` sessions are running there already (stage "sessions": how many, and how to
// end one). A session counts from the moment its socket listens.
Result<UniqueFd> create_session_dir(const Dirs& dirs, const std::string& id, int max);

// What `ls` and `show` print: session.json of each running session (with "state": "running"),
// and with `all` the ended ones (their tombstones) too. Newest first. What is there but is no
// session's (a symlink or a FIFO for a directory or a file, another user's directory, a file
// that is not a JSON object of that id) is left alone and named in `skipped`, one line each.
// An error: the store itself is not private (check_session_store) or not a directory.
Result<std::vector<nlohmann::json>> list_sessions(const Dirs& dirs, bool all,
                                                  std::vector<std::string>* skipped = nullptr);
// One session's: running, ended, or an error naming the id as unknown (stage "usage"), or naming
// the file that is there but no session's.
Result<nlohmann::json> find_session(const Dirs& dirs, const std::string& id);

// <dir>/<name> (a session's end.json): a regular file, read without following a link or waiting
// on a FIFO, bounded, a JSON object; ENOENT as the error's errno when there is none.
Result<nlohmann::json> read_session_file(const std::string& dir, const std::string& name);

// Writes a session's meta file atomically (0600), never through a symlink.
Status write_session_meta(const std::string& path, const nlohmann::json& meta);
// At the session's end: its tombstone, and its directory removed.
void retire_session_dir(const Dirs& dirs, const std::string& id, const nlohmann::json& end);

// A connection to a running session's server: through the directory's fd, so that the socket's
// path length never matters. An error names the id (not running, or not this user's), or says
// that whoever listens there is not sbx's user (SO_PEERCRED): then nothing was sent.
Result<UniqueFd> connect_session(const Dirs& dirs, const std::string& id);
// Whether a server listens on <dir>/ctl.sock (without blocking; dir opened without following a
// link): a session whose server is gone (killed) has none.
bool session_server_answers(const std::string& dir);
// The server's listening socket at <dir>/ctl.sock (non-blocking, close-on-exec).
Result<UniqueFd> listen_session(const std::string& dir);

}  // namespace sbx
