// `sbx mcp-worker`'s protocol (mcp_worker.hpp): one function per step of a call's life in the
// worker, so that cli/mcp_cmd.cpp only parses flags and prints the response.
#include "runtime/server/mcp_worker.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "runtime/base/clock.hpp"
#include "runtime/base/trace_field.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/own_pages.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/launch/handshake.hpp"
#include "runtime/launch/sandbox.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/server/pool_job_wire.hpp"
#include "runtime/record/trace_ledger.hpp"
#include "runtime/server/mcp_pool.hpp"
#include "runtime/image/image_store.hpp"
#include "runtime/image/self_digest.hpp"
#include "runtime/server/mcp_protocol.hpp"
#include "runtime/typed/pack.hpp"
#include "runtime/typed/pack_run.hpp"

namespace sbx::mcp {
using nlohmann::json;

namespace {
// The job wraps one message's arguments with the tool's and the profile's names: one message's
// bound plus room for those.
constexpr std::size_t kMaxJobBytes = kMaxMessageBytes + (1u << 20);

// A memfd holding one of the program's streams, read back after the run.
struct Capture {
  UniqueFd fd{::memfd_create("sbx-mcp-capture", MFD_CLOEXEC)};
  std::string read_all() const {
    ::lseek(fd.get(), 0, SEEK_SET);
    auto r = read_bounded_fd(fd.get(), static_cast<std::size_t>(kMaxCapturedStreamBytes), "mcp", "captured output");
    return r ? *r : std::string();
  }
};

// The job a pooled worker received (pool_job_wire.hpp); {"invalid": why} when it is not a JSON
// object.
json take_job(const PoolJobRead& got) {
  // This worker holds a call: if the server dies now, the run ends with its record. (A pooled
  // worker has had SIGTERM as its parent-death signal from its start, mcp_pool.cpp: set again
  // here, so that nothing before the call can have changed it.)
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (got.kind != PoolJobRead::job) return json{{"invalid", got.why}};
  auto job = parse_json_doc(got.text, {kMaxJobBytes}, "usage", "mcp worker job");
  if (!job || !job->is_object()) return json{{"invalid", job ? "the job is not an object" : job.error().message}};
  return std::move(*job);
}

// Why a pooled sandbox cannot be handed out, from what poll saw ("" when it still can): what init
// said (`said`: its setup error), init gone, or a signal.
std::string unusable_sandbox(const pollfd (&fds)[4], const std::string& said) {
  if (!said.empty()) return said;
  if (fds[1].revents) return "the pooled sandbox's init died before hand-out";
  if (fds[2].revents) return "the pooled sandbox's init reported before hand-out";
  if (fds[3].revents) return "a signal reached the pooled worker before hand-out";
  return "";
}

// One report of init's before hand-out. A prepared interpreter's readiness (kWarmReady,
// runtime/launch/warm_start.hpp) goes into the pool note and returns ""; anything else is why the
// sandbox cannot be used (a setup error's own words: a preload that failed names its module).
// `setup_error` is set when init said why (its setup failed), not when it just died.
std::string take_init_report(const PoolPause& pause, json& meta, std::int64_t t_created_us, bool* setup_error) {
  ChildMsg m;
  ReportRead got = read_init_report(pause.init_msg_fd, m);
  if (got == ReportRead::kAgain) return "";
  if (got != ReportRead::kReport) return "the pooled sandbox's init died before hand-out";
  if (m.kind == ChildMsg::kWarmReady) {
    m.message[sizeof m.message - 1] = 0;
    json warm = trace_object({{"pool/warm/interpreter", pause.warm.interpreter},
                              {"pool/warm/preload", pause.warm.preload},
                              {"pool/warm/ready_ms", (monotonic_us() - t_created_us) / 1000}});
    if (m.message[0]) put(warm, "pool/warm/note", printable(m.message));
    put(meta, "pool/warm", warm);
    return "";
  }
  if (m.kind == ChildMsg::kSetupError) {
    m.message[sizeof m.message - 1] = 0;
    m.stage[sizeof m.stage - 1] = 0;
    std::string why = printable(m.message);
    if (m.err) why += std::string(" (") + std::strerror(m.err) + ")";
    *setup_error = true;
    // A prepared interpreter's execve (warm_start.hpp) that found nothing: the image lacks it.
    if (!pause.warm.interpreter.empty() && std::string_view(m.stage) == "execve" && m.err == ENOENT)
      if (const WarmInterpreter* i = find_warm_interpreter(pause.warm.interpreter))
        return std::string("the image has no ") + i->path + " (" + why + "): use an image with " + i->name +
               ", or another warm.interpreter";
    return std::string("the pooled sandbox failed before hand-out: ") + printable(m.stage) + ": " + why;
  }
  return "the pooled sandbox's init reported before hand-out";
}

// The hand-out's timings in the pool note, for bench/mcp_pool.py's breakdown.
void note_handout(json& meta, const json& job, std::int64_t ready_us, const std::string& unusable) {
  std::int64_t now = monotonic_us();
  std::int64_t sent = job.value("pool_sent_us", now);
  put(meta, "pool/hit", unusable.empty());
  // How long the call waited for this sandbox to be ready (0 when it was ready first).
  put(meta, "pool/waited_ms", std::max<std::int64_t>(0, (ready_us - sent) / 1000));
  // The hand-out's first leg: the server's send to this worker holding the parsed job (the
  // wake-up included).
  put(meta, "pool/handout_us", std::max<std::int64_t>(0, now - std::max(sent, ready_us)));
  // Not a record member: exec.cpp sees it, runs the call cold and records that run's own note.
  if (!unusable.empty()) meta["discard"] = unusable;
}

// A pooled worker (mcp_pool.hpp): its sandbox is built, init paused before the program's execve;
// it waits for the job (an fd on its stdin, a unix socket), the sandbox's death or a signal.
// Returns the job, or nullopt when none is coming (EOF: the server discards it) or the sandbox
// is unusable with no job waiting.
// `died` says why when the sandbox became unusable with no job waiting: the server may be handing
// one over at this very moment (it saw a live worker), so the caller must not just exit.
// `closed` is set when the server's end of the socket is closed (or broken): no job can come.
std::optional<json> await_pooled_job(const PoolPause& pause, json& meta, std::int64_t t_created_us, std::string* died,
                                     bool* closed, bool* setup_failed, const std::function<void()>& on_ready) {
  std::int64_t ready_us = monotonic_us();
  put(meta, "pool/ready_ms", (ready_us - t_created_us) / 1000);
  // A prepared interpreter is ready only once init says so: the server hears "ready" then.
  const WarmInterpreter* interp = find_warm_interpreter(pause.warm.interpreter);
  const bool warm = interp && interp->has_driver;
  // The pages this worker shares with its forked init made its own now, before it says it is
  // ready, rather than as copy-on-write faults in the call's plan (own_pages.hpp). Not when a
  // job is already waiting: the populate (~0.3 ms) would delay it more than the faults.
  pollfd job_waiting{STDIN_FILENO, POLLIN, 0};
  if (pause.init_shares_pages && ::poll(&job_waiting, 1, 0) == 0) own_writable_pages();
  if (!warm) on_ready();
  pollfd fds[4] = {{STDIN_FILENO, POLLIN, 0},
                   {pause.init_pidfd, POLLIN, 0},
                   {pause.init_msg_fd, POLLIN, 0},
                   {pause.signal_fd, POLLIN, 0}};
  std::string said;  // init's own words for why the sandbox is unusable
  bool announced = false, setup_error = false;
  for (;;) {
    int n = ::poll(fds, 4, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (fds[2].revents && said.empty()) {
      said = take_init_report(pause, meta, t_created_us, &setup_error);
      if (said.empty()) {  // ready (or nothing yet): the sandbox is still usable
        fds[2].revents = 0;
        if (warm && !announced && meta.contains("warm")) {
          announced = true;
          ready_us = monotonic_us();  // the call's waited_ms counts the preparation
          on_ready();
        }
      } else {
        fds[2].fd = -1;  // nothing more to read there
      }
    }
    // An unusable sandbox is not handed out. A job already waiting is still taken, and run cold.
    std::string unusable = unusable_sandbox(fds, said);
    if (!fds[0].revents && !unusable.empty()) {
      *died = unusable;
      *setup_failed = setup_error;
      return std::nullopt;
    }
    if (!fds[0].revents) continue;
    PoolJobRead got = recv_pool_job(STDIN_FILENO, kMaxJobBytes);
    if (got.kind == PoolJobRead::again) continue;
    if (got.kind == PoolJobRead::closed) {  // EOF: the server is done with this sandbox
      *closed = true;
      return std::nullopt;
    }
    json parsed = take_job(got);
    if (parsed.contains("invalid")) return parsed;
    note_handout(meta, parsed, ready_us, unusable);
    // A call that came while the interpreter still imported its preloads runs in it once it is
    // ready (init waits): its record says what was prepared all the same.
    if (interp && !meta.contains("warm"))
      put(meta, "pool/warm",
          trace_object({{"pool/warm/interpreter", pause.warm.interpreter},
                        {"pool/warm/preload", pause.warm.preload},
                        {"pool/warm/note", warm ? "the call came before the interpreter was ready, and waited for it"
                                                : "a shell has nothing to prepare: it starts at the call"}}));
    return parsed;
  }
}

// A pooled worker whose sandbox could not be built: it has told the server ("failed"), which
// hands it no call; a call the server sent before that note arrived is still taken, and runs
// cold. nullopt on EOF (the server retired it).
// wait_ms bounds the wait (-1: until EOF); nullopt on EOF or when it passed with no job.
std::optional<json> await_job_after_failed_build(int wait_ms) {
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
    PoolJobRead got = recv_pool_job(STDIN_FILENO, kMaxJobBytes);
    if (got.kind == PoolJobRead::again) continue;
    if (got.kind == PoolJobRead::closed) return std::nullopt;
    return take_job(got);
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

// A warm pool serves its interpreter's language (model/warm.hpp): "" when the job is in it (or the
// sandbox prepares no interpreter), else why the call runs cold.
std::string warm_language_refusal(const WarmSpec& warm, const json& job) {
  const WarmInterpreter* interp = find_warm_interpreter(warm.interpreter);
  if (!interp) return "";
  const json* request = job.contains("request") ? &job.at("request") : nullptr;
  std::string language =
      request && request->is_object() && request->contains("language") && request->at("language").is_string()
          ? request->at("language").get<std::string>()
          : "";
  if (language == interp->language) return "";
  return "the pooled sandbox prepared " + std::string(interp->name) + " for " + interp->language +
         " calls; this one is " + (language.empty() ? std::string("in no language") : "in " + printable(language));
}

// A line to the server on the worker's socket (mcp_pool.hpp: the worker's notes). Never blocks,
// never raises SIGPIPE: a server that is gone reads nothing anyway.
void tell_server(const std::string& note) {
  (void)!::send(STDIN_FILENO, note.data(), note.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// The hand-out's part common to run_code's and a pack's pooled sandbox: the pool note (pool.key:
// `key` and, under a tenant, its policy as built), the wait for the job (await_pooled_job), a job
// that is no JSON object kept as w.invalid. The job (also kept as w.job), or nullopt when none is
// to run here.
std::optional<json> take_pooled_job(PooledWait& w, const PoolPause& p, json& meta, json key,
                                    const std::optional<std::string>& tenant, const std::string& tenant_key,
                                    std::int64_t t0) {
  meta = trace_object({{"pool/hit", true}, {"pool/created_at", w.created_at}, {"pool/key", std::move(key)}});
  if (tenant)
    put(at(meta, "pool/key"), "pool/key/tenant",
        trace_object({{"pool/key/tenant/name", *tenant}, {"pool/key/tenant/policy", tenant_key}}));
  auto j = await_pooled_job(p, meta, t0, &w.died, &w.closed, &w.setup_failed,
                            [&] { tell_server(worker_note_ready(p.cgroup_path)); });
  if (!j) return std::nullopt;
  w.got_job = true;
  if (j->contains("invalid")) {
    w.invalid = *j;
    return std::nullopt;
  }
  w.job = *j;
  return j;
}

// A call the server sent to a template (mcp_template.hpp): forked from it unless the template is
// older than what the call runs under (its profile, image, preloads or sbx binary: the digest
// made now differs from the template's), then cold, its record's pool note saying why.
void from_template(RunRequest& run, const json& t, const Dirs& dirs) {
  auto binary = self_binary_sha256(dirs);
  std::string now = template_digest(run.profile.resolved_sha256, template_image_identity(run.spec.image, dirs),
                                    run.spec.warm, binary ? *binary : "");
  if (now != t.value("digest", "")) {
    // The reason the call runs cold, over any note it came with (a pool's "none was ready").
    put(run.record_extra, "pool",
        trace_object({{"pool/hit", false},
                      {"pool/reason",
                       "the template is older than this call's profile, image or sbx binary "
                       "(it is rebuilt at --pool-max-idle)"}}));
    return;
  }
  run.from_template.socket = t.value("socket", "");
  run.from_template.listener_pid = t.value("listener_pid", pid_t{0});
  run.from_template.listener_id = t.value("listener_id", std::uint64_t{0});
  run.from_template.key = t.value("key", "");
  run.from_template.record = trace_object(
      {{"sandbox/template/digest", t.value("digest", "")}, {"sandbox/template/run_id", t.value("run_id", "")}});
  // Forked at the call: hit unless the call came with a note of why no fork made ahead served it.
  if (!run.record_extra.contains("pool")) put(run.record_extra, "pool", trace_object({{"pool/hit", true}}));
}

// Builds the pooled sandbox, tells the server it is ready, and waits for the job.
// `tmpl` ({socket, digest, run_id}, or null): the sandbox is forked from that template
// (mcp_template.hpp), or not built at all when the template is stale.
PooledWait build_and_wait(const WorkerContext& wctx, const std::string& profile, const json& tmpl) {
  PooledWait w;
  std::int64_t t0 = monotonic_us();
  w.created_at = rfc3339_now();
  ExecContext ctx;
  ctx.dirs = wctx.dirs;
  ctx.invocation_argv = wctx.argv;
  ctx.profile = profile;
  // Under --tenant the pooled sandbox is planned with the tenant applied too: its id slice,
  // umask and store are fixed when it is built, before any call exists. The policy's text is
  // read before it is applied: an edit in between makes the key differ at hand-out (a cold
  // run), never match a policy the sandbox was not built with.
  const auto& tenant = wctx.tenant;
  std::string tenant_key;
  // The first plan is the sandbox's (run_exec_pooled's placeholder), the second its call's.
  bool planned_sandbox = false;
  if (tenant || tmpl.is_object())
    ctx.before_run = [&](RunRequest& run) -> Status {
      if (tenant) {
        tenant_key = tenant_policy_key(*tenant);
        SBX_TRY(apply_named_tenant(tenant, run));
      }
      if (tmpl.is_object()) {
        from_template(run, tmpl, wctx.dirs);
        // A stale template builds no sandbox: the server's pool backs off, and the template is
        // rebuilt at --pool-max-idle (mcp_template.hpp); its calls run meanwhile as the note says.
        if (!planned_sandbox && run.from_template.socket.empty())
          return make_error("pool", at(run.record_extra, "pool").value("reason", std::string("stale template")));
      }
      planned_sandbox = true;
      return {};
    };
  json key = trace_object({{"pool/key/profile", profile}});  // a template's is the record's sandbox.template
  w.exec = run_exec_pooled(ctx, [&](const PoolPause& p, json& meta) -> std::optional<json> {
    auto j = take_pooled_job(w, p, meta, key, tenant, tenant_key, t0);
    if (!j) return std::nullopt;
    // A sandbox already disturbed keeps that reason, unless the job is not one it could serve.
    const bool disturbed = meta.contains("discard");
    auto why = pooled_job_refusal(*j, profile, disturbed ? std::optional<std::string>() : tenant, tenant_key,
                                  [&] { return tenant_policy_key(*tenant); });
    if (why.empty()) why = warm_language_refusal(p.warm, *j);
    if (!why.empty()) meta["discard"] = why;
    return j->value("request", json::object());
  });
  return w;
}
}  // namespace

bool is_template_key(std::string_view s) {
  return s.size() == kTemplateKeyBytes * 2 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Status read_template_key(int fd, json& tmpl, int timeout_ms) {
  // Exactly the key's bytes: the job that follows on the same socket is serve_pooled's to read.
  std::string key(kTemplateKeyBytes * 2, '\0');
  std::size_t got = 0;
  const std::int64_t deadline = monotonic_us() + timeout_ms * 1000LL;
  while (got < key.size()) {
    const std::int64_t left_ms = (deadline - monotonic_us()) / 1000;
    pollfd p{fd, POLLIN, 0};
    int r = left_ms > 0 ? ::poll(&p, 1, static_cast<int>(left_ms)) : 0;
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return make_error("usage", "mcp-worker --from-template: the template's key did not come", ETIMEDOUT);
    ssize_t n = ::read(fd, key.data() + got, key.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error("usage", "mcp-worker --from-template: the template's key did not come", EPIPE);
    got += static_cast<std::size_t>(n);
  }
  if (!is_template_key(key))
    return make_error("usage", "mcp-worker --from-template: the template's key is not one", EINVAL);
  tmpl["key"] = std::move(key);
  return {};
}

std::optional<std::string> worker_tenant() {
  const char* t = std::getenv(kMcpTenantEnv);
  return t ? std::optional<std::string>(t) : std::nullopt;
}

json worker_error(Stage stage, const std::string& message) {
  return {{"error", {{"stage", stage.name()}, {"message", message}}}};
}

int worker_exit_status(const json& response) {
  return response.contains("error") && !response.contains("status") ? 125 : 0;
}

Result<json> read_cold_job(int fd) {
  auto text = read_bounded_fd(fd, kMaxJobBytes, "usage", "the mcp worker's job");
  return text ? parse_json_doc(*text, {kMaxJobBytes}, "usage", "mcp worker job") : Result<json>(text.error());
}

std::string template_image_identity(const std::string& image, const Dirs& dirs) {
  if (image == "host") return image;
  auto rec = ImageStore(dirs.images).resolve(image);
  return rec ? rec->digest : "unresolved " + image;
}

json run_code_job(const json& job, const WorkerContext& wctx) {
  ExecContext ctx;
  ctx.dirs = wctx.dirs;
  ctx.invocation_argv = wctx.argv;
  ctx.profile = job.value("profile", kDefaultProfile);
  auto tenant = wctx.tenant;
  json tmpl = job.contains("template") && job["template"].is_object() ? job["template"] : json(nullptr);
  Dirs dirs = wctx.dirs;
  // The job's pool note (why no pooled sandbox served it) goes in before from_template, which
  // replaces it when the template itself is the reason the call runs cold.
  json pool_note = job.contains("pool") ? job["pool"] : json(nullptr);
  ctx.before_run = [tenant, tmpl, dirs, pool_note](RunRequest& run) -> Status {
    if (tenant) SBX_TRY(apply_named_tenant(tenant, run));
    if (!pool_note.is_null()) put(run.record_extra, "pool", pool_note);
    if (!tmpl.is_null()) from_template(run, tmpl, dirs);
    return {};
  };
  auto r = run_exec(job.value("request", json::object()), ctx);
  return r ? *r : worker_error(r.error().stage, r.error().describe());
}

namespace {
// A pack job's run as run_pack takes it, but its records and secrets (each call's own): the
// pack's private copy (load_pack_copy: the pack's directory may have changed since the server
// loaded it at start, and may change during the call: the copy is what runs), the profile's
// layers, the tenant's policy, the program's streams captured.
struct PackPlan {
  PackRunRequest req;
  LoadedProfile profile;
  RunRequest untenanted;  // req.run before the tenant was applied (tenant_drift applies it again)
  json tenanted;          // what applying it gave (tenant_fingerprint)
};

// What applying a tenant made of a request: its spec, its dirs (the tenant's store), the record's
// tenant member (ids, umask), the dirs its binds are kept from. Two equal fingerprints: the same
// sandbox, the same store.
json tenant_fingerprint(const RunRequest& run) {
  return {{"spec", spec_to_json(run.spec)},
          {"dirs", {run.dirs.state, run.dirs.traces, run.dirs.data, run.dirs.images}},
          {"tenant", run.record_extra.value("tenant", json())},
          {"guarded", run.tenant.guarded_dirs},
          {"umask", run.tenant.umask}};
}

// The tenant's policy as it is now, applied again (at a pooled pack sandbox's hand-out) to the
// request the sandbox was planned from: "" when it gives what the sandbox was built with, else why
// the call runs cold. A pooled run_code call is planned afresh at hand-out (exec.cpp), the tenant
// applied with it; a pack's sandbox holds copies made at build, so this is its equivalent: every
// check apply_tenant makes (its store still private, the image and pack still allowed, ceilings)
// made again, and what it decides compared with the build's.
std::string tenant_drift(const PackPlan& plan, const std::optional<std::string>& tenant) {
  if (!tenant) return "";
  RunRequest now = plan.untenanted;
  const Pack& pack = plan.req.pack;
  if (auto st = apply_named_tenant(tenant, now, json{{"name", pack.name}, {"digest", pack.digest}}); !st)
    return "tenant " + *tenant + " refuses the call now: " + st.error().message;
  if (tenant_fingerprint(now) != plan.tenanted)
    return "tenant " + *tenant + "'s policy, applied again, no longer gives the pooled sandbox's store, ids or limits";
  return "";
}
Result<PackPlan> plan_pack_job(const json& job, const WorkerContext& wctx, Capture& out, Capture& err) {
  std::vector<PackProblem> problems;
  auto pack = load_pack_copy(job.value("dir", ""), wctx.dirs.state, problems);
  if (!pack) return make_error("usage", problems.empty() ? pack.error().message : problems.front().describe());
  auto profile = load_profile(job.value("profile", kDefaultProfile));
  if (!profile) return make_error("usage", profile.error().describe());
  auto merged = spec_from_layers(*profile, &pack->spec_patch, pack->source_dir + "/pack.json");
  if (!merged) return make_error("usage", merged.error().message);
  auto spec = wctx.with_command(std::move(*merged), pack->entrypoint);
  if (!spec) return make_error("usage", spec.error().message);
  PackPlan plan;
  plan.profile = std::move(*profile);
  PackRunRequest& req = plan.req;
  req.pack = std::move(*pack);
  req.run.spec = std::move(*spec);
  req.run.profile = plan.profile.source;
  req.run.dirs = wctx.dirs;
  req.run.limit_layers = limit_layers(plan.profile, &req.pack.spec_patch, req.pack.source_dir + "/pack.json", {});
  req.run.limit_raise = CeilingRaise::by_profile;  // an MCP call takes no --timeout
  req.run.invocation_argv = wctx.argv;
  // What a pooled sandbox prepares is the pack's own warm key, never the profile's (run_code's).
  req.run.spec.warm = req.pack.warm;
  if (wctx.tenant) plan.untenanted = req.run;
  if (auto st = apply_named_tenant(wctx.tenant, req.run, json{{"name", req.pack.name}, {"digest", req.pack.digest}});
      !st)
    return make_error("usage", st.error().message);
  if (wctx.tenant) plan.tenanted = tenant_fingerprint(req.run);
  req.input_path = "mcp:tools/call";
  for (auto& c : job.value("contexts", json::array()))
    if (c.is_array() && c.size() == 2 && c[0].is_string() && c[1].is_string()) req.contexts.push_back({c[0], c[1]});
  if (!out.fd.ok() || !err.fd.ok()) return make_error("mcp", "memfd_create for the captured output");
  req.run.io.stdout_fd = out.fd.get();
  req.run.io.stderr_fd = err.fd.get();
  return plan;
}

// `dirs`: the run's own (the tenant's store under --tenant), whose ledger holds its record.
json pack_response(const PackRunResult& res, const Capture& out, const Capture& err, const Dirs& dirs) {
  // Refused before anything ran (a context that cannot be copied: run_pack): nothing to record.
  if (!res.recorded && res.record_error.empty() && !res.errors.empty()) return worker_error("pack", res.errors.front());
  if (!res.recorded)
    return worker_error(
        "record", "the run's trace record could not be stored (" + res.record_error + "): its result is withheld");
  return {{"run_id", res.trace.value("run_id", "")},
          {"status", to_string(res.status)},
          {"error", res.error.empty() ? json(nullptr) : json(res.error)},
          {"result", res.status == RunStatus::ok ? res.result : json(nullptr)},
          {"errors", res.errors},
          {"stdout", out.read_all()},
          {"stderr", err.read_all()},
          {"violations", res.trace.value("violations", json::array())},
          {"made_by", res.trace.value("sandbox", json::object()).value("made_by", json(nullptr))},
          {"trace", dirs.traces + "/" + kLedgerName}};
}

// The job's keys that a pack's pooled sandbox was built for (mcp_pool.hpp): a call differing in
// any runs cold. The records are the call's own.
bool same_pack_key(const json& job, const json& key) {
  for (const char* k : {"tool", "profile", "dir", "contexts", "secrets"})
    if (job.value(k, json()) != key.value(k, json())) return false;
  return true;
}
}  // namespace

json run_pack_job(const json& job, const WorkerContext& wctx) {
  Capture out, err;
  auto plan = plan_pack_job(job, wctx, out, err);
  if (!plan) return worker_error(plan.error().stage, plan.error().message);
  PackRunRequest& req = plan->req;
  if (job.contains("pool")) put(req.run.record_extra, "pool", job["pool"]);
  json records = job.value("records", json::array());
  req.input_bytes = dump_json(records, -1);
  // Read at each call (`sbx mcp --secret`, checked readable at the server's start): a file that
  // is gone now fails this call, naming the secret and its file, never its value.
  for (auto& s : job.value("secrets", json::array())) {
    if (!s.is_array() || s.size() != 2 || !s[0].is_string() || !s[1].is_string()) continue;
    auto value = read_secret_source(s[1].get<std::string>());
    if (!value) {
      for (auto& [n, v] : req.secrets) wipe(v);
      return worker_error(
          "usage", "--secret " + req.pack.name + "/" + s[0].get<std::string>() + ": " + value.error().describe());
    }
    req.secrets.push_back({s[0].get<std::string>(), std::move(*value)});
  }
  PackRunResult res = run_pack(req);
  return pack_response(res, out, err, req.run.dirs);  // the tenant's store under --tenant
}

json answer_job(const Result<json>& job, const WorkerContext& ctx) {
  if (!job || !job->is_object()) return worker_error("usage", job ? "the job is not an object" : job.error().message);
  if (job->value("tool", "") == "run_code") return run_code_job(*job, ctx);
  if (job->value("tool", "") == "pack") return run_pack_job(*job, ctx);
  return worker_error("usage", "unknown job tool");
}

std::string pooled_job_refusal(const json& job, const std::string& profile, const std::optional<std::string>& tenant,
                               const std::string& policy_at_build, const std::function<std::string()>& policy_now) {
  if (job.value("tool", "") != "run_code" || job.value("profile", "") != profile)
    return "the job is not a run_code call under profile " + profile;
  if (tenant && policy_now() != policy_at_build)
    return "tenant " + *tenant + "'s policy changed since the pooled sandbox was built";
  return "";
}

std::string pooled_pack_job_refusal(const json& job, const json& pack_key, const std::optional<std::string>& tenant,
                                    const std::string& policy_at_build,
                                    const std::function<std::string()>& policy_now) {
  if (!same_pack_key(job, pack_key))
    return "the job is not a call of pack " + pack_key.value("dir", "") +
           " with the contexts and secrets it was built with";
  if (tenant && policy_now() != policy_at_build)
    return "tenant " + *tenant + "'s policy changed since the pooled sandbox was built";
  return "";
}

json cold_job(const json& request, const std::string& profile, const json& pool_note) {
  return {{"tool", "run_code"}, {"profile", profile}, {"request", request}, {"pool", pool_note}};
}

json cold_pack_job(const json& job, const json& pool_note) {
  json j = job;
  j.erase("pool_sent_us");
  j["pool"] = pool_note;
  return j;
}

Broken broken_sandbox(const PooledWait& w) {
  const auto& res = w.exec;
  // A sandbox that could not be built: the server is told (it then hands this worker no call,
  // and retires it), and a call it sent before the note arrived runs cold here, its record
  // saying why. (One that died before its call came ends instead: the server reaps it.)
  if (!res && !w.got_job) return {"the pooled sandbox could not be built: " + res.error().describe(), -1};
  if (res && res->request.is_null() && res->build_error)
    return {"the pooled sandbox could not be built: " + res->build_error->describe(), -1};
  // A sandbox that died before its job came: the server, which saw a live worker, may be
  // sending the job right now. Told, it hands this worker nothing more; one it already sent
  // arrives within the grace and runs cold here (without it the call would be lost: "the worker
  // ended without a response"). Past the grace the worker shuts its socket for reading, takes a
  // job sent until then, and otherwise ends, no record.
  // One whose setup failed before its call (a prepared interpreter's preload: runtime/launch/warm_start.hpp)
  // is a failed build: the server retires it at its next call, which runs cold; the pool does not
  // rebuild it meanwhile, over and over.
  if (res && res->request.is_null() && w.setup_failed) return {w.died, -1};
  if (res && res->request.is_null() && !w.died.empty()) return {w.died, kDiedJobGraceMs};
  // Ended before its hand-out for any other reason, the server's socket still open: a call may
  // be waiting in it (sent while this worker was still starting) and is run cold, as above. Only
  // EOF (the server retired this sandbox) means that none can be there.
  if (res && res->request.is_null() && !w.got_job && !w.closed)
    return {"the pooled sandbox ended before hand-out", kDiedJobGraceMs};
  return {};
}

PooledNext after_broken_wait(const std::optional<json>& job, const std::string& why, const std::string& profile,
                             const std::string& created_at) {
  PooledNext next;
  json note = trace_object({{"pool/hit", false}, {"pool/reason", why}, {"pool/created_at", created_at}});
  if (!job) next.nothing = true;  // retired: nothing to answer, nothing recorded
  else if (job->contains("invalid")) next.response = worker_error("usage", job->value("invalid", "bad job"));
  // The job is the server's (mcp_server.cpp writes its "tool"): a pack's runs cold as it came.
  else if (job->value("tool", "") == "pack") next.job = cold_pack_job(*job, note);
  else next.job = cold_job(job->value("request", json::object()), profile, note);
  return next;
}

PooledNext after_pooled_wait(const PooledWait& w, const std::string& profile) {
  PooledNext next;
  const auto& res = w.exec;
  if (!w.invalid.is_null()) {
    next.response = worker_error("usage", w.invalid.value("invalid", "bad job"));
  } else if (!res) {
    next.response = worker_error(res.error().stage, res.error().describe());
  } else if (res->request.is_null()) {
    next.nothing = true;  // the server closed the socket before any call: nothing to answer, nothing recorded
  } else if (!res->response.is_null()) {
    next.response = res->response;
  } else {
    // Served cold here: the pooled sandbox was unusable or not made for this call.
    json note = trace_object({{"pool/hit", false},
                              {"pool/reason", res->pool_meta.value("discard", res->cold_reason)},
                              {"pool/created_at", w.created_at}});
    // A pack's pooled wait keeps the server's whole job as its request (build_and_wait_pack).
    next.job = w.pack ? cold_pack_job(res->request, note) : cold_job(res->request, profile, note);
  }
  return next;
}

namespace {
// A pack's pooled worker (mcp_pool.hpp): builds the sandbox for the pack `pack_key` names (the
// server's job less its records: dir, contexts, secrets) as run_pack_job would, and waits for a
// call of it (run_pack_pooled, pack_run.hpp, checks the rest at hand-out). The server's whole job
// is the wait's request: a call that cannot run here runs cold as it came.
PooledWait build_and_wait_pack(const WorkerContext& wctx, const std::string& profile, const json& pack_key) {
  PooledWait w;
  w.pack = true;
  std::int64_t t0 = monotonic_us();
  w.created_at = rfc3339_now();
  json key = pack_key;
  key["tool"] = "pack";
  key["profile"] = profile;
  const auto& tenant = wctx.tenant;
  // Read before plan_pack_job applies the policy (build_and_wait says why).
  const std::string tenant_key = tenant ? tenant_policy_key(*tenant) : "";
  Capture out, err;
  auto plan = plan_pack_job(key, wctx, out, err);
  if (!plan) {
    w.exec = plan.error();
    return w;
  }
  const json pack_id =
      trace_object({{"pool/key/pack/name", plan->req.pack.name}, {"pool/key/pack/digest", plan->req.pack.digest}});
  PooledPack pooled = run_pack_pooled(
      plan->req, plan->profile, profile, [&](const PoolPause& p, json& meta) -> std::optional<std::string> {
        auto j = take_pooled_job(w, p, meta, trace_object({{"pool/key/profile", profile}, {"pool/key/pack", pack_id}}),
                                 tenant, tenant_key, t0);
        if (!j) return std::nullopt;
        const bool disturbed = meta.contains("discard");
        auto why = pooled_pack_job_refusal(*j, key, disturbed ? std::optional<std::string>() : tenant, tenant_key,
                                           [&] { return tenant_policy_key(*tenant); });
        if (why.empty() && !disturbed) why = tenant_drift(*plan, tenant);
        if (!why.empty()) meta["discard"] = why;
        json records = j->value("records", json::array());
        return dump_json(records, -1);
      });
  PooledExec e;
  e.request = pooled.called ? w.job : json(nullptr);
  e.pool_meta = pooled.pool_meta;
  e.cold_reason = pooled.cold_reason;
  e.build_error = pooled.build_error;
  if (pooled.called && pooled.cold_reason.empty())
    e.response = pack_response(pooled.result, out, err, plan->req.run.dirs);
  w.exec = std::move(e);
  return w;
}
}  // namespace

PooledNext serve_pooled(const WorkerContext& ctx, const std::string& profile, const json& pack_key, const json& tmpl) {
  PooledWait w =
      pack_key.is_object() ? build_and_wait_pack(ctx, profile, pack_key) : build_and_wait(ctx, profile, tmpl);
  Broken broken = broken_sandbox(w);
  if (broken.why.empty()) return after_pooled_wait(w, profile);
  std::fprintf(stderr, "sbx: mcp: pool: %s\n", printable(broken.why).c_str());
  tell_server(worker_note_failed(broken.why));
  return after_broken_wait(await_job_after_failed_build(broken.grace_ms), broken.why, profile, w.created_at);
}

}  // namespace sbx::mcp
