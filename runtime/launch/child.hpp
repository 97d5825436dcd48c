#pragma once
// The child side of a run: everything that happens inside the new namespaces, as an ordered list
// of named stages. Any stage that fails sends a structured ChildMsg {stage, errno, message} on a
// close-on-exec pipe and exits; the supervisor turns it into "setup failed at <stage>: ...".
//
// Two processes live inside: sbx's init (pid 1 of the new pid namespace) builds the sandbox, then
// forks the program (pid 2). Init reaps orphans, forwards signals from the supervisor, and when
// the program exits it kills and reaps everything else in the pid namespace, then reports the
// program's wait status and usage — so the report means "the sandbox is empty" — and exits.
#include <linux/filter.h>
#include <sys/ioctl.h>
#include <sys/resource.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/launch/handshake.hpp"
#include "runtime/linux/mounts.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx {

struct ChildConfig {
  IdentityPlan identity;
  MountPlan mounts;
  std::string hostname;
  std::vector<std::string> argv;
  std::vector<std::string> envp;  // NAME=VALUE, the program's whole environment
  std::vector<std::pair<int, rlim_t>> rlimits;
  // The capabilities the program keeps (caps.hpp CapMask: bit N is capability N); 0: none.
  std::uint64_t keep_caps = 0;
  // >= 0: the program's umask (a tenant's runs get 077: what it writes into a shared bind is its
  // host uid's alone, tenant.hpp); -1: inherited from the caller.
  int umask = -1;
  // > 0: init caps the ipc namespace's SysV shared memory at this many bytes (kernel.shmmax and
  // shmall), so a memory limit also bounds it where no cgroup charges it.
  std::int64_t sysv_shm_bytes = 0;
  // Read end: the supervisor writes 'g' once the id maps are in place, then 's' once the image's
  // seal is checked (at once without an image); init builds the sandbox in between.
  int sync_fd = -1;
  // The supervisor's write end of that pipe. Init inherits a copy with sbx's fd table (clone
  // without CLONE_FILES) and closes it before it first waits (InitEnd::arm_parent_death): with
  // the supervisor's copy the only one left, the supervisor's death is EOF on sync_fd.
  int supervisor_sync_fd = -1;
  int msg_fd = -1;   // write end of the ChildMsg pipe (close-on-exec)
  int out_fd = -1;   // write ends of the stdout/stderr pipes
  int err_fd = -1;
  // The program's stdin (stdin_relay.hpp): the read end of the pipe the supervisor feeds, or -1
  // for the sandbox's /dev/null. With pty_sock >= 0 the program gets a pty of the sandbox's
  // devpts on fds 0, 1 and 2 instead (out_fd and err_fd unused), sized pty_size; init sends its
  // master to the supervisor on pty_sock.
  int in_fd = -1;
  int pty_sock = -1;
  struct winsize pty_size {};
  // Seccomp (runtime/linux/seccomp_policy.hpp): the program installed as the last step before execve
  // (empty: unconfined), the policy's reference program (what the program child checks its own
  // last calls against, see child.cpp), and init's socket on which it hands the program child's
  // listener fd to the supervisor.
  std::vector<struct sock_filter> seccomp_filter;
  const std::vector<struct sock_filter>* seccomp_reference = nullptr;
  int seccomp_sock = -1;
  // Egress proxy (network mode "proxy"): init's end of the socketpair on which it sends the
  // listening socket it made in the sandbox's netns (net.hpp); -1 in mode "none".
  int proxy_sock = -1;
  int proxy_port = 0;
  // Init's end of the socketpair on which it sends the O_PATH fd of /out once the root is built.
  // The fd waits in the socket until the supervisor reads it after the run (artifact_export.hpp).
  int out_sock = -1;
  // Init runs in the supervisor's address space (sandbox.cpp, "shared init"): the supervisor is
  // blocked from clone until kStarted, and the supervisor, not init, makes the shared address
  // space non-dumpable (clone.hpp, NonDumpableWhileShared).
  bool shared_memory = false;
  // A shared init's program child runs on this stack (clone.hpp, SharedInitStack); a forked init
  // maps one itself.
  void* program_stack_top = nullptr;
  // A warm pool's sandbox (pool_job.hpp): after "s" the sync pipe brings the call's argv and files,
  // which init writes under kPoolDirs itself before it starts the program. Never a shared init.
  bool pool_job = false;
};

// Runs in the freshly cloned child; never returns.
[[noreturn]] void run_init(const ChildConfig& cfg);
// run_init for clone(2)'s function-and-stack form (arg: the ChildConfig).
int init_entry(void* cfg);

}  // namespace sbx
