// sbx mcp: a stdio MCP server whose tools are rule packs and run_code (runtime/server/mcp_server.hpp),
// and sbx mcp-worker, the hidden subcommand each of its calls runs as: one job on stdin (a memfd
// the server wrote), one JSON response on stdout (a memfd the server reads once it exits).
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "cli/commands.hpp"
#include "runtime/base/fdpass.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/launch/sandbox.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/launch/trace.hpp"
#include "runtime/linux/cgroup.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/record/trace_ledger.hpp"
#include "runtime/server/mcp_pool.hpp"
#include "runtime/server/mcp_protocol.hpp"
#include "runtime/server/mcp_server.hpp"
#include "runtime/typed/exec.hpp"
#include "runtime/typed/pack.hpp"
#include "runtime/typed/pack_run.hpp"

namespace sbx::cli {
namespace {
// The tenant of `sbx mcp --tenant`, as its workers (children of the server) inherit it.
constexpr const char* kMcpTenantEnv = "SBX_MCP_WORKER_TENANT";
std::optional<std::string> worker_tenant() {
  const char* t = std::getenv(kMcpTenantEnv);
  return t ? std::optional<std::string>(t) : std::nullopt;
}

using nlohmann::json;

struct McpFlags {
  std::vector<std::string> packs;
  std::vector<std::string> contexts;  // PACK/NAME=PATH
  std::string profile = kDefaultProfile;
  std::optional<std::string> tenant;  // --tenant NAME (runtime/launch/tenant.hpp), applied by every worker
  std::size_t max_concurrent = 4;
  std::size_t max_queued = 256;
  std::size_t pool = 2;  // --pool N: idle pooled sandboxes for run_code (0: off)
  int pool_max_idle = mcp::kDefaultPoolMaxIdleS;  // --pool-max-idle SECONDS (0: no age limit)
};

struct WorkerFlags {
  bool pooled = false;     // --pooled: build the sandbox first, then wait for the job (mcp_pool.hpp)
  std::string profile = kDefaultProfile;
};

// --packs DIR: a pack directory itself, or a directory whose subdirectories with a pack.json are
// packs (sorted, so tools/list is stable).
std::vector<std::string> pack_dirs(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(fs::path(dir) / kPackManifest, ec)) return {dir};
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec) && fs::exists(e.path() / kPackManifest, ec)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

int run_server(McpFlags& f, GlobalOptions& g) {
  auto profile = load_profile(f.profile);
  if (!profile) return usage_error("mcp: --profile: " + profile.error().describe());
  if (f.max_concurrent < 1 || f.max_concurrent > 256) return usage_error("mcp: --max-concurrent must be 1..256");
  if (f.tenant) {
    // Checked once here, so that a bad tenant fails the server, not each call; every worker then
    // applies it to its call (add_mcp_worker_command) through the environment it inherits.
    auto t = load_tenant(*f.tenant);
    if (!t) return usage_error("mcp: " + t.error().message);
    ::setenv(kMcpTenantEnv, f.tenant->c_str(), 1);
  } else {
    ::unsetenv(kMcpTenantEnv);
  }
  if (f.pool > 64) return usage_error("mcp: --pool must be 0..64");
  if (f.pool_max_idle < 0 || f.pool_max_idle > 86400) return usage_error("mcp: --pool-max-idle must be 0..86400 seconds");
  mcp::ServerConfig cfg;
  cfg.profile = f.profile;
  cfg.max_concurrent = f.max_concurrent;
  cfg.max_queued = f.max_queued;
  // A call's streams are at most the profile's output limit each (a request or a pack may only
  // lower it; a tenant's ceiling too): what sizes the largest response the server reads.
  if (auto base = spec_from_layers(*profile, nullptr, "profile " + f.profile); base && base->limits.output_limit_bytes)
    cfg.stream_limit_bytes = std::min<std::int64_t>(*base->limits.output_limit_bytes, mcp::kMaxCapturedStreamBytes);
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> given;
  for (auto& c : f.contexts) {
    auto slash = c.find('/'), eq = c.find('=');
    if (slash == std::string::npos || eq == std::string::npos || slash == 0 || eq < slash + 2 || eq + 1 == c.size())
      return usage_error("mcp: --context: expected PACK/NAME=PATH, got '" + c + "'");
    std::string path = c.substr(eq + 1);
    if (::access(path.c_str(), R_OK) != 0)
      return usage_error("mcp: --context " + c.substr(0, eq) + ": cannot read " + path + ": " + std::strerror(errno));
    given[c.substr(0, slash)].push_back({c.substr(slash + 1, eq - slash - 1), path});
  }
  std::set<std::string> names{"run_code"};
  for (auto& d : f.packs) {
    struct stat st{};
    if (::stat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return usage_error("mcp: --packs " + d + ": not a directory");
    for (auto& dir : pack_dirs(d)) {
      std::vector<PackProblem> problems;
      auto pack = load_pack(dir, problems);
      if (!pack) {
        for (auto& p : problems)
          std::fprintf(stderr, "sbx: %s/%s\n", printable(dir).c_str(), printable(p.describe()).c_str());
        return usage_error("mcp: --packs: the pack in " + dir + " does not load");
      }
      // A pack whose limits pass the profile's would fail on every call: refused now instead.
      if (auto merged = spec_from_layers(*profile, &pack->spec_patch, pack->source_dir + "/pack.json"); !merged)
        return usage_error("mcp: " + merged.error().message + " (profile " + f.profile + ")");
      if (!names.insert(pack->name).second) return usage_error("mcp: two tools named '" + pack->name + "' (" + dir + ")");
      std::string missing;
      for (auto& s : pack->secrets)
        if (s.required) missing = "secret " + s.name;
      for (auto& c : pack->contexts) {
        bool have = false;
        for (auto& [n, p] : given[pack->name]) have = have || n == c.name;
        if (c.required && !have) missing = "context " + c.name + " (--context " + pack->name + "/" + c.name + "=PATH)";
      }
      for (auto& [n, p] : given[pack->name]) {
        bool declared = false;
        for (auto& c : pack->contexts) declared = declared || c.name == n;
        if (!declared) return usage_error("mcp: --context " + pack->name + "/" + n + ": the pack declares no such context");
      }
      if (!missing.empty()) {
        // Not a tool a model could call: it would fail every time for want of the operator's input.
        std::fprintf(stderr, "sbx: mcp: warning: pack %s is not offered: it requires %s\n", printable(pack->name).c_str(),
                     printable(missing).c_str());
        continue;
      }
      cfg.packs.push_back(mcp::pack_tool(*pack));
      if (given.count(pack->name)) cfg.contexts[pack->name] = given[pack->name];
    }
  }
  for (auto& [name, list] : given)
    if (!names.count(name)) return usage_error("mcp: --context " + name + "/...: no pack named '" + name + "'");
  cfg.instructions =
      "Each tool call runs in a fresh, isolated sandbox (sbx) and is recorded in sbx's trace ledger; the run id and "
      "the ledger's path are in the result's _meta (sbx/run_id, sbx/trace). Pack tools take {\"records\": [...]} "
      "and return the pack's validated result; run_code runs a Python, sh or bash program.";
  std::vector<std::string> argv{g.argv.empty() ? std::string("sbx") : g.argv[0]};
  if (!g.state_dir.empty()) argv.insert(argv.end(), {"--state-dir", g.state_dir});
  argv.push_back("mcp-worker");
  mcp::ReexecLauncher launcher(argv);
  std::string tools;
  for (auto& p : cfg.packs) tools += p.name + ", ";
  std::fprintf(stderr, "sbx: mcp: serving %srun_code on stdio (profile %s, at most %zu calls at once, pool %zu)\n",
               printable(tools).c_str(), printable(f.profile).c_str(), f.max_concurrent, f.pool);
  if (f.pool == 0) return mcp::serve(cfg, launcher);
  // One pool key: run_code runs under the server's profile and that profile's image (a request
  // names neither), so every pooled sandbox is made for (profile, image) alike.
  auto pooled_argv = argv;
  pooled_argv.insert(pooled_argv.end(), {"--pooled", "--profile", f.profile});
  int rc;
  {
    mcp::PoolLauncher pool(pooled_argv, f.pool, launcher, f.pool_max_idle * 1000LL);
    rc = mcp::serve(cfg, pool);
  }
  // A worker killed while it built its sandbox had not named its run cgroup to the server yet
  // (it does once built, mcp_pool.hpp), so the pool could not remove it. Its owner is dead,
  // which is what every run's sweep of stale run cgroups looks for (gc_stale_cgroups,
  // runtime/linux/cgroup.hpp): while the server runs, the next pooled build sweeps it; at the
  // server's end no build follows, so the server sweeps once itself (bounded: each stale cgroup
  // is killed and removed within seconds, and the server is exiting).
  if (auto st = gc_stale_cgroups(detect_cgroup()); !st)
    std::fprintf(stderr, "sbx: mcp: pool: %s\n", printable(st.error().describe()).c_str());
  return rc;
}

// A memfd holding one of the program's streams, read back after the run.
struct Capture {
  UniqueFd fd{::memfd_create("sbx-mcp-capture", MFD_CLOEXEC)};
  std::string read_all() const {
    ::lseek(fd.get(), 0, SEEK_SET);
    auto r = read_bounded_fd(fd.get(), static_cast<std::size_t>(mcp::kMaxCapturedStreamBytes), "mcp", "captured output");
    return r ? *r : std::string();
  }
};

json worker_error(const std::string& stage, const std::string& message) {
  return {{"error", {{"stage", stage}, {"message", message}}}};
}

json run_pack_job(const json& job, GlobalOptions& g) {
  std::vector<PackProblem> problems;
  // The copy is what runs (load_pack_copy): the pack's directory may have changed since the
  // server loaded it at start, and may change during the call.
  auto pack = load_pack_copy(job.value("dir", ""), resolve_dirs(g.state_dir).state, problems);
  if (!pack) return worker_error("usage", problems.empty() ? pack.error().message : problems.front().describe());
  auto profile = load_profile(job.value("profile", kDefaultProfile));
  if (!profile) return worker_error("usage", profile.error().describe());
  auto merged = spec_from_layers(*profile, &pack->spec_patch, pack->source_dir + "/pack.json");
  if (!merged) return worker_error("usage", merged.error().message);
  RunFlags rf;
  rf.command = pack->entrypoint;
  auto spec = apply_flags(std::move(*merged), rf);
  if (!spec) return worker_error("usage", spec.error().message);
  PackRunRequest req;
  req.pack = std::move(*pack);
  req.run.spec = std::move(*spec);
  req.run.profile = profile->source;
  req.run.dirs = resolve_dirs(g.state_dir);
  req.run.limit_layers = limit_layers(*profile, &req.pack.spec_patch, req.pack.source_dir + "/pack.json", {});
  req.run.invocation_argv = g.argv;
  if (auto st = apply_tenant_flag(worker_tenant(), req.run, json{{"name", req.pack.name}, {"digest", req.pack.digest}}); !st)
    return worker_error("usage", st.error().message);
  req.input_path = "mcp:tools/call";
  if (job.contains("pool")) req.run.record_extra["pool"] = job["pool"];
  json records = job.value("records", json::array());
  req.input_bytes = dump_json(records, -1);
  for (auto& c : job.value("contexts", json::array()))
    if (c.is_array() && c.size() == 2 && c[0].is_string() && c[1].is_string()) req.contexts.push_back({c[0], c[1]});
  Capture out, err;
  if (!out.fd.ok() || !err.fd.ok()) return worker_error("mcp", "memfd_create for the captured output");
  req.run.stdout_fd = out.fd.get();
  req.run.stderr_fd = err.fd.get();
  PackRunResult res = run_pack(req);
  if (!res.recorded)
    return worker_error("record", "the run's trace record could not be stored (" + res.record_error +
                                      "): its result is withheld");
  json resp = {{"run_id", res.trace.value("run_id", "")},
               {"status", to_string(res.status)},
               {"result", res.status == RunStatus::ok ? res.result : json(nullptr)},
               {"errors", res.errors},
               {"stdout", out.read_all()},
               {"stderr", err.read_all()},
               {"trace", req.run.dirs.traces + "/" + kLedgerName}};
  return resp;
}

// The job in the fd a pooled worker received; {"invalid": why} when it is not a JSON object.
json take_job(int jfd) {
  // This worker holds a call: if the server dies now, the run ends with its record. (A pooled
  // worker has had SIGTERM as its parent-death signal from its start, mcp_pool.cpp: set again
  // here, so that nothing before the call can have changed it.)
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  constexpr std::size_t kMaxJobBytes = mcp::kMaxMessageBytes + (1u << 20);
  auto text = read_bounded_fd(jfd, kMaxJobBytes, "usage", "the mcp worker's job");
  auto job = text ? parse_json_doc(*text, {kMaxJobBytes}, "usage", "mcp worker job") : Result<json>(text.error());
  if (!job || !job->is_object()) return json{{"invalid", job ? "the job is not an object" : job.error().message}};
  return std::move(*job);
}

// A pooled worker (mcp_pool.hpp): its sandbox is built, init paused before the program's execve;
// it waits for the job (an fd on its stdin, a unix socket), the sandbox's death or a signal.
// Returns the job, or nullopt when none is coming (EOF: the server discards it) or the sandbox
// is unusable with no job waiting.
// `died` says why when the sandbox became unusable with no job waiting: the server may be handing
// one over at this very moment (it saw a live worker), so the caller must not just exit.
// `closed` is set when the server's end of the socket is closed (or broken): no job can come.
std::optional<json> await_pooled_job(const PoolPause& pause, json& meta, std::int64_t t_created_us, std::string* died,
                                     bool* closed) {
  auto mono_us = [] {
    struct timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1'000'000LL + ts.tv_nsec / 1000;
  };
  std::int64_t ready_us = mono_us();
  meta["ready_ms"] = (ready_us - t_created_us) / 1000;
  pollfd fds[4] = {{STDIN_FILENO, POLLIN, 0}, {pause.init_pidfd, POLLIN, 0}, {pause.init_msg_fd, POLLIN, 0}, {pause.signal_fd, POLLIN, 0}};
  for (;;) {
    int n = ::poll(fds, 4, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    // Init gone, or it said something (only a failure can come before "s"), or a signal: the
    // sandbox is not handed out. A job already waiting is still taken, and run cold.
    std::string unusable;
    if (fds[1].revents) unusable = "the pooled sandbox's init died before hand-out";
    else if (fds[2].revents) unusable = "the pooled sandbox's init reported before hand-out";
    else if (fds[3].revents) unusable = "a signal reached the pooled worker before hand-out";
    if (!fds[0].revents && !unusable.empty()) {
      *died = unusable;
      return std::nullopt;
    }
    if (!fds[0].revents) continue;
    int jfd = -1;
    ssize_t r = recv_fd(STDIN_FILENO, &jfd);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r <= 0 || jfd < 0) {  // EOF: the server is done with this sandbox
      *closed = true;
      return std::nullopt;
    }
    UniqueFd owned(jfd);
    json parsed = take_job(jfd);
    if (parsed.contains("invalid")) return parsed;
    auto job = &parsed;
    std::int64_t now = mono_us();
    std::int64_t sent = job->value("pool_sent_us", now);
    meta["hit"] = unusable.empty();
    // How long the call waited for this sandbox to be ready (0 when it was ready first).
    meta["waited_ms"] = std::max<std::int64_t>(0, (ready_us - sent) / 1000);
    // The hand-out's first leg, for bench/mcp_pool.py's breakdown: the server's send to this
    // worker holding the parsed job (the wake-up included).
    meta["handout_us"] = std::max<std::int64_t>(0, now - std::max(sent, ready_us));
    if (!unusable.empty()) meta["discard"] = unusable;
    return parsed;
  }
}

// How long a worker whose sandbox died before hand-out waits for a job the server may already be
// sending (the server's hand-out is one check of the worker's note and one sendmsg: microseconds).
constexpr int kDiedJobGraceMs = 2000;

// A pooled worker whose sandbox could not be built: it has told the server ("failed"), which
// hands it no call; a call the server sent before that note arrived is still taken, and runs
// cold. nullopt on EOF (the server retired it).
// wait_ms bounds the wait (-1: until EOF); nullopt on EOF or when it passed with no job.
std::optional<json> await_job_after_failed_build(int wait_ms = -1) {
  bool shut = false;
  for (;;) {
    pollfd in{STDIN_FILENO, POLLIN, 0};
    int n = shut ? 1 : ::poll(&in, 1, wait_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      // The grace is over. The server may be sending a job this very moment (it read no note
      // yet, a loaded machine can hold it between its check and its send): the socket is shut
      // for reading first, so that a send from now on fails (EPIPE: the server tries its next
      // sandbox), and what was sent before is still read below. Ending with a job unread in the
      // socket would leave its call started and never recorded.
      ::shutdown(STDIN_FILENO, SHUT_RD);
      shut = true;
      continue;
    }
    int jfd = -1;
    ssize_t r = recv_fd(STDIN_FILENO, &jfd);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r <= 0 || jfd < 0) return std::nullopt;
    UniqueFd owned(jfd);
    return take_job(jfd);
  }
}

// The tenant's policy as a pooled sandbox is built with it: its file and that file's digest.
// Compared again at hand-out: a tenant file edited meanwhile makes the call run cold, under the
// policy as it is now (a pooled sandbox's id slice, umask and store were fixed at build).
std::string tenant_policy_key(const std::string& name) {
  auto t = load_tenant(name);
  if (!t) return "unloadable: " + t.error().message;
  auto text = read_file(t->file);
  if (!text) return "unreadable: " + t->file;
  return t->file + " sha256:" + sha256_hex(*text);
}

// A line to the server on the worker's socket (mcp_pool.hpp: the worker's notes). Never blocks,
// never raises SIGPIPE: a server that is gone reads nothing anyway.
void tell_server(const std::string& note) {
  (void)!::send(STDIN_FILENO, note.data(), note.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

void add_mcp_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  static McpFlags f;
  auto* mcp = app.add_subcommand("mcp", "Serve rule packs and run_code as MCP tools over stdio (JSON-RPC; man sbx)");
  mcp->add_option("--packs", f.packs, "A pack directory, or a directory of pack directories: one tool each (repeatable)");
  mcp->add_option("--context", f.contexts, "Mount a context for every call of a pack: PACK/NAME=PATH (repeatable)");
  mcp->add_option("--profile", f.profile, "Profile every call runs under; its limits are the calls' ceilings (default untrusted)");
  mcp->add_option("--tenant", f.tenant,
                  "Serve as tenant NAME: its ceilings bind every call (and the profile); its own host ids and store")
      ->check(tenant_option_check, "NAME");
  mcp->add_option("--max-concurrent", f.max_concurrent, "Calls running at once; the rest wait in order (default 4)");
  mcp->add_option("--max-queued", f.max_queued, "Calls waiting beyond those; more are refused (default 256)");
  mcp->add_option("--pool", f.pool, "Sandboxes kept built ahead for run_code calls, each used once (default 2; 0: off)");
  mcp->add_option("--pool-max-idle", f.pool_max_idle,
                  "Seconds a pooled sandbox may wait for its call before it is discarded and rebuilt (default 300; 0: no limit)");
  // Supervises: the forwarded signals stay blocked, and the server reads them from a signalfd
  // (shutdown in order: cancel, wait, exit).
  out.push_back({mcp, [&g]() -> int { return run_server(f, g); }, true});
}


void add_mcp_worker_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  // Hidden (no group): started by `sbx mcp` only, never by a person.
  static WorkerFlags wf;
  auto* worker = app.add_subcommand("mcp-worker", "")->group("");
  worker->add_flag("--pooled", wf.pooled, "");
  worker->add_option("--profile", wf.profile, "");
  out.push_back({worker, [&g]() -> int {
    json resp;
    // The job wraps one message's arguments with the tool's and the profile's names: one
    // message's bound plus room for those.
    constexpr std::size_t kMaxJobBytes = mcp::kMaxMessageBytes + (1u << 20);
    Result<json> job = json(nullptr);
    json pool_note;  // a pooled worker's call that ran cold: why, for its record
    if (wf.pooled) {
      struct timespec ts;
      ::clock_gettime(CLOCK_MONOTONIC, &ts);
      std::int64_t t0 = ts.tv_sec * 1'000'000LL + ts.tv_nsec / 1000;
      std::string created_at = rfc3339_now();
      ExecContext ctx;
      ctx.dirs = resolve_dirs(g.state_dir);
      ctx.invocation_argv = g.argv;
      ctx.profile = wf.profile;
      // Under --tenant the pooled sandbox is planned with the tenant applied too: its id slice,
      // umask and store are fixed when it is built, before any call exists. The policy's text is
      // read before it is applied: an edit in between makes the key differ at hand-out (a cold
      // run), never match a policy the sandbox was not built with.
      auto tenant = worker_tenant();
      std::string tenant_key;
      if (tenant)
        ctx.before_run = [tenant, &tenant_key](RunRequest& run) {
          tenant_key = tenant_policy_key(*tenant);
          return apply_tenant_flag(tenant, run);
        };
      json invalid;
      bool got_job = false, closed = false;
      std::string died;  // the sandbox died (or was disturbed) before any job came
      auto res = run_exec_pooled(ctx, [&](const PoolPause& p, json& meta) -> std::optional<json> {
        meta = {{"hit", true}, {"created_at", created_at}, {"key", {{"profile", wf.profile}}}};
        if (tenant) meta["key"]["tenant"] = {{"name", *tenant}, {"policy", tenant_key}};
        tell_server(mcp::worker_note_ready(p.cgroup_path));
        auto j = await_pooled_job(p, meta, t0, &died, &closed);
        if (!j) return std::nullopt;
        got_job = true;
        if (j->contains("invalid")) {
          invalid = *j;
          return std::nullopt;
        }
        if (j->value("tool", "") != "run_code" || j->value("profile", "") != wf.profile) {
          meta["discard"] = "the job is not a run_code call under profile " + wf.profile;
        } else if (tenant && !meta.contains("discard") && tenant_policy_key(*tenant) != tenant_key) {
          meta["discard"] = "tenant " + *tenant + "'s policy changed since the pooled sandbox was built";
        }
        return j->value("request", json::object());
      });
      // A sandbox that could not be built: the server is told (it then hands this worker no call,
      // and retires it), and a call it sent before the note arrived runs cold here, its record
      // saying why. (One that died before its call came ends instead: the server reaps it.)
      std::string broken;
      if (!res && !got_job) broken = "the pooled sandbox could not be built: " + res.error().describe();
      else if (res && res->request.is_null() && res->build_error)
        broken = "the pooled sandbox could not be built: " + res->build_error->describe();
      // A sandbox that died before its job came: the server, which saw a live worker, may be
      // sending the job right now. Told, it hands this worker nothing more; one it already sent
      // arrives within the grace below and runs cold here (without it the call would be lost:
      // "the worker ended without a response"). Past the grace the worker shuts its socket for
      // reading, takes a job sent until then, and otherwise ends, no record.
      int grace_ms = -1;
      if (broken.empty() && res && res->request.is_null() && !died.empty()) {
        broken = died;
        grace_ms = kDiedJobGraceMs;
      }
      // Ended before its hand-out for any other reason, the server's socket still open: a call
      // may be waiting in it (sent while this worker was still starting) and is run cold, as
      // above. Only EOF (the server retired this sandbox) means that none can be there.
      if (broken.empty() && res && res->request.is_null() && !got_job && !closed) {
        broken = "the pooled sandbox ended before hand-out";
        grace_ms = kDiedJobGraceMs;
      }
      if (!broken.empty()) {
        std::fprintf(stderr, "sbx: mcp: pool: %s\n", printable(broken).c_str());
        tell_server(mcp::worker_note_failed(broken));
        auto j = await_job_after_failed_build(grace_ms);
        if (!j) return 0;  // retired: nothing to answer, nothing recorded
        if (j->contains("invalid")) {
          resp = worker_error("usage", j->value("invalid", "bad job"));
        } else {
          pool_note = {{"hit", false}, {"reason", broken}, {"created_at", created_at}};
          job = json{{"tool", "run_code"}, {"profile", wf.profile}, {"request", j->value("request", json::object())},
                     {"pool", pool_note}};
        }
      } else if (!invalid.is_null()) {
        resp = worker_error("usage", invalid.value("invalid", "bad job"));
      } else if (!res) {
        resp = worker_error(res.error().stage, res.error().describe());
      } else if (res->request.is_null()) {
        return 0;  // the server closed the socket before any call: nothing to answer, nothing recorded
      } else if (!res->response.is_null()) {
        resp = res->response;
      } else {
        // Served cold here: the pooled sandbox was unusable or not made for this call.
        json request = res->request;
        pool_note = {{"hit", false}, {"reason", res->pool_meta.value("discard", res->cold_reason)},
                     {"created_at", created_at}};
        job = json{{"tool", "run_code"}, {"profile", wf.profile}, {"request", request}, {"pool", pool_note}};
      }
      if (!resp.is_null()) {
        std::string s = dump_json(resp, -1) + "\n";
        std::fwrite(s.data(), 1, s.size(), stdout);
        return resp.contains("error") && !resp.contains("status") ? 125 : 0;
      }
    } else {
      auto text = read_bounded_fd(STDIN_FILENO, kMaxJobBytes, "usage", "the mcp worker's job");
      job = text ? parse_json_doc(*text, {kMaxJobBytes}, "usage", "mcp worker job") : Result<json>(text.error());
    }
    if (!job || !job->is_object()) {
      resp = worker_error("usage", job ? "the job is not an object" : job.error().message);
    } else if (job->value("tool", "") == "run_code") {
      ExecContext ctx;
      ctx.dirs = resolve_dirs(g.state_dir);
      ctx.invocation_argv = g.argv;
      ctx.profile = job->value("profile", kDefaultProfile);
      if (auto tenant = worker_tenant())
        ctx.before_run = [tenant](RunRequest& run) { return apply_tenant_flag(tenant, run); };
      if (job->contains("pool")) ctx.record_extra["pool"] = (*job)["pool"];
      auto r = run_exec(job->value("request", json::object()), ctx);
      resp = r ? *r : worker_error(r.error().stage, r.error().describe());
    } else if (job->value("tool", "") == "pack") {
      resp = run_pack_job(*job, g);
    } else {
      resp = worker_error("usage", "unknown job tool");
    }
    std::string s = dump_json(resp, -1) + "\n";
    std::fwrite(s.data(), 1, s.size(), stdout);
    return resp.contains("error") && !resp.contains("status") ? 125 : 0;
  }, true});
}

}  // namespace sbx::cli
