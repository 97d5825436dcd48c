#pragma once
// Who is at the other end of a unix socket reached by its name. A name in a directory that other
// processes can write to may be taken by any of them: a socket's owner and mode say who may
// connect, not who listens. The kernel's record of the listener, taken at its listen()
// (SO_PEERPIDFD, or SO_PEERCRED before Linux 6.5), does, and a process's ancestry says whether it is one we started (a warm template's
// driver: runtime/server/mcp_template.cpp, seal; runtime/launch/sandbox.cpp, connect_template).
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"

namespace sbx {

// A SOCK_SEQPACKET connection, never waited for (a full backlog is EAGAIN), to the socket `name`
// in the directory held by `dirfd`, reached through that fd (/proc/self/fd/N/NAME), so that no
// rename of the directory, nor a link put in its place, leads it elsewhere. `shown` names the
// socket in an error, reported at the caller's `stage`.
Result<UniqueFd> connect_unix_at(int dirfd, const std::string& name, const std::string& shown, Stage stage);

// The process that made a connected socket's peer listen, as the kernel recorded it at its
// listen(). Where the kernel hands out its pidfd (SO_PEERPIDFD, Linux 6.5) that is this very
// process: `id` is then its pidfd's inode, which no other process ever has while the system runs
// (pidfs, Linux 6.9; 0 before), and `pid` its number now, an error if it has ended. Before 6.5
// only the number it had (SO_PEERCRED): a listener that ended leaves it to be reused by another
// process, which the caller cannot tell apart (man sbx-mcp, Templates).
struct UnixPeer {
  pid_t pid = 0;
  std::uint64_t id = 0;
  UniqueFd pidfd;  // (SO_PEERPIDFD) to confirm that it still lives: alive()
  bool alive() const;
};
// `with_pid` false: `pid` left 0 where `id` is known (it costs a read of /proc: a call's worker
// compares `id` alone). Errors are reported at the caller's `stage`.
Result<UnixPeer> unix_peer(int sock, Stage stage, bool with_pid = true);

// A pidfd's process's pid in our pid namespace, from /proc/self/fdinfo: -1 once it has ended, 0
// when it is outside our pid namespace; nullopt if the kernel does not say.
std::optional<pid_t> pidfd_pid(int pidfd);

// The parent pid in the text of /proc/PID/stat (its field 4, after the ')' that ends the
// command's name, which may hold any byte); nullopt when it is not there.
std::optional<pid_t> parse_stat_ppid(std::string_view stat);

// Whether `pid` is `ancestor` or one of its descendants, at most `max_depth` generations below
// it, by the parents /proc says now. A process that has gone, or a /proc that cannot be read, is
// no descendant.
bool descends_from(pid_t pid, pid_t ancestor, int max_depth);

}  // namespace sbx
