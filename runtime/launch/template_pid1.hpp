#pragma once
// Pid 1 of a template's call forked ahead of it (man sbx-mcp, Templates: forks made ahead), from
// the moment its program is forked: `sbx template-pid1 ...`, exec'd by the Python process the
// template forked as the call's pid 1 (runtime/model/warm_template.py, _pooled_pid1). What that
// process still has to do is init's part of the pooled protocol (handshake.hpp, pool_job.hpp):
// wait for the program's "ready", say the sandbox is ready, wait for the call, write its files,
// make /code and /in read-only, give up its last capabilities, release the program and reap it.
// Done by a copy of the interpreter it would hold ~1 MiB of pages of its own for the whole idle
// wait (every object its code touches after the fork); exec'd sbx holds ~0.1 MiB, its text shared
// with every other sbx process (bench/README.md, Templates).
//
// argv: sbx template-pid1 REPORT SYNC GATE READY PROGRAM [HELD...]
//   REPORT  the call's report pipe (ChildMsg, to its worker)
//   SYNC    the worker's sync pipe: "s" and the call's job (pool_job.hpp), later its end byte
//   GATE    the write end of the pipe the program waits on: the call's argv, NUL-terminated words
//   READY   the read end of the program's "r" and its five capability sets (41 bytes)
//   PROGRAM its pid; HELD: forwarded signals pid 1 took before its program existed, for its group
// Its signal mask (SIGCHLD, the end signal and the forwarded ones blocked) is the exec'ing
// process's; its capabilities are CAP_SYS_ADMIN and CAP_SETPCAP, ambient across the exec.
#include "runtime/base/error.hpp"

namespace sbx {

inline constexpr const char* kTemplatePid1Command = "template-pid1";

// The binary a worker hands the template with each call, for a fork made ahead to exec: an O_PATH
// fd of this sbx on a detached bind of that file alone, read-only, nosuid and nodev, in a mount
// namespace the template has no capability over (ours as root; as another user, one made for it
// by a child in a user namespace of its own). The template holds CAP_SYS_ADMIN in its own user
// namespace and runs its preloads' code: a plain fd of the file on the host's mount would let it
// chmod, touch or set xattrs on the host binary through /proc/self/fd, which rootless is its
// owner's (made setuid, then run by anyone as that user). Made once per process and kept: the
// fork server makes it before it forks any worker (cli/mcp_cmd.cpp), so every worker has it.
// SBX_TEMPLATE_PID1 names another build of the same sbx to use instead (for sanitizer builds,
// which cannot start inside a memory-limited sandbox: tests/sanitize.sh; man sbx-mcp).
Result<int> template_pid1_binary();

// Never returns: exits 0 once the program's end is reported, 125 when the call could not start
// (a setup error reported first, when there is anyone to tell), 1 when it has no program to reap.
[[noreturn]] void template_pid1_main(int argc, char** argv);

}  // namespace sbx
