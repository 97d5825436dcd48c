#pragma once
// `sbx mcp --pool N`: warm pools of sandboxes, one per tool (the launcher seam of mcp_server.hpp):
// run_code's, built for the server's profile, and each pack tool's, built for that pack (PoolRouter).
//
// Each pooled sandbox is a `sbx mcp-worker --pooled` process started ahead of any call: it builds
// the whole sandbox for the server's profile and its image, or a pack's (namespaces, root, /dev, /proc, tmpfs
// mounts, cgroup, seccomp) and waits, init paused before the program's execve (run_request.hpp,
// RunRequest::pool.await_call), for the job to arrive on its stdin — a unix socket on which the server
// sends one memfd holding the job (SCM_RIGHTS: the server never blocks on a slow reader). Init
// writes the call's code and inputs from inside and starts the program (pool_job.hpp). One call
// per sandbox; the server starts a replacement as it hands one out (a fork and exec: the build
// itself runs in the new worker, beside the loop).
//
// A call the pool cannot serve runs cold: a tool with no pool (PoolRouter), an empty pool (every
// pooled sandbox in use or still being made is not waited for), or a request the sandbox was not
// made for (pool_refusal, pool_job.hpp; a pack edited since: pack_run.hpp, run_pack_pooled: the
// worker then runs it cold itself). Its record says why
// ("pool": {"hit": false, "reason": ...}); a pooled run's says {"hit": true, "waited_ms", ...}.
//
// Idle sandboxes never outlive the server: closing the socket (the server's exit, or its death:
// the kernel closes it) discards them, and a worker's parent-death signal is SIGTERM (its init's
// is SIGKILL, tied to the worker: child.cpp), so a SIGKILLed server leaves nothing either. Not
// SIGKILL for the worker: a call may already wait in its socket while it still builds (it is
// handed the call then), and must be recorded whatever ends the server. A worker whose sandbox
// died or was disturbed before hand-out runs a call already sent cold (recorded); with none, it
// exits without a record, and is reaped at hand-out. A signal that reaches a pooled worker before
// its hand-out is left for the hand-out to see (sandbox.cpp, prepare_signals), never taken as the
// end of its build with a call unread.
//
// A discarded sandbox is retired off the loop (tick()): its socket closed, its worker reaped when
// it exits, killed if it does not within kRetireGraceMs. A killed worker cannot remove its run
// cgroup, so each worker names it on its socket once built ("ready PATH") and the server removes
// it. A worker whose build failed says so ("failed WHY"): it gets no call, and the call runs in
// the next sandbox or cold, recorded with WHY. Sandboxes idle past max_idle are retired and
// rebuilt: what was checked or read at build (the image's seal, the profile, the tenant's policy)
// is never older than that at hand-out; the profile and the tenant's policy are also compared at
// hand-out (pool_refusal; the worker's tenant key), so an edit is never missed.
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/server/mcp_server.hpp"

