#pragma once
// `sbx mcp`'s loop: newline-delimited JSON-RPC on stdin/stdout (runtime/server/mcp_protocol.hpp for the
// messages), each tools/call in a sandbox of its own, supervised without ever blocking.
//
// Why a worker process per call instead of run_sandbox() in the server: run_sandbox supervises
// one sandbox on the calling thread, owns process-wide signal state while it does
// (signals.hpp), and leaves its record before it returns. A process of sbx's own per call
// (`sbx mcp-worker`, cli/mcp_cmd.cpp; forked by the fork server, fork_server.hpp, or re-exec'd)
// gets all of that per call for free, and the server only
// waits on pidfds: a slow, stuck or cancelled sandbox never holds the loop. The worker's stdin
// (the job) and stdout (its JSON response) are memfds, so no sandbox, worker or program ever holds
// sbx's own stdin or stdout, and the server writes and reads them without a pipe to drain.
//
// Cancellation (notifications/cancelled, stdin EOF, a signal to the server) sends the worker two
// different forwarded signals: the first is forwarded into the sandbox, the second makes the
// supervisor kill the sandbox at once (supervisor.cpp, on_signal), and the worker still writes the
// run's record. A worker is never killed once it holds a call: one still running kill_wait_ms later
// is logged and waited for (under load, killing it there left a started call without a record),
// and a server that is shutting down leaves such workers to finish their records by themselves.
#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/server/mcp_protocol.hpp"

namespace sbx::mcp {

// A started call: its process, a pidfd to wait on, and the memfd it writes its response to.
struct Worker {
  pid_t pid = -1;
  UniqueFd pidfd;
  UniqueFd response;
};

// Where a call gets its sandbox: a fresh `sbx mcp-worker` started for the call (ReexecLauncher),
// or a pooled worker whose sandbox was created ahead of time and only then gets the job
// (mcp_pool.hpp). The server neither knows nor cares which.
class SandboxLauncher {
 public:
  virtual ~SandboxLauncher() = default;
  // `job` is the worker's request (cli/mcp_cmd.cpp): {"tool": "run_code"|"pack", ...}.
  virtual Result<Worker> launch(const nlohmann::json& job) = 0;
  // Housekeeping the server's loop gives the launcher between events (a pool retires idle
  // sandboxes past their age, reaps them, refills): called after every wake-up; never blocks.
  virtual void tick() {}
  // How long the loop may sleep before tick() is due again (ms; -1: no deadline of its own).
  virtual int next_tick_ms() const { return -1; }
};

// Starts `argv` (`sbx [--state-dir DIR] mcp-worker ...`), forked by the fork server (UseForkServer,
// below) or forked and exec'd from /proc/self/exe: in_fd is
// its stdin, `response` (a memfd) its stdout, it gets a process group of its own (a terminal's
// Ctrl-C reaches the server, which cancels in order) and `pdeathsig` as its parent-death signal.
// The one spawn of both launchers: a cold worker (the job in a memfd) and a pooled one (a
// socket); SIGTERM for both: a worker cancels its run and still records it (mcp_pool.hpp).
Result<Worker> spawn_worker(const std::vector<std::string>& argv, int in_fd, UniqueFd response, int pdeathsig);

class ForkServer;
// While it lives, spawn_worker asks `forks` for each worker first (fork_server.hpp: a fork instead
// of an exec); null, or once that fork server has ended, each worker is forked and exec'd.
class UseForkServer {
 public:
  explicit UseForkServer(ForkServer* forks);
  UseForkServer(const UseForkServer&) = delete;
  UseForkServer& operator=(const UseForkServer&) = delete;
  ~UseForkServer();
};

// Starts `sbx [--state-dir DIR] mcp-worker` for each call (spawn_worker: forked by the fork
// server, else re-exec'd), the job on its stdin.
class ReexecLauncher : public SandboxLauncher {
 public:
  explicit ReexecLauncher(std::vector<std::string> argv) : argv_(std::move(argv)) {}
  Result<Worker> launch(const nlohmann::json& job) override;

 private:
  std::vector<std::string> argv_;
};

struct ServerConfig {
  std::vector<PackTool> packs;
  // Per pack name: the contexts the operator gave (declared name, host path), mounted read-only.
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> contexts;
  // Per pack name: the secrets the operator gave (declared name, "@FILE" or "env:VAR"): the
  // source, never the value, which each call's worker reads (run_pack_job).
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> secrets;
  std::string profile = "untrusted";
  std::size_t max_concurrent = 4;
  std::size_t max_queued = 256;  // beyond running + this many waiting, a call is refused (-32000)
  int progress_interval_ms = 1000;
  int kill_wait_ms = 10000;
  std::string instructions;
  // The profile's output limit per stream (kMaxCapturedStreamBytes when it sets none): what a
  // worker's response may hold, hence the largest one the server reads (worker_response_bounds).
  std::int64_t stream_limit_bytes = kMaxCapturedStreamBytes;
};

// Responses written but not yet read by the client, and those held in incomplete 2025-03-26
// batches (all of them together), in bytes: past this the server takes no call's response from
// its worker (it waits, finished, its response in its memfd), sends no progress notification and
// reads no request, until the client reads; a batch member whose response would take the held
// batches past it is answered with a tool error. So the server holds at most this plus one
// response, whatever the client does (man/sbx-mcp.1). Requests waiting for a slot have a budget
// of their own: kQueuedRequestBudget (mcp_protocol.hpp).
inline constexpr std::size_t kQueuedResponseBudget = 64u << 20;

// A pack tool's job less its records ({"tool": "pack", "profile", "dir", "contexts", "secrets"}):
// what every call of it sends its worker, and what its pooled sandboxes are built for.
nlohmann::json pack_job(const ServerConfig& cfg, const PackTool& pack);

// Serves until stdin reaches EOF, stdout breaks, or SIGINT/SIGTERM/SIGHUP arrives (blocked by the
// caller: main.cpp blocks them first thing), then cancels every call, waits for every worker, and
// returns 0. The forwarded signals must be blocked in the calling thread.
int serve(const ServerConfig& config, SandboxLauncher& launcher, int in_fd = 0, int out_fd = 1);

}  // namespace sbx::mcp
