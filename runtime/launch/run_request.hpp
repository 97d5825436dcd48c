#pragma once
// RunRequest: everything one run is given (docs/ARCHITECTURE.md, "A run, phase by phase"), read
// by run_sandbox (sandbox.hpp), the facilities (facility.hpp) and --dry-run (dry_run.hpp). What
// is not the spec itself is grouped by who fills it: the program's stdio, its secrets, the tenant
// it runs as, how sbx's cgroup came about, a typed-IO caller's part, a warm pool's hand-out.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/paths.hpp"
#include "runtime/image/blob_store.hpp"
#include "runtime/launch/outcome.hpp"
#include "runtime/launch/pool_job.hpp"
#include "runtime/linux/mount_plan.hpp"
#include "runtime/linux/stdin_relay.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/model/spec.hpp"

namespace sbx {

// What a typed-IO caller's after_run (RunRequest::typed) hands back: members to add to the record
// (e.g. {"outputs": [...], "validation": {...}}) and its verdict on the output, if it found the
// output broke the contract. The verdict is a fact for the outcome (with_verdict, outcome.hpp),
// never an outcome rewritten by the caller.
struct AfterRun {
  nlohmann::json record = nlohmann::json::object();
  std::optional<ContractVerdict> verdict;
};

// A warm pool's sandbox (pool_job.hpp; `sbx mcp --pool`, mcp_pool.hpp): what the call brings
// once the sandbox it is handed was built.
struct PooledCall {
  RunSpec spec;  // the call's effective spec: one that pool_refusal() accepts for the pooled one
  PoolJob job;   // its argv and the files written under kPoolDirs before the program starts
  nlohmann::json inputs = nlohmann::json::array();
  nlohmann::json record_extra = nlohmann::json::object();
  std::function<AfterRun(const Outcome&, int out_fd)> after_run;  // replaces RunRequest::typed's
};
// What await_call may watch while it waits: init's pidfd (it died: the sandbox is unusable),
// init's report pipe (readable before hand-out: it failed or was disturbed), and the supervisor's
// signalfd of forwarded signals (the server discards its idle sandboxes with SIGTERM).
// cgroup_path is the run cgroup's (absolute; "" without one): a server that has to SIGKILL an
// idle worker removes it (mcp_pool.hpp), since the worker then cannot.
struct PoolPause {
  int init_pidfd = -1;
  int init_msg_fd = -1;
  int signal_fd = -1;
  std::string cgroup_path;
  // The profile's `warm` (model/warm.hpp). With an interpreter that has a driver, init reports
  // kWarmReady, or the preparation's failure, on init_msg_fd before any call.
  WarmSpec warm;
  // Init is a fork of the waiting process (not a template's fork): the two share every page the
  // waiting process had written until it writes it again (own_pages.hpp).
  bool init_shares_pages = false;
};

struct RunRequest {
  RunSpec spec;
  ProfileSource profile;                     // hashed into the trace
  std::vector<std::string> invocation_argv;  // sbx's own argv
  Dirs dirs;
  std::string trace_file;  // extra copy of the record ("" for none)
  // `sbx run --workspace`: the directory bound read-write at the same path ("" for none), whose
  // opened source must be the directory sbx runs in (check_workspace_source, workspace.hpp).
  std::string workspace;
  // A record that cannot be stored durably fails the run with exit 125; the caller reports it
  // (pack run and exec, from RunReport::record_error). `sbx run --require-record` and the
  // profile's require_record set RunSpec::require_record instead, and run_sandbox says why.
  bool require_record = false;
  // Limits given on the command line ("memory", "pids", "cpus", "cpu_time"): a shortfall in one
  // of these is a warning; in a profile default it is logged at info level (quiet by default).
  std::vector<std::string> explicit_limits;
  // Which layer set each limit ("memory" -> "profile 'untrusted'", "flag --memory", a manifest's
  // path): named by --require-limits when the limit cannot be enforced (preflight.hpp).
  std::map<std::string, std::string> limit_layers;
  // Who may raise a limit the run hits (profile.hpp): `sbx run` and `sbx pack run` take a flag
  // per limit, an `sbx exec` request or `sbx mcp` call none (its operator's --profile is the
  // ceiling), so the wall-time message names the fix of the caller's own surface.
  CeilingRaise limit_raise = CeilingRaise::by_flag;
  // Members added to the record as they are: "blobs" (what was kept for a replay, blob_store.hpp;
  // a "blobs" list from after_run is appended to it) and "replay_of" (replay.hpp).
  nlohmann::json record_extra = nlohmann::json::object();
  // The run's claim on the blobs kept for it (blob_store.hpp, BlobPin): every BlobKeeper of the
  // run shares it, so `sbx gc` spares them until the record names them. Released with the
  // request, after run_sandbox stored the record.
  std::shared_ptr<BlobPin> blob_pin = std::make_shared<BlobPin>();
  // Files sbx generates for the sandbox (records, code): bound read-only, never on the host.
  std::vector<GeneratedFile> files;
  // run --entrypoint: what replaced the image's Entrypoint (already in spec.argv), for the record.
  std::optional<std::vector<std::string>> image_entrypoint;
  // --output DIR: export /out there after the run (prepare_export_dir checked it beforehand).
  std::string export_dir;