namespace sbx::mcp {

// How long a pooled sandbox may wait idle before it is retired and rebuilt (`sbx mcp
// --pool-max-idle SECONDS`): the image's seal, the profile's and the tenant's text are taken when
// the sandbox is built, so this bounds how old what a call gets may be.
inline constexpr int kDefaultPoolMaxIdleS = 300;
// A retired worker (its socket closed: it discards its sandbox, removes its run cgroup and exits)
// that has not exited this long after is killed, and its run cgroup removed by the server.
inline constexpr int kRetireGraceMs = 3000;
// How long after a hand-out the pool starts its replacement (refill_due_us_ says why not at once;
// bench/README.md, "The warm pool", has the numbers). A burst that empties the pool runs cold
// either way: a sandbox takes longer than this to build.
inline constexpr int kRefillDelayMs = 20;
// The pause after a pooled sandbox whose build failed, before its pool builds again (doubled at
// each further failure, up to the maximum): PoolLauncher::refill.
inline constexpr int kBuildBackoffMs = 1000;
inline constexpr int kMaxBuildBackoffMs = 60'000;
// The most pooled sandboxes one server keeps idle, all its pools together: --pool N for each of
// its tools (run_code first, then the packs in tools/list order) until this is reached; a pack
// left without one runs cold, its record saying why.
inline constexpr std::size_t kMaxPooledSandboxes = 64;
// How long `sbx mcp --pool` waits at its start for the first prepared interpreter (PoolLauncher::
// await_first): a preload of a large library (numpy: ~0.1 s here, seconds under emulation).
inline constexpr int kWarmCheckMs = 60'000;

// What a pooled worker tells the server on its socket once it is ready or broken (one line each,
// at most kMaxWorkerNoteBytes): "ready CGROUP\n" (CGROUP: its run cgroup's absolute path, or "-"),
// or "failed WHY\n" (its sandbox could not be built: the server hands it no call, but one sent
// before the note arrived is still run, cold, by the worker itself).
inline constexpr std::size_t kMaxWorkerNoteBytes = 4096;
// Appends what a worker said on its socket to `note`, never waiting, up to kMaxWorkerNoteBytes in
// all (a pooled worker's, and a warm template's: mcp_template.hpp).
void read_worker_note(int sock, std::string& note);
// Whether a worker's pidfd says it has exited; never waits.
bool worker_exited(int pidfd);
// The pause after a failed build, given the last one (0: none): kBuildBackoffMs, doubled at each
// further failure up to kMaxBuildBackoffMs. A pool's and a template's (mcp_template.hpp).
inline int next_build_backoff_ms(int last_ms) {
  return std::min(last_ms == 0 ? kBuildBackoffMs : 2 * last_ms, kMaxBuildBackoffMs);
}
std::string worker_note_ready(const std::string& cgroup_path);
std::string worker_note_failed(const std::string& why);
// The run cgroup a note names: "" unless it is an absolute path below /sys/fs/cgroup/ without
// "." or ".." components (the server removes only such a directory).
std::string cgroup_of_note(const std::string& note);

class PoolLauncher : public SandboxLauncher {
 public:
  // worker_argv: `sbx [--state-dir DIR] mcp-worker --pooled --profile P`; size: idle sandboxes kept;
  // max_idle_ms: the oldest an idle sandbox may be at hand-out (older ones are retired and rebuilt).
  // first_words: what each worker reads first on its socket, before its job, made for it as it
  // is spawned: a template call's one-time token, which must not be in the workers' argv
  // (mcp_worker.hpp, read_template_key); "" from it fails the spawn, and the pool builds again
  // after a back-off, as after a failed build.
  PoolLauncher(std::vector<std::string> worker_argv, std::size_t size, SandboxLauncher& cold,
               std::int64_t max_idle_ms = kDefaultPoolMaxIdleS * 1000LL,
               std::function<std::string()> first_words = nullptr);
  ~PoolLauncher() override;
  PoolLauncher(const PoolLauncher&) = delete;
  PoolLauncher& operator=(const PoolLauncher&) = delete;
  Result<Worker> launch(const nlohmann::json& job) override;
  // Reaps retired workers (killing those past kRetireGraceMs), retires idle sandboxes past their
  // age, removes the run cgroups a killed worker left, and refills the pool.
  void tick() override;
  int next_tick_ms() const override;
  // Starts workers until `size` are idle (or being made). After a hand-out it runs
  // kRefillDelayMs later, from tick(): see refill_due_us_.
  void refill();
  std::size_t idle() const { return idle_.size(); }
  // Waits at most timeout_ms for the first pooled sandbox's note (`sbx mcp`'s start, when the
  // profile prepares an interpreter: model/warm.hpp). "" when it is ready; else why it failed,
  // or that it was not ready in time.
  std::string await_first(int timeout_ms);
  // Closes every idle sandbox's socket (each worker then discards its sandbox and exits); the
  // destructor does it too, then waits for them.
  void discard_idle();
  // Hand out only sandboxes that said "ready" (a profile's prepared interpreter, model/warm.hpp:
  // its preloads may take seconds, and a call that waited for them would count that time as its
  // own); with none ready the call runs cold, its record saying why.
  void prepared_only(bool on) { prepared_only_ = on; }
  // Builds no more sandboxes and discards the idle ones (a template's pool whose template was
  // replaced: mcp_template.hpp); tick() goes on reaping them until drained().
  void retire_all() {
    size_ = 0;
    refill_due_us_ = 0;
    discard_idle();
  }
  bool drained() const { return idle_.empty() && retiring_.empty() && stale_cgroups_.empty(); }

