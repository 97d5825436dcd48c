#pragma once
// Warm templates (issue 34; a profile's `"warm": {"interpreter": "python3", "preload": [...],
// "mode": "template"}`, model/warm.hpp): `sbx mcp --pool N` serves run_code calls in copy-on-write
// forks of one prepared interpreter instead of a sandbox per call.
//
// The template is a sandbox of its own, built once for (profile, image, preload list): a
// `sbx mcp-worker --template-host DIR` process runs it as an ordinary supervised run of the
// profile whose program is python3 running the driver (runtime/model/warm_template.py), which
// imports the preloads and listens on DIR/sock (DIR: a private 0700 directory in $TMPDIR,
// bound at /run/sbx-template). What it holds beyond a cold sandbox of that profile: CAP_SYS_ADMIN and
// CAP_SETPCAP in its own user namespace and a filter that also allows mount (new mounts,
// recursive binds and read-only remounts only), sethostname and unshare without CLONE_NEWUSER
// (kTemplateSeccomp), which the driver uses for each call and each call gives up before its code
// runs. The template never runs a call's code.
//
// A call is an ordinary `sbx mcp-worker` (the cold launcher's), whose job names the template: it
// plans the call as a cold one and supervises it alike, but spawns it by sending init's ends of
// its handshake and the job to the template (sandbox.cpp, spawn_from_template), which forks the
// call into fresh mount, network, ipc, uts, pid and cgroup namespaces (fresh /tmp, /out, /in,
// /code, /dev/shm, ptys, /proc), moved by the worker into the call's own run cgroup; its pid 1
// drops every capability (bounding set too), sets no_new_privs, installs the call's own filter
// (the profile's policy, stacked on the template's) with the worker as its listener, reseeds
// the generators the preloads seeded, and runs the code as a fresh __main__. The call's record
// says "sandbox": {"made_by": "template", "template": {"digest", "run_id"}}; the template's own
// record (written when it ends) carries the same digest and run id.
//
// The template is rebuilt when it dies and when it is older than the pool's max idle (its image
// seal and profile are taken at build); an old one still serving calls is stopped after
// kTemplateDrainMs (or sooner past kMaxTemplates). A call made while no template is ready runs cold, its record
// saying why; so does a call whose profile changed since the template was built (mcp_worker.cpp).
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/server/mcp_pool.hpp"
#include "runtime/server/mcp_server.hpp"
#include "runtime/server/mcp_worker.hpp"

namespace sbx::mcp {

// How long a retired template may keep serving the calls already forked from it before it is
// stopped (which ends them: they live in its pid namespace). Longer than any call's timeout
// should be; a call still running then is killed, and recorded by its own worker.
inline constexpr int kTemplateDrainMs = 600'000;
// The most templates one server keeps: the current one and those retired but still draining
// (a short --pool-max-idle would otherwise stack them); past it the oldest is stopped.
inline constexpr std::size_t kMaxTemplates = 4;

// What the template host says on its socket, one line each: "template RUN_ID DIGEST KEY" as it
// starts, then the driver's own "ready" or "failed WHY". KEY (kTemplateKeyBytes, as hex, made by
// the host for this template alone) is what the server proves itself to the driver with, once
// (TemplateLauncher::seal; serve_template_host says why).
struct TemplateNote {
  std::string run_id, digest, key;
  bool ready = false;
  std::string failed;  // "" unless the driver (or the host) said why it could not start
};
TemplateNote parse_template_note(const std::string& text);

// A template's control directory (mkdtemp in $TMPDIR, named sbx-template.*), held open from its
// making: what seals or removes it acts on that directory, never on whatever its name leads to
// later. $TMPDIR is usually /tmp, where anyone may take a name that was made free: a removal by
// path, as root, followed a link put there in its place. Removed (its socket, then itself, if its
// name still leads to it) as it is destroyed; nothing but the driver's socket is ever in it.
class ControlDir {
 public:
  ControlDir() = default;
  // `path`: a directory of this process's euid named sbx-template.*, not a link.
  static Result<ControlDir> open(const std::string& path);
  ControlDir(ControlDir&&) noexcept = default;
  ControlDir& operator=(ControlDir&& o) noexcept;
  ControlDir(const ControlDir&) = delete;
  ControlDir& operator=(const ControlDir&) = delete;
  ~ControlDir() { remove(); }
  int fd() const { return dir_.get(); }
  const std::string& path() const { return path_; }
  void remove();
  // Whether its name still leads to it (not to a link, nor to another directory put there).
  bool named() const;
  // Closed, and left where it is (its owner removes it).
  void disown();

