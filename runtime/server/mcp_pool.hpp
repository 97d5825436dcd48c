#pragma once
// `sbx mcp --pool N`: a warm pool of sandboxes for run_code (the launcher seam of mcp_server.hpp).
//
// Each pooled sandbox is a `sbx mcp-worker --pooled` process started ahead of any call: it builds
// the whole sandbox for the server's profile and its image (namespaces, root, /dev, /proc, tmpfs
// mounts, cgroup, seccomp) and waits, init paused before the program's execve (sandbox.hpp,
// RunRequest::await_call), for the job to arrive on its stdin — a unix socket on which the server
// sends one memfd holding the job (SCM_RIGHTS: the server never blocks on a slow reader). Init
// writes the call's code and inputs from inside and starts the program (pool_job.hpp). One call
// per sandbox; the server starts a replacement as it hands one out (a fork and exec: the build
// itself runs in the new worker, beside the loop).
//
// A call the pool cannot serve runs cold: a tool other than run_code, an empty pool (every pooled
// sandbox in use or still being made is not waited for), or a request the sandbox was not made
// for (pool_refusal, pool_job.hpp: the worker then runs it cold itself). Its record says why
// ("pool": {"hit": false, "reason": ...}); a pooled run's says {"hit": true, "waited_ms", ...}.
//
// Idle sandboxes never outlive the server: closing the socket (the server's exit, or its death:
// the kernel closes it) discards them, and an idle worker's parent-death signal is SIGKILL (its
// init's too: child.cpp), so a SIGKILLed server leaves nothing either. A worker whose sandbox
// died or was disturbed before hand-out exits without a record, and is dropped at hand-out.
#include <sys/types.h>

#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "runtime/server/mcp_server.hpp"

namespace sbx::mcp {

class PoolLauncher : public SandboxLauncher {
 public:
  // worker_argv: `sbx [--state-dir DIR] mcp-worker --pooled --profile P`; size: idle sandboxes kept.
  PoolLauncher(std::vector<std::string> worker_argv, std::size_t size, SandboxLauncher& cold);
  ~PoolLauncher() override;
  PoolLauncher(const PoolLauncher&) = delete;
  PoolLauncher& operator=(const PoolLauncher&) = delete;
  Result<Worker> launch(const nlohmann::json& job) override;
  // Starts workers until `size` are idle (or being made); called after each hand-out.
  void refill();
  std::size_t idle() const { return idle_.size(); }

 private:
  struct Idle {
    pid_t pid = -1;
    UniqueFd pidfd, sock, response;
  };
  Result<Idle> spawn();
  void drop(Idle& w, const std::string& why);

  std::vector<std::string> argv_;
  std::size_t size_;
  SandboxLauncher& cold_;
  std::deque<Idle> idle_;
  std::size_t spawn_failures_ = 0;
};

}  // namespace sbx::mcp