 private:
  struct Idle {
    pid_t pid = -1;
    UniqueFd pidfd, sock, response;
    std::int64_t born_us = 0;
    std::string note;  // what the worker said on its socket so far
  };
  struct Retiring {
    pid_t pid = -1;
    UniqueFd pidfd;
    std::int64_t kill_at_us = 0;
    std::string cgroup;  // its run cgroup, removed here if the worker had to be killed
    bool killed = false;
  };
  Result<Idle> spawn();
  // Closes its socket (EOF: the worker discards its sandbox) and waits for it off the loop.
  void retire(Idle& w, const std::string& why);
  static void read_note(Idle& w);
  void remove_stale_cgroups();

  std::vector<std::string> argv_;
  std::size_t size_;
  SandboxLauncher& cold_;
  std::int64_t max_idle_us_;
  std::deque<Idle> idle_;
  std::vector<Retiring> retiring_;
  std::vector<std::pair<std::string, int>> stale_cgroups_;  // path, tries left
  std::size_t spawn_failures_ = 0;
  // After a build failure no build until backoff_until_us_ (kBuildBackoffMs, doubled at each
  // further failure up to kMaxBuildBackoffMs, reset by a hand-out): refill() says why.
  int build_backoff_ms_ = 0;
  std::int64_t backoff_until_us_ = 0;
  void back_off();  // no build before the next step of the back-off (next_build_backoff_ms)
  bool prepared_only_ = false;
  std::function<std::string()> first_words_;
  // When the refill after a hand-out is due (0: none pending). A new worker builds its sandbox
  // (fork and exec of sbx, clone, namespaces, root: milliseconds of CPU) and, started at the
  // hand-out, it competed for the CPUs with the call it was replacing, whose program was just
  // starting: on this project's 2-core machine that moved the pooled start's p50 and p99.
  std::int64_t refill_due_us_ = 0;
};

// `sbx mcp --pool N` serves every tool from pools: one PoolLauncher per pool key (key_of: run_code,
// or a pack tool's directory), each keeping N sandboxes built for it (run_code: the profile's
// configuration; a pack: its image, its private copy at /pack, its contexts' copies, its limits:
// mcp_worker.hpp, build_and_wait_pack). A call whose key has no pool runs cold, its record saying
// why (unpooled: a pack given secrets, which are read at each call and exist only in that call's
// sandbox).
class PoolRouter : public SandboxLauncher {
 public:
  explicit PoolRouter(SandboxLauncher& cold) : cold_(cold) {}
  ~PoolRouter() override;
  PoolRouter(const PoolRouter&) = delete;
  PoolRouter& operator=(const PoolRouter&) = delete;
  static std::string key_of(const nlohmann::json& job);
  void add(const std::string& key, std::unique_ptr<PoolLauncher> pool);
  void unpooled(const std::string& key, const std::string& why) { unpooled_[key] = why; }
  // A launcher of another kind for `key` (run_code's warm template: mcp_template.hpp), owned by
  // the caller and outliving the router.
  void route(const std::string& key, SandboxLauncher* launcher) { others_[key] = launcher; }
  PoolLauncher* find(const std::string& key);
  Result<Worker> launch(const nlohmann::json& job) override;
  void tick() override;
  int next_tick_ms() const override;

 private:
  SandboxLauncher& cold_;
  std::map<std::string, std::unique_ptr<PoolLauncher>> pools_;
  std::map<std::string, std::string> unpooled_;
  std::map<std::string, SandboxLauncher*> others_;
};

// A cold run of `job` by `cold`, its record's pool note saying why it was not pooled.
Result<Worker> launch_cold(SandboxLauncher& cold, const nlohmann::json& job, const std::string& why);

}  // namespace sbx::mcp