 private:
  UniqueFd parent_, dir_;
  std::string path_, name_;
};

class TemplateLauncher : public SandboxLauncher {
 public:
  // host_argv: `sbx [--state-dir DIR] mcp-worker --profile P`; the launcher adds
  // --template-host DIR. control_root: where each template's DIR is made (mkdtemp, 0700: $TMPDIR
  // or /tmp; never the state dir, which no sandbox may write). pooled_argv: `sbx ... mcp-worker
  // --pooled --profile P`, to which the launcher adds --from-template JSON for the calls forked
  // ahead of their request (pool_size of them, 0: none; see PooledForks below).
  TemplateLauncher(std::vector<std::string> host_argv, std::string control_root, SandboxLauncher& cold,
                   std::int64_t max_idle_ms, std::vector<std::string> pooled_argv = {}, std::size_t pool_size = 0);
  ~TemplateLauncher() override;
  TemplateLauncher(const TemplateLauncher&) = delete;
  TemplateLauncher& operator=(const TemplateLauncher&) = delete;
  Result<Worker> launch(const nlohmann::json& job) override;
  void tick() override;
  int next_tick_ms() const override;
  // Builds the first template and waits at most timeout_ms for it: "" when it is ready, else why
  // not (a preload missing from the image: the driver's own message).
  std::string await_first(int timeout_ms);

 private:
  struct Host {
    pid_t pid = -1;
    UniqueFd pidfd, sock, response;
    // Its control directory: removed when it is reaped; by the host as it ends only if this
    // server is gone (until then the workers connect to its socket by name).
    ControlDir dir;
    std::string note;  // what it said so far
    std::int64_t born_us = 0, stop_at_us = 0;
    std::int64_t retired_us = 0;  // when a newer template took its place (it drains from then)
    bool stopping = false;
    bool sealed = false;  // seal() ran (its directory taken back, its listener checked; a failure stopped it)
    // The driver, which listens on the socket (seal()): its pid, and its pidfd's inode where the
    // kernel has one (unix_peer.hpp, UnixPeer).
    pid_t listener_pid = 0;
    std::uint64_t listener_id = 0;
    // The socket the driver listens on (seal()): a listener is bound to its own file, so another
    // at its name is another file (socket_replaced).
    dev_t sock_dev = 0;
    ino_t sock_ino = 0;
    // The server's control connection to the driver (seal(): the template's key proves it the
    // server's, once), on which each call's token is announced (call_token).
    UniqueFd ctl;
    std::string run_id;  // once sealed
  };
  Status start();
  void read_note(Host& h);
  // Once the driver is ready: root, the directory and its socket root's again; and the socket's
  // listener must be the driver. "" if so; else why not (and the template is stopped): it is
  // not, or the directory's name no longer leads to the directory made.
  std::string seal(Host& h, const TemplateNote& n);  // n: h.note, parsed
  // Rootless, a sealed template's directory stays the caller's, whose other sandboxes may reach
  // it: why its socket is no longer the one its driver listens on (the workers then refuse it,
  // and the calls run cold), else "". Two fstats: no connection, nothing to wait for.
  std::string socket_replaced(const Host& h) const;
  // A one-time token for one call to the sealed template whose run id is `run_id`: its SHA-256
  // is sent to the driver first (a non-blocking send on its control connection), and the call's
  // worker sends the token with its job (warm_template.py, _spend_token). "" when the driver
  // cannot be told (gone, or not reading): the call runs cold.
  std::string call_token(const std::string& run_id);
  void stop(Host& h, const std::string& why);
  // No new template before the next step of the back-off (next_build_backoff_ms).
  void back_off();
  void reap(Host& h);

  std::vector<std::string> argv_;
  std::string root_;
  SandboxLauncher& cold_;
  std::int64_t max_idle_us_;
  std::vector<Host> hosts_;  // back(): the current one; the others are draining
  int backoff_ms_ = 0;       // after a failed build, as a pool's (next_build_backoff_ms)
  std::int64_t backoff_until_us_ = 0;

  // Pooled forks: pool_size calls forked from the current template before any request, each a
  // pooled worker (`mcp-worker --pooled --from-template`, mcp_worker.hpp) whose driver forks
  // the call's namespaces, pid 1 and program, and waits (warm_template.py, _pooled_pid1): at
  // the request only the call's files and argv remain (pool_job.hpp). The pool is the current
  // template's: a new template retires it and starts another. A call that finds no fork ready
  // is forked on demand (OnDemand), the pool's fallback.
  class OnDemand : public SandboxLauncher {
   public:
    explicit OnDemand(TemplateLauncher& t) : t_(t) {}
    Result<Worker> launch(const nlohmann::json& job) override;

   private:
    TemplateLauncher& t_;
  };
  // The current template's {socket, digest, run_id} when it is ready, else null.
  nlohmann::json ready_template();
  void sync_pool();
  std::vector<std::string> pooled_argv_;
  std::size_t pool_size_;
  OnDemand on_demand_{*this};
  std::unique_ptr<PoolLauncher> pool_;  // the current template's (pool_run_id_)
  std::string pool_run_id_;
  std::vector<std::unique_ptr<PoolLauncher>> retired_pools_;  // discarded, until their workers are reaped
};

// `sbx mcp-worker --template-host DIR --profile P` (cli/mcp_cmd.cpp): runs the template for the
// profile until the server closes `note_fd` or signals it; says its run id and digest on note_fd,
// where the driver's own lines follow. Returns the worker's exit status.
int serve_template_host(const WorkerContext& ctx, const std::string& profile, const std::string& dir, int note_fd);

}  // namespace sbx::mcp
