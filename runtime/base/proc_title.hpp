#pragma once
// What /proc/PID/cmdline (and so `ps`) shows for sbx while it runs.
//
// A shared init (clone.hpp) runs in the supervisor's address space, and a forked one in a copy of
// it: /proc/1/cmdline inside the sandbox is read from the same argv area as the supervisor's own
// /proc/PID/cmdline on the host, and cmdline is world-readable (no ptrace check guards it). sbx's
// argv names host paths: the binary, the state dir, bind and input sources, the file given to
// `--secret NAME=@FILE`. The kernel cannot give the two views different contents (PR_SET_MM moves
// the area for the whole address space, and needs CAP_SYS_RESOURCE in the initial namespace), so
// the area itself is rewritten once the command line is parsed: a title made of sbx's command
// words and the program's argv, which the program sees anyway. The full invocation is in the trace
// record.
#include <string>

namespace sbx {

// Overwrites the argv strings in place with `title` and zeroes the rest of the area. The area's last
// byte is left non-zero, the setproctitle(3) convention: the kernel then reports the area up to the
// first NUL (fs/proc/base.c, get_mm_cmdline), i.e. exactly `title` (truncated to fit), not the
// zero padding. argv[i] must not be read afterwards (copy what is needed first). The area is the
// one the first call was given: a worker forked by `sbx mcp-fork-server` runs main()'s commands
// again on an argv of its own (runtime/server/fork_server.hpp), while /proc shows the area its
// process was exec'd with, the fork server's.
void set_proc_title(int argc, char** argv, const std::string& title);

}  // namespace sbx
