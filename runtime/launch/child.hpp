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
  // Init's own (fixed_rlimits, limits_plan.hpp): the program shares init's uid, and the kernel
  // checks a queued signal against the receiver's limit, so init's too caps what the program
  // can queue, to init (its blocked end signal) or to itself.
  std::vector<std::pair<int, rlim_t>> init_rlimits;
  // The capabilities the program keeps (caps.hpp CapMask: bit N is capability N); 0: none.
  std::uint64_t keep_caps = 0;
  // >= 0: the program's umask (a tenant's runs get 077: what it writes into a shared bind is its
  // host uid's alone, tenant.hpp); -1: inherited from the caller.
  int umask = -1;
  // > 0: init caps the ipc namespace's SysV IPC by this many bytes (shared memory, message queues,
  // semaphores: memory_fallback.hpp, sysv_ipc_caps), so a memory limit also bounds them where no
  // cgroup charges them.
  std::int64_t sysv_ipc_bytes = 0;
  // Init's fds, by number (handshake.hpp InitFds: the one list of what init keeps, with what each is).
  InitFds fds;
  // The supervisor's write end of the sync pipe. Init inherits a copy with sbx's fd table (clone
  // without CLONE_FILES) and closes it before it first waits (InitEnd::arm_parent_death): with
  // the supervisor's copy the only one left, the supervisor's death is EOF on fds.sync. Not kept.
  int supervisor_sync_fd = -1;
  // With fds.pty_sock >= 0, the size of the program's pty.
  struct winsize pty_size {};
  // Seccomp (runtime/linux/seccomp_policy.hpp): the program installed as the last step before execve
  // (empty: unconfined) and the policy's reference program (what the program child checks its own
  // last calls against, see child.cpp); the listener goes to the supervisor on fds.listener_sock.
  std::vector<struct sock_filter> seccomp_filter;
  const std::vector<struct sock_filter>* seccomp_reference = nullptr;
  // false: installed without a listener. A warm template's (RunRequest::template_host): the kernel
  // allows one listener per filter stack, and each call forked from the template installs its
  // own. The template's filter still notifies (a notification nobody listens for fails with
  // ENOSYS in the template), because of how stacked filters decide: the most restrictive action
  // wins, and of two notifications the newest filter's. A template filter that returned EPERM
  // itself would outrank the call's notification, and the call's refusals would never reach its
  // supervisor and record (test_mcp_template.py checks they do).
  bool seccomp_listener = true;
  // Egress proxy (network mode "proxy", fds.proxy_sock): the port of the listener init makes.
  int proxy_port = 0;
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
  // A warm pool's prepared interpreter (runtime/model/warm.hpp, warm_start.hpp): its driver's
  // argv, started as the program before "s"; the call then runs in it. Empty: none.
  std::vector<std::string> warm_argv;
};

// Runs in the freshly cloned child; never returns.
[[noreturn]] void run_init(const ChildConfig& cfg);
// run_init for clone(2)'s function-and-stack form (arg: the ChildConfig).
int init_entry(void* cfg);

}  // namespace sbx