  // The program's stdio.
  struct Io {
    // Where the program's stdout/stderr go (sbx's own by default; sbx exec captures them).
    int stdout_fd = 1;
    int stderr_fd = 2;
    // The program's stdin (stdin_relay.hpp): `sbx run` plans it from -i/-t and its own fd 0
    // (a pty for -t); the default, for sbx exec and pack run, is the sandbox's /dev/null.
    StdinPlan stdin_plan;
  } io;

  // Secrets, held only in memory. Files land on a private tmpfs at /run/secrets/NAME (0400, owned
  // by the program's uid); env ones are added to the program's environment. Neither is part of
  // the RunSpec, so neither reaches the trace (the caller records the names only).
  struct Secrets {
    std::vector<std::pair<std::string, std::string>> files;  // name, value
    std::vector<std::pair<std::string, std::string>> env;    // name, value
  } secrets;

  // The tenant the run runs as (--tenant: apply_tenant, tenant.hpp, fills these, turns `dirs`
  // into the tenant's store and adds the record's "tenant" to record_extra); untenanted runs keep
  // the defaults.
  struct Tenant {
    std::string name;  // "" for untenanted runs (its records' schema in the trace database: trace_mirror.hpp)
    // Which slice of sbx's subordinate id range the sandbox maps to (userns.hpp plan_identity):
    // 0 for untenanted runs, a tenant's id_slot under --tenant.
    std::uint32_t id_slot = 0;
    // >= 0: the program's umask (tenant runs: 077); -1 leaves the caller's.
    int umask = -1;
    // Directories beyond `dirs` that no read-write bind may reach (preflight.hpp,
    // check_binds_spare_state), each with what it is for messages: under a tenant, the untenanted
    // state dir and the other tenants' stores.
    std::vector<std::pair<std::string, std::string>> guarded_dirs;
  } tenant;

  // How sbx's cgroup came about, for host.cgroup in the record (cli/systemd_scope.hpp):
  struct Scope {
    // "auto" or "flag" when sbx re-executed itself in a delegated systemd user scope, "reused"
    // when it joined the long-lived one (runtime/linux/scope_reuse.hpp); and the reason sbx did
    // (or did not) re-execute itself so ("" when nobody asked: pack run, exec).
    std::string cgroup_via_scope;
    std::string systemd_scope;
    // The scope's unit name when sbx's cgroup is (in) one: the re-exec's run-*.scope, or the
    // long-lived sbx-runs-<uid>.scope it joined ("reused", runtime/linux/scope_reuse.hpp).
    std::string scope_unit;
  } scope;

  // Typed-IO callers (sbx pack run, sbx exec) fill these; a plain `sbx run` leaves them empty.
  struct TypedIo {
    nlohmann::json pack = nullptr;                    // invocation.pack {name, version, digest}
    nlohmann::json inputs = nlohmann::json::array();  // inputs [{path, bytes, sha256}]
    // Set when the caller refused the run before a sandbox was created (input_invalid): nothing
    // is prepared or spawned, but the record is written with this outcome like for any other run.
    std::optional<Outcome> refuse;
    // Called once the program has ended (or setup failed), before the record is written, with
    // the outcome decided so far: reads what the run produced and returns members to add to the
    // record and its verdict on the output (AfterRun; output_invalid applies to an ok run only).
    // `out_fd` is an O_PATH fd of the sandbox's /out (-1 if setup never got that far); read it
    // with read_out_file (artifact_export.hpp).
    std::function<AfterRun(const Outcome&, int out_fd)> after_run;
  } typed;

  // A call forked from a template (runtime/server/mcp_template.hpp; the driver:
  // runtime/model/warm_template.py): the template's control socket, the driver that listens
  // there (the server checked it, seal(): its pid, and its pidfd's inode where the kernel has one,
  // linux/unix_peer.hpp), and what the record says of the template ({digest, run_id}). Set: spawn
  // connects there instead of cloning, and the template's fork plays init.
  struct FromTemplate {
    std::string socket;
    pid_t listener_pid = 0;
    std::uint64_t listener_id = 0;
    std::string key;  // sent with the job: the driver forks no job without it (server/mcp_worker.hpp)
    nlohmann::json record = nullptr;
  } from_template;
  // This run is a template (mcp_template.hpp): its filter is the template policy
  // (kTemplateSeccomp) in place of the spec's "default", and its record says it was one.
  bool template_host = false;
  // The run's id, when the caller needs it before the run ends (a template's, which every call
  // forked from it records); "" makes one (make_run_id).
  std::string run_id;

  // A warm pool's sandbox (pool_job.hpp, mcp_pool.hpp).
  struct Pool {
    // Set for a warm pool's sandbox: it is built in full (namespaces, root, /dev, /proc, tmpfs
    // mounts, cgroup, seccomp prepared) with tmpfs mounts at kPoolDirs that only init writes, and
    // init paused before the program's execve; then await_call blocks until the call arrives.
    // nullopt discards the sandbox: it is killed, and no record is written (nothing ran). The
    // wall-time limit and the record's started_at count from the hand-out.
    std::function<std::optional<PooledCall>(const PoolPause&)> await_call;
  } pool;
};

}  // namespace sbx
