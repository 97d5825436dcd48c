#pragma once
// Who is at the other end of a unix socket reached by its name. A name in a directory that other
// processes can write to may be taken by any of them: a socket's owner and mode say who may
// connect, not who listens. The kernel's record of the listener (SO_PEERCRED, taken at its
// listen()) does, and a process's ancestry says whether it is one we started (a warm template's
// driver: runtime/server/mcp_template.cpp, seal; runtime/launch/sandbox.cpp, connect_template).
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"

namespace sbx {

// A SOCK_SEQPACKET connection, never waited for (a full backlog is EAGAIN), to the socket `name`
// in the directory held by `dirfd`, reached through that fd (/proc/self/fd/N/NAME), so that no
// rename of the directory, nor a link put in its place, leads it elsewhere. `shown` names the
// socket in an error.
Result<UniqueFd> connect_unix_at(int dirfd, const std::string& name, const std::string& shown);

// The pid (in our pid namespace) of the process that made a connected socket's peer listen;
// an error when the kernel has none (a listener in a pid namespace we cannot see, or gone).
Result<pid_t> unix_peer_pid(int sock);

// The parent pid in the text of /proc/PID/stat (its field 4, after the ')' that ends the
// command's name, which may hold any byte); nullopt when it is not there.
std::optional<pid_t> parse_stat_ppid(std::string_view stat);

// Whether `pid` is `ancestor` or one of its descendants, at most `max_depth` generations below
// it, by the parents /proc says now. A process that has gone, or a /proc that cannot be read, is
// no descendant.
bool descends_from(pid_t pid, pid_t ancestor, int max_depth);

}  // namespace sbx
