#include "runtime/launch/sandbox.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <spdlog/spdlog.h>

#include "runtime/image/artifact_export.hpp"
#include "runtime/model/caps.hpp"
#include "runtime/linux/cgroup.hpp"
#include "runtime/launch/child.hpp"
#include "runtime/launch/facility.hpp"
#include "runtime/launch/handshake.hpp"
#include "runtime/linux/clone.hpp"
#include "runtime/model/environment.hpp"
#include "runtime/linux/events.hpp"
#include "runtime/base/clock.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/base/raw_syscall.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/linux/gpu.hpp"
#include "runtime/image/image_manifest.hpp"
#include "runtime/image/image_seal.hpp"
#include "runtime/image/image_store.hpp"
#include "runtime/linux/limits_plan.hpp"
#include "runtime/linux/memory_fallback.hpp"
#include "runtime/base/log.hpp"
#include "runtime/launch/preflight.hpp"
#include "runtime/record/ledger_key.hpp"
#include "runtime/egress/proxy.hpp"
#include "runtime/linux/seccomp_policy.hpp"
#include "runtime/linux/unix_peer.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/signals.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/launch/supervisor.hpp"
#include "runtime/launch/template_pid1.hpp"
#include "runtime/launch/trace.hpp"
#include "runtime/image/self_digest.hpp"
#include "runtime/record/pg_client.hpp"
#include "runtime/record/trace_mirror.hpp"
#include "runtime/record/trace_store.hpp"
#include "runtime/base/units.hpp"
#include "runtime/base/text_escape.hpp"

extern char** environ;

namespace sbx {
namespace {
using nlohmann::json;

constexpr unsigned long kNamespaces =
    CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;

// A pipe, both ends close-on-exec: `r` stays with the supervisor, `w` goes to the program, which
// gets it by number (child.cpp); the supervisor's copy of `w` is closed right after clone. The
// handshake's own pipes and sockets are InitChannel's (handshake.hpp).
struct FdPair {
  UniqueFd r, w;
  Status open_pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return sys_error("prepare", "pipe");
    r.reset(fds[0]);
    w.reset(fds[1]);
    return {};
  }
};

bool offers_limits(const CgroupInfo& cg) {
  for (const auto& c : cg.controllers)
    if (c == "memory" || c == "pids" || c == "cpu") return true;
  return false;
}

// Inside a container's cgroup namespace: how many processes its root held when the run started
// (0 after `sbx cgroup-init`; more, and run cgroups cannot get controllers) and which controllers
// it enabled for its children. null outside one.
json namespace_root_json(const CgroupInfo& cg) {
  if (!cg.namespace_root) return nullptr;
  std::string ctl;
  if (auto t = read_file(cg.mount + "/cgroup.subtree_control")) ctl = *t;
  while (!ctl.empty() && ctl.back() == '\n') ctl.pop_back();
  return trace_object({{"host/cgroup/namespace_root/procs", cg.namespace_root_procs},
                       {"host/cgroup/namespace_root/subtree_control", ctl}});
}

// How the run cgroup's parent was obtained: sbx's own cgroup as root on the real root (the root
// subtree), a systemd user scope sbx re-executed itself in (cli/systemd_scope.hpp), or the cgroup
// sbx was started in (delegated to it); "none" when the run has no cgroup.
std::string cgroup_obtained_by(const CgroupInfo& cg, bool have_cgroup, const std::string& via_scope) {
  if (!have_cgroup) return "none";
  if (cg.root_subtree) return "root subtree";
  if (via_scope == "auto") return "systemd user scope (automatic)";
  if (via_scope == "flag") return "systemd user scope (--systemd-scope)";
  if (via_scope == "reused") return "systemd user scope (reused)";
  return "own cgroup";
}

json host_json(const CgroupInfo& cg, const std::string& obtained_by, const std::string& systemd_scope,
               const std::string& scope_unit) {
  struct utsname u;
  ::uname(&u);
  json c = trace_object(
      {{"host/cgroup/layout", cg.layout},
       {"host/cgroup/mount", cg.mount},
       {"host/cgroup/self_path", cg.self_path},
       {"host/cgroup/controllers", cg.controllers},
       {"host/cgroup/run_cgroups_under", cg.root_subtree && offers_limits(cg) ? cg.mount + "/sbx" : std::string()},
       {"host/cgroup/obtained_by", obtained_by},
       {"host/cgroup/namespace_root", namespace_root_json(cg)}});
  if (!systemd_scope.empty()) put(c, "host/cgroup/systemd_scope", systemd_scope);
  if (!scope_unit.empty()) put(c, "host/cgroup/scope_unit", scope_unit);
  json host = trace_object({{"host/kernel", u.release}});
  put(host, "host/cgroup", std::move(c));
  return host;
}

json cgroup_usage_json(const CgroupUsage& u) {
  auto opt = [](const std::optional<std::int64_t>& x) { return x ? json(*x) : json(nullptr); };
  auto ms = [](const std::optional<std::int64_t>& us) { return us ? json(*us / 1000) : json(nullptr); };
  json out = trace_object({{"usage/memory_peak_bytes", opt(u.memory_peak_bytes)},
                           {"usage/pids_peak", opt(u.pids_peak)},
                           {"usage/oom_kills", opt(u.oom_kill)},
                           {"usage/cpu_user_ms", ms(u.cpu_user_us)},
                           {"usage/cpu_sys_ms", ms(u.cpu_system_us)},
                           {"usage/cpu_usage_ms", ms(u.cpu_usage_us)},
                           {"usage/cpu_throttled_periods", opt(u.nr_throttled)},
                           {"usage/cpu_throttled_ms", ms(u.throttled_us)}});
  // Every process of the run, reaped by anyone or by none (trace.cpp's default is "rusage").
  if (u.cpu_user_us) put(out, "usage/cpu_source", "cgroup");
  return out;
}

// The GPU plan's environment (gpu.hpp) over the built one: LD_LIBRARY_PATH goes after one the
// caller set; PATH and the CDI spec's variables do not replace what --env or the profile set.
void add_gpu_environment(std::vector<std::string>& envp, const GpuPlan& gpu, const RunSpec& spec) {
  for (auto& [k, v] : gpu.env) {
    std::string prefix = k + "=";
    auto it = std::find_if(envp.begin(), envp.end(), [&](const std::string& e) { return e.rfind(prefix, 0) == 0; });
    if (it == envp.end()) {
      envp.push_back(prefix + v);
    } else if (k == "LD_LIBRARY_PATH") {
      *it += ":" + v;
    } else if (!spec.env.count(k)) {
      *it = prefix + v;
    }
  }
}

}  // namespace

namespace {
// What a run holds only while its sandbox is prepared, started and supervised. It is released
// (in the reverse order of these members) once the outcome is collected, before the caller's
// after_run and the record: by then SIGPIPE's disposition and the signal mask are back, the
// proxy's connections are closed, the caller's terminal is restored and every fd of the launch
// is closed.
struct Launch {
  explicit Launch(const StdinPlan& plan) : caller_in(plan) {}
  ChildConfig cfg;
  // The handshake with init: its go/start bytes, its reports, its fd hand-offs (handshake.hpp).
  InitChannel chan;
  FdPair out, err;  // the program's stdout, stderr
  // The caller's stdin: a pipe fed by the supervisor, a pty, or /dev/null (stdin_relay.hpp).
  // Its session ends, and the caller's terminal settings are restored, on every way out.
  CallerStdin caller_in;
  std::optional<EgressProxy> proxy;
  std::optional<SignalMaskGuard> mask_guard;
  std::optional<SignalDispositionGuard> sigpipe_guard;
  UniqueFd sigfd;       // the forwarded signals (signals.hpp)
  bool shared = false;  // the init shares our address space (clone.hpp)
  pid_t pid = -1;
  UniqueFd pidfd;
  bool init_is_child = true;  // false: a template's fork plays init (spawn_from_template)
  bool timed_out_in_setup = false;
  int kill_grace_ms = SuperviseInput{}.kill_grace_ms;
};

// One invocation's run (docs/ARCHITECTURE.md, "A run, phase by phase"). execute() is its table
// of contents; each phase reads and fills the members below. A phase that returns false has
// noted why in `facts_` (a setup error, a signal before the start) or set `discarded_`. How the
// run ended is decided once, from `facts_` alone (decide_end; decide_outcome, outcome.hpp).
class Run {
 public:
  explicit Run(const RunRequest& req);
  RunReport execute();

 private:
  // 1 prepare
  bool prepare();
  bool prepare_child();
  bool prepare_channels();
  bool prepare_proxy();
  bool prepare_signals();
  // 2 spawn
  bool spawn();
  bool spawn_from_template(UniqueFd sock, UniqueFd job);
  bool start_init();
  bool check_seal();
  bool hand_out();
  // 3 supervise
  void supervise_run();
  SuperviseInput supervise_input();
  void take_call_limits(SuperviseInput& in);
  void prepare_supervisor();
  void end_supervisor();
  void bound_events();
  // 4 collect
  void collect();
  void export_artifacts();
  void classify_end();
  void collect_violations();
  void decide_end();
  nlohmann::json typed_io();
  RunReport discard();
  // 5 record
  RunReport record(nlohmann::json extra);
  void add_outputs(RunReport& report, nlohmann::json& extra) const;
  void emit_exited(RunReport& report);
  void store(RunReport& report, const std::string& run_id);
  void tell_user() const;
  LimitFacts limit_facts() const;
  // 6 clean
  void clean();

  bool fail_setup(const Error& e);
  void kill_init();
  void describe_request();
  const RunSpec& spec() const { return call_spec_; }

  const RunRequest& req_;
  // Where the time of a run goes (-vv; the record's usage.phases_us, all but record, and for a
  // pooled call no prepare, which -vv shows as the sandbox's build and idle wait): prepare;
  // start (clone + id maps, and with a shared init the sandbox's whole setup up to the program's
  // execve; with a forked init the image's seal); run (the rest: setup of a forked init, the
  // program, until the sandbox is empty); record (trace + durable store).
  std::int64_t t_start_ = monotonic_us(), t_spawn_ = 0, t_go_ = 0, t_end_ = 0;
  NonBlockingLogScope log_never_blocks_;
  RunSpec call_spec_;  // a copy: a pooled sandbox takes its call's spec at hand-out (hand_out)
  nlohmann::json record_extra_;
  std::function<AfterRun(const Outcome&, int out_fd)> after_run_;
  bool key_refusal_said_ = false;  // the signing key was refused at setup (the record cannot be signed)
  bool discarded_ = false;         // a pooled sandbox no call was handed to
  bool handed_out_ = false;        // a pooled sandbox's call arrived (what fails before is no run of it)
  TraceParts parts_;
  std::string cwd_ = current_dir();
  CgroupInfo cg_ = detect_cgroup();
  bool described_ = false;
  nlohmann::json inputs_;
  nlohmann::json stdin_record_;
  UniqueFd out_dir_fd_;
  std::optional<ExportResult> exported_;
  std::string export_error_;
  RunFacts facts_;  // what the phases saw of how the run ended (outcome.hpp)
  // The run cgroup's counters of limits hit (pids.events max, memory.events oom + oom_kill).
  std::int64_t pids_max_events_ = 0, memory_oom_events_ = 0;
  std::vector<LimitHit> hits_;  // decided in record(): the record's result.limits_hit, the end line
  Outcome outcome_;             // decided from facts_ by decide_end(), then the contract's verdict (typed_io)
  std::optional<SuperviseResult> sup_;
  // The supervisor's input and the supervisor made from it (a pooled sandbox's before its call).
  SuperviseInput sup_in_;
  std::optional<PreparedSupervisor> prepared_sup_;
  std::optional<EventStream> events_;
  std::optional<Error> events_error_;
  SharedInitStack init_stack_;  // declared before anything that may outlive init
  pid_t exiting_init_ = -1;     // init reported an empty sandbox and is still exiting: reaped in clean()
  std::optional<NonDumpableWhileShared> non_dumpable_;  // a shared init's: until it is reaped (clone.hpp)
  Result<IdentityPlan> identity_;
  // What the facilities prepared (facility.hpp): the limit plan and the run cgroup, the mount
  // plan, the image, the seccomp programs; the record's `enforcement` is built from it.
  RunContext ctx_{req_, cwd_, cg_, identity_, false};
  std::optional<Launch> launch_;
};

Run::Run(const RunRequest& req)
    : req_(req),
      call_spec_(req.spec),
      record_extra_(req.record_extra),
      after_run_(req.typed.after_run),
      inputs_(req.typed.inputs),
      stdin_record_(CallerStdin(req.io.stdin_plan).to_json()),  // replaced by the relay's own once it ran
      identity_(plan_identity(req.spec, req.tenant.id_slot)) {
  parts_.run_id = req.run_id.empty() ? make_run_id() : req.run_id;
  parts_.started_at = rfc3339_now();
  const RunSpec& s = spec();
  parts_.image = trace_object({{"image/name", s.image}, {"image/digest", nullptr}, {"image/mounts", json::array()}});
  // Live events (events.hpp): opened first, so that a run that fails in setup still says so.
  if (!s.events.empty()) {
    auto ev = EventStream::open(s.events);
    if (ev) {
      events_.emplace(std::move(*ev));
      bound_events();
    } else events_error_ = ev.error();
  }
  ctx_.run_id = parts_.run_id;
  ctx_.parts = &parts_;
  if (events_) ctx_.events = &*events_;
}

RunReport Run::execute() {
  if (prepare() && spawn() && hand_out()) {
    supervise_run();
    collect();
  }
  decide_end();
  end_supervisor();  // before the launch and the facilities its fds and pointers came from
  launch_.reset();
  // A pooled sandbox whose build failed before any call came: no call ran, so no record; the
  // caller gets the error (its pool falls back to a cold run, mcp_pool.hpp).
  if (req_.pool.await_call && !handed_out_) discarded_ = true;
  if (discarded_) return discard();
  nlohmann::json extra = typed_io();
  RunReport report = record(std::move(extra));
  clean();
  return report;
}

bool Run::fail_setup(const Error& e) {
  facts_.setup_error = e;
  return false;
}

// The init is killed and reaped before the sandbox ran anything of the caller's (a setup step
// failed, the seal did not match, a pooled sandbox was discarded).
// A template's fork (spawn_from_template) is no child of ours: it is signalled through its pidfd,
// never by a pid that may have been reused, and its parent reaps it.
void Run::kill_init() {
  Launch& L = *launch_;
  if (L.pidfd.ok()) (void)raw::pidfd_send_signal(L.pidfd.get(), SIGKILL);
  else ::kill(L.pid, SIGKILL);
  if (L.init_is_child) reap_init(L.pid);
  L.pidfd.reset();
}

// The parts of the record that describe the request, not its outcome, are built once the
// sandbox is under way (after the start byte, hand_out), while init sets up or the program
// runs, off the critical path; a run that fails before that builds them at the end.
void Run::describe_request() {
  if (described_) return;
  described_ = true;
  json profile = trace_object({{"invocation/profile/name", req_.profile.name},
                               {"invocation/profile/origin", req_.profile.origin},
                               {"invocation/profile/sha256", sha256_hex(req_.profile.text)}});
  if (!req_.profile.resolved_sha256.empty())
    put(profile, "invocation/profile/resolved_sha256", req_.profile.resolved_sha256);
  parts_.invocation = trace_object({{"invocation/argv", req_.invocation_argv},
                                    {"invocation/cwd", cwd_},
                                    {"invocation/profile", std::move(profile)},
                                    {"invocation/pack", req_.typed.pack},
                                    {"invocation/spec", spec_to_json(spec())}});
  parts_.host = host_json(cg_, cgroup_obtained_by(cg_, ctx_.cgroup.has_value(), req_.scope.cgroup_via_scope),
                          req_.scope.systemd_scope, req_.scope.scope_unit);
}

// 1 prepare: the facilities in order (facility.hpp), the caller's sources and limits first, so
// that a missing --bind source or --require-limits refuses before anything is created (the
// checks --dry-run makes too); then what the launch itself needs.
bool Run::prepare() {
  if (req_.typed.refuse) {  // refused by the caller (input_invalid): nothing is created
    facts_.refused = *req_.typed.refuse;
    return false;
  }
  if (events_error_) return fail_setup(*events_error_);
  // A trace database URL that could never be used (or holds a password) refuses the run now: its
  // record would otherwise only queue, unshipped, with nobody told.
  if (auto url = effective_trace_db(spec().trace_db); !url.empty())
    if (auto why = check_trace_db_url(url); !why.empty())
      return fail_setup(make_error("usage", "trace_db / --trace-db: " + why));
  // A signing key that exists but may not be used (another user can write or read it) refuses
  // the run before it starts, rather than its record failing to store after the program ran.
  if (auto signer = LedgerSigner::load_default(); !signer) {
    key_refusal_said_ = true;  // the store fails for the same reason: said once
    return fail_setup(signer.error());
  }
  launch_.emplace(req_.io.stdin_plan);
  Status prepared = prepare_facilities(ctx_);
  for (auto& h : ctx_.inputs) inputs_.push_back(h);  // hashed --input, also for a run that fails later
  if (!prepared) return fail_setup(prepared.error());
  return prepare_child() && prepare_channels() && prepare_proxy() && prepare_signals();
}

// What init is told: identity, mounts, the program, its environment and rlimits.
bool Run::prepare_child() {
  Launch& L = *launch_;
  const RunSpec& s = spec();
  ChildConfig& cfg = L.cfg;
  cfg.mounts = std::move(ctx_.mounts);
  cfg.identity = *identity_;
  cfg.mounts.secret_files = req_.secrets.files;
  cfg.mounts.owner_uid = identity_->uid;
  cfg.mounts.owner_gid = identity_->gid;
  // The mount plan is final: the operations init runs are the ones the record lists.
  cfg.mounts.ops = mount_ops(cfg.mounts);
  put(parts_.image, "image/mounts", mount_ops_to_json(cfg.mounts.ops));
  if (auto st = L.chan.open_out_socket(); !st) return fail_setup(st.error());
  cfg.fds.out_sock = L.chan.init_out_socket();
  cfg.hostname = s.hostname;
  cfg.argv = s.argv;
  // With a pty the program's stdout is a terminal: the caller's TERM describes the terminal
  // that finally shows it.
  cfg.envp = build_environment(s, environ, ::isatty(STDOUT_FILENO) == 1 || req_.io.stdin_plan.mode == StdinMode::pty);
  if (ctx_.gpu.enabled) add_gpu_environment(cfg.envp, ctx_.gpu, s);
  for (auto& [name, value] : req_.secrets.env) cfg.envp.push_back(name + "=" + value);
  cfg.init_rlimits.clear();
  for (auto& [res, value] : ctx_.plan.fixed) cfg.init_rlimits.push_back({res, static_cast<rlim_t>(value)});
  cfg.rlimits = cfg.init_rlimits;  // the program's: init's, then the plan's (below)
  cfg.keep_caps = capability_mask(s.capabilities.keep);
  cfg.umask = req_.tenant.umask;
  if (ctx_.memory_fallback_applies() && sysv_ipc_capped(*identity_)) cfg.sysv_ipc_bytes = *s.limits.memory_bytes;
  for (auto& [res, value] : ctx_.plan.rlimits) cfg.rlimits.push_back({res, static_cast<rlim_t>(value)});
  return true;
}

// The pipes between the supervisor and init, the caller's stdin, the seccomp listener's hand-off.
bool Run::prepare_channels() {
  Launch& L = *launch_;
  ChildConfig& cfg = L.cfg;
  if (auto st = L.chan.open_pipes(); !st) return fail_setup(st.error());
  for (FdPair* p : {&L.out, &L.err})
    if (auto st = p->open_pipe(); !st) return fail_setup(st.error());
  if (auto st = L.caller_in.prepare(); !st) return fail_setup(st.error());
  cfg.fds.in = L.caller_in.child_in_fd();
  cfg.fds.pty_sock = L.caller_in.child_pty_sock();
  cfg.pty_size = L.caller_in.initial_size();
  cfg.fds.sync = L.chan.init_sync();
  cfg.supervisor_sync_fd = L.chan.supervisor_sync();
  cfg.fds.msg = L.chan.init_reports();
  cfg.fds.out = L.out.w.get();
  cfg.fds.err = L.err.w.get();
  if (ctx_.seccomp->enabled) {
    if (auto st = L.chan.open_listener_socket(); !st) return fail_setup(st.error());
    cfg.fds.listener_sock = L.chan.init_listener_socket();
    // A template's own filter has no listener (child.hpp, seccomp_listener).
    cfg.seccomp_listener = !req_.template_host;
    cfg.seccomp_filter = notify_program(ctx_.seccomp->reference);
    cfg.seccomp_reference = &ctx_.seccomp->reference;
  }
  return true;
}

// Egress proxy: init makes the listening socket inside the sandbox's netns and sends it back on
// a socketpair (proxy.hpp explains why this way).
bool Run::prepare_proxy() {
  Launch& L = *launch_;
  const RunSpec& s = spec();
  if (!ctx_.allow_rules) return true;  // not proxy mode (the network facility parsed the rules)
  if (auto st = L.chan.open_proxy_socket(); !st) return fail_setup(st.error());
  L.cfg.fds.proxy_sock = L.chan.init_proxy_socket();
  L.cfg.proxy_port = kProxyPort;
  ProxyConfig pc;
  if (events_)
    pc.on_violation = [ev = &*events_](const json& v) {
      json fields = v;
      fields.erase("time_ms");  // the event's own time_ms says when
      ev->emit("violation", std::move(fields));
    };
  pc.rules = std::move(*ctx_.allow_rules);
  pc.max_connections = s.network.max_connections;
  pc.max_bytes = s.network.max_bytes;
  pc.idle_timeout_ms = s.network.idle_timeout_ms;
  pc.start_ms = monotonic_ms();
  L.proxy.emplace(std::move(pc), L.chan.take_proxy_socket());  // the proxy owns it
  return true;
}

// The forwarded signals go to a signalfd; they must be blocked before clone so that none is
// lost in between (and init inherits the mask, which it wants for sigwaitinfo too). main()
// blocked them already (signals.hpp); the guards put the mask and SIGPIPE's disposition back
// when the launch is released. SIGPIPE is ignored so that a reader gone away is an EPIPE for
// the relays (output_relay.hpp), not the end of sbx and its record.
bool Run::prepare_signals() {
  Launch& L = *launch_;
  sigset_t forwarded, all_supervised;
  forwarded_signals(&forwarded);
  supervised_signals(&all_supervised);
  L.mask_guard.emplace(SIG_BLOCK, all_supervised);
  L.sigpipe_guard.emplace(SIGPIPE, SIG_IGN);
  L.sigfd.reset(::signalfd(-1, &forwarded, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!L.sigfd.ok()) return fail_setup(sys_error("prepare", "signalfd"));
  // A signal that came before the sandbox exists (while sbx prepared, or in its first
  // milliseconds, main.cpp) ends the run here: the program is not started, and the record
  // says why, as a terminal's Ctrl-C before a command starts means it never runs.
  // Not a pooled sandbox's build: a signal then is meant for the call it is handed (the server's
  // cancellation, or its death: mcp_pool.hpp), which may already wait in the worker's socket.
  // Left pending, it keeps the signalfd readable, and the hand-out (await_call) sees it: the
  // sandbox is discarded, a call already sent runs cold and the signal ends that run before its
  // program, recorded. Taken here, it discarded the build with the call unread and unrecorded.
  if (int sig = req_.pool.await_call ? 0 : take_pending_forwarded_signal()) {
    L.sigfd.reset();
    facts_.signal_before_start = sig;
    return false;
  }
  if (auto st = L.caller_in.begin_session(); !st) return fail_setup(st.error());
  return true;
}

// 2 spawn. Shared init (clone.hpp): without an image there is nothing for the supervisor to do
// while init builds the sandbox, so init runs in our address space. Init is a fork instead
//  - with an image: the supervisor takes the image's seal meanwhile;
//  - with a run cgroup: init is in it, and when the cgroup's OOM killer picks a process it
//    kills every process that shares the victim's address space — with a shared init that
//    would be sbx itself, and the run would end without its record.
//  - in a warm pool: the supervisor waits for the call while init waits before the execve.
namespace {
Result<UniqueFd> connect_template(const RunRequest::FromTemplate& want);  // below, with the template's other helpers
Result<UniqueFd> template_job(const ChildConfig& cfg, const std::vector<GeneratedFile>& files, bool pooled, bool trace);
}  // namespace

bool Run::spawn() {
  Launch& L = *launch_;
  t_spawn_ = monotonic_us();
  if (!req_.from_template.socket.empty()) {
    // A template that is gone (it died, or is being rebuilt), or whose socket is not its driver's,
    // leaves the call to a cold sandbox,
    // made here as for any run; the record's pool note says why (mcp_template.hpp).
    // The job first, then the connection: the template's accept loop gives a connection 2 s.
    const bool pooled = static_cast<bool>(req_.pool.await_call);
    auto job = template_job(launch_->cfg, req_.files, pooled, std::getenv("SBX_BENCH_TEMPLATE_STAGES") != nullptr);
    if (!job) return fail_setup(job.error());
    auto sock = connect_template(req_.from_template);
    if (sock) return spawn_from_template(std::move(*sock), std::move(*job));
    // A pooled sandbox is made for the template or not at all: its pool (mcp_template.hpp) is
    // the template's, and a call it cannot serve runs on the template's unpooled path.
    if (pooled) return fail_setup(sock.error());
    spdlog::info("template not reached: {}; the call runs cold", sock.error().describe());
    put(record_extra_, "pool",
        trace_object({{"pool/hit", false},
                      {"pool/reason", "the template could not be reached (" + sock.error().describe() + ")"}}));
  }
  // SBX_BENCH_FORKED_INIT=1 forks init where it would be shared: for measuring what the shared
  // init saves (bench/README.md, "Shared init"), never needed otherwise. It can only make a run
  // take the path runs with an image take, never a less isolated one.
  static const bool bench_forked = [] {
    const char* v = ::getenv("SBX_BENCH_FORKED_INIT");
    return v && std::strcmp(v, "1") == 0;
  }();
  // SBX_TEST_STOP_BEFORE_CLONE=1, a test hook (man sbx, ENVIRONMENT): sbx stops itself with
  // SIGSTOP once every check of the run is made and its mount plan is final, before the sandbox
  // is cloned, so that a test can change the host between the checks and init's mounts (a bind
  // source swapped: tests/integration/test_bind_swap.py) and then send SIGCONT. It can only
  // pause sbx, as any SIGSTOP could.
  static const bool test_stop_before_clone = [] {
    const char* v = ::getenv("SBX_TEST_STOP_BEFORE_CLONE");
    return v && std::strcmp(v, "1") == 0;
  }();
  if (test_stop_before_clone) ::raise(SIGSTOP);
  L.shared = !ctx_.image_fd.ok() && !ctx_.cgroup && !req_.pool.await_call && !bench_forked;
  L.cfg.pool_job = static_cast<bool>(req_.pool.await_call);
  if (L.cfg.pool_job) L.cfg.warm_argv = warm_driver_argv(spec().warm);  // the profile's `warm` (model/warm.hpp)
  L.cfg.shared_memory = L.shared;
  Result<CloneResult> child = CloneResult{};
  if (L.shared) {
    if (auto st = init_stack_.allocate(); !st) return fail_setup(st.error());
    L.cfg.program_stack_top = init_stack_.program_top();
    child = clone_shared(kNamespaces, init_entry, &L.cfg, init_stack_.top());
  } else {
    child = clone_sandbox(kNamespaces, ctx_.cgroup ? ctx_.cgroup->dir_fd() : -1, ctx_.in_cgroup);
  }
  if (!child) return fail_setup(child.error());
  if (child->pid == 0) run_init(L.cfg);  // never returns
  // SBX_TEST_KILL_AT_CLONE=1, a test hook (man sbx, ENVIRONMENT): sbx kills itself with SIGKILL
  // the moment clone returns, usually before init has run its first instruction, so the window
  // in which init's parent-death signal is not yet armed is hit on purpose
  // (tests/integration/test_kill_window.py). It can only end sbx, as any SIGKILL could.
  static const bool test_kill_at_clone = [] {
    const char* v = ::getenv("SBX_TEST_KILL_AT_CLONE");
    return v && std::strcmp(v, "1") == 0;
  }();
  if (test_kill_at_clone) ::kill(::getpid(), SIGKILL);
  L.pid = child->pid;
  L.pidfd.reset(child->pidfd);
  // Init's ends: it has its own fd table (no CLONE_FILES, also for the shared init: clone.hpp),
  // so the supervisor's copies go now.
  L.chan.close_init_ends();
  for (FdPair* p : {&L.out, &L.err}) p->w.reset();
  L.caller_in.close_child_ends();
  // Init waits for "go": each facility's step after clone (the id maps; the cgroup unless
  // clone3 placed init in it).
  if (auto st = facilities_after_clone(ctx_, L.pid); !st) {
    kill_init();
    Error e = st.error();
    add_setup_hint(e, spec(), *identity_, cwd_);  // e.g. no /proc to write the id maps in
    return fail_setup(e);
  }
  return start_init();
}

namespace {

// The call's job as the template's driver reads it (runtime/model/warm_template.py, _read_job):
// what init's ChildConfig would carry, as JSON (the filter as hex), a newline, then the files'
// bytes; in a sealed memfd, so that a job of any size travels as one fd. A pooled sandbox's
// (`pooled`) has no files: its /code and /in are empty until its call's pool job arrives on the
// sync pipe (pool_job.hpp; the driver's _pooled_pid1).
Result<UniqueFd> template_job(const ChildConfig& cfg, const std::vector<GeneratedFile>& files, bool pooled,
                              bool trace) {
  json rl = json::array();
  for (auto& [res, value] : cfg.rlimits) rl.push_back({res, static_cast<std::uint64_t>(value)});
  const MountPlan& m = cfg.mounts;
  // The call's scratch filesystems, as a cold sandbox's (mount_plan.cpp): made fresh in the fork.
  auto scratch = [](const std::string& dst, std::int64_t size, mode_t mode, bool noexec) {
    return json{{"dst", dst}, {"size", size}, {"inodes", tmpfs_inodes(size)}, {"mode", mode}, {"noexec", noexec}};
  };
  json tmpfs =
      json::array({scratch("/tmp", m.tmp_size_bytes, 01777, false), scratch("/dev/shm", m.tmp_size_bytes, 01777, true),
                   scratch("/out", m.out_size_bytes, 0755, false)});
  for (auto& t : m.tmpfs) tmpfs.push_back(scratch(t.dst, t.size_bytes, 01777, t.noexec));
  json f = json::array();
  for (auto& g : files) f.push_back({{"dst", g.dst}, {"mode", g.mode}, {"size", g.content.size()}});
  std::string filter = hex_lower(std::string_view(reinterpret_cast<const char*>(cfg.seccomp_filter.data()),
                                                  cfg.seccomp_filter.size() * sizeof(sock_filter)));
  json job = {{"argv", cfg.argv},           {"env", cfg.envp}, {"hostname", cfg.hostname},
              {"workdir", m.workdir},       {"rlimits", rl},   {"umask", cfg.umask},
              {"filter", filter},           {"files", f},      {"tmpfs", tmpfs},
              {"proc_masks", m.proc_masks}, {"trace", trace},  {"devpts", kDevptsOptions}};
  // Without a memory cgroup: the call's ipc namespace's SysV limits, as a cold init writes them.
  if (cfg.sysv_ipc_bytes > 0) {
    json sysv = json::array();
    for (auto& k : sysv_ipc_caps(cfg.sysv_ipc_bytes, ::sysconf(_SC_PAGESIZE))) sysv.push_back({k.path, k.value});
    job["sysv"] = std::move(sysv);
  }
  if (pooled) {
    job["pooled"] = true;
    job["pool_dirs"] = kPoolDirs;
    job["pool_dir_bytes"] = kPoolDirBytes;
  }
  std::string text = dump_json(job, -1) + "\n";
  for (auto& g : files) text += g.content;
  UniqueFd fd(::memfd_create("sbx-template-job", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.ok()) return sys_error("template", "memfd_create for the call's job");
  SBX_TRY(write_all(fd.get(), text, "the call's job"));
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
    return sys_error("template", "seal the call's job");
  return fd;
}

// A connection to the template's control socket at `path`; never waited for (a full backlog, a
// wedged template: EAGAIN, and the call runs cold). Its directory is in $TMPDIR (usually /tmp),
// whose names another user may take once the server removes a dead template's directory
// (mcp_template.hpp, ControlDir): a worker that connected there would send that user the call's
// job. So the socket is reached through its directory held open, once that directory is this
// user's and writable by no other (root's once the server sealed it; the caller's, rootless),
// and the socket too. And whoever may write that directory (rootless: any sandbox of the caller's
// that reaches it), the socket's listener must be the driver the server found there when the
// template was ready (`want`, TemplateLauncher::seal), or no job is sent.
Result<UniqueFd> connect_template(const RunRequest::FromTemplate& want) {
  const std::string& path = want.socket;
  const auto slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return Error{"template", EINVAL, "control socket path " + path};
  const std::string name = path.substr(slash + 1);
  UniqueFd dir(::open(path.substr(0, slash).c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.ok()) return sys_error("template", "open the template's control directory for " + path);
  struct stat d, s;
  if (::fstat(dir.get(), &d) != 0 || d.st_uid != ::geteuid() || (d.st_mode & 022) != 0 ||
      ::fstatat(dir.get(), name.c_str(), &s, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(s.st_mode) ||
      s.st_uid != ::geteuid())
    return Error{"template", EPERM, "the template's control socket " + path + " is not this user's"};
  auto sock = connect_unix_at(dir.get(), name, "the template at " + path, "template");
  if (!sock) return sock.error();
  // By its pidfd's inode where the server had one (no /proc read on a call's path), else by pid.
  auto peer = unix_peer(sock->get(), "template", want.listener_id == 0);
  if (!peer) return peer.error();
  if (want.listener_pid <= 0 || (want.listener_id != 0 ? peer->id != want.listener_id : peer->pid != want.listener_pid))
    return Error{"template", EPERM,
                 "the template's control socket " + path + " is not its driver's (another process listens there; " +
                     "the driver is process " + std::to_string(want.listener_pid) + ")"};
  return sock;
}

// Sends "call", the template's key and `fds` as one SEQPACKET message on `sock`.
Status send_to_template(const UniqueFd& sock, const std::vector<int>& fds, const std::string& key) {
  std::string tag = "call" + key;
  struct iovec iov = {tag.data(), tag.size()};
  std::vector<char> cbuf(CMSG_SPACE(sizeof(int) * fds.size()));
  struct msghdr mh {};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf.data();
  mh.msg_controllen = cbuf.size();
  struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  ssize_t n;
  do n = ::sendmsg(sock.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(tag.size())) return sys_error("template", "send the call to the template");
  return {};
}

// The pid a pidfd refers to, in our pid namespace (its fdinfo's "Pid:"), or -1.
pid_t pidfd_pid(int pidfd) {
  std::FILE* f = std::fopen(("/proc/self/fdinfo/" + std::to_string(pidfd)).c_str(), "re");
  if (!f) return -1;
  char line[256];
  pid_t pid = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "Pid:", 4) == 0) pid = static_cast<pid_t>(std::strtol(line + 4, nullptr, 10));
  std::fclose(f);
  return pid;
}

// Why the template did not fork the call, when it said so (warm_template.py, _serve: a setup
// error on the call's report pipe, written before it closed the call's fds; out of processes
// after another call's fork bomb, say). Never waits.
std::optional<Error> template_refusal(int reports_fd) {
  pollfd p{reports_fd, POLLIN, 0};
  ChildMsg m;
  if (::poll(&p, 1, 0) != 1 || read_init_report(reports_fd, m) != ReportRead::kReport ||
      m.kind != ChildMsg::kSetupError)
    return std::nullopt;
  m.message[sizeof m.message - 1] = 0;
  return Error{"template", m.err, "the template could not " + printable(m.message)};
}

}  // namespace

// 2 spawn, from a template (runtime/server/mcp_template.hpp): the template forks a process that plays
// init for the call in namespaces of its own (runtime/model/warm_template.py) and speaks init's
// protocol on init's ends of our channel, which it gets with the job. It is not our child: its
// pidfd comes back on the out socket ('I'), and its end is the report it sends (supervisor.cpp).
bool Run::spawn_from_template(UniqueFd sock, UniqueFd job) {
  Launch& L = *launch_;
  ctx_.from_template = true;
  // The template's root: its seal was checked when the template was built (its own record), and
  // the call's digest names the image's content (mcp_worker.cpp, from_template).
  ctx_.image_fd.reset();
  if (parts_.image.contains("seal")) parts_.image["seal"] = "template";
  const ChildConfig& cfg = L.cfg;
  std::vector<int> fds = {cfg.fds.sync, cfg.fds.msg, cfg.fds.out_sock, cfg.fds.listener_sock, cfg.fds.out, cfg.fds.err};
  if (std::find(fds.begin(), fds.end(), -1) != fds.end())
    return fail_setup(Error{"template", EINVAL, "a template's call needs a seccomp filter and piped output"});
  // This binary, which a call forked ahead runs as its pid 1 once its program is forked
  // (template_pid1.hpp): the template's own sandbox need not contain it, and the call's pid 1
  // then speaks the same protocol as this supervisor. A read-only copy of ours, never the file
  // on the host's mount (template_pid1_binary says why).
  auto exe = template_pid1_binary();
  if (!exe) return fail_setup(exe.error());
  fds.insert(fds.begin(), job.get());
  fds.push_back(*exe);
  if (auto st = send_to_template(sock, fds, req_.from_template.key); !st) return fail_setup(st.error());
  sock.reset();
  job.reset();
  L.chan.close_init_ends();
  for (FdPair* p : {&L.out, &L.err}) p->w.reset();
  L.caller_in.close_child_ends();
  auto pidfd = L.chan.recv_template_pidfd(5000);
  if (!pidfd) return fail_setup(template_refusal(L.chan.reports()).value_or(pidfd.error()));
  L.pid = pidfd_pid(pidfd->get());
  if (L.pid <= 0) return fail_setup(Error{"template", ESRCH, "the template's fork of the call is gone"});
  L.pidfd = std::move(*pidfd);
  L.init_is_child = false;
  if (auto st = facilities_after_clone(ctx_, L.pid); !st) {
    kill_init();
    return fail_setup(st.error());
  }
  L.chan.send_go();
  return true;
}

// "go": init builds the sandbox. A shared init does it all before we return from here.
bool Run::start_init() {
  Launch& L = *launch_;
  if (L.shared) {
    non_dumpable_.emplace();  // the maps are written: /proc/1 turns root-owned before init goes on
    L.timed_out_in_setup = L.chan.go_and_wait_shared_init(L.pidfd.get(), spec().limits.timeout_ms);
  } else if (!L.cfg.warm_argv.empty()) {
    // A prepared interpreter (model/warm.hpp) runs the image's code before "s": the seal is
    // taken before "go" instead, so that nothing of the image runs unchecked (a pool's build
    // time is no call's).
    if (!check_seal()) return false;
    L.chan.send_go();
    return true;
  } else {
    L.chan.send_go();
  }
  return check_seal();
}

// The image's seal is taken now, while init builds the sandbox on the other core: init waits
// for the start byte before it starts the program, so nothing of the image runs unchecked (a
// prepared interpreter starts before it: its seal is taken before "go", start_init).
// The walk is one fstatat per entry: its cost grows with the image, the overlay's does not.
bool Run::check_seal() {
  if (!ctx_.image_fd.ok()) return true;
  std::int64_t t0 = monotonic_us();
  auto seal = compute_seal_fd(ctx_.image_fd.get());
  ctx_.image_fd.reset();
  Status sealed = seal ? seal_matches(*ctx_.image, *seal, spec().image) : Status(seal.error());
  if (!sealed) {
    put(parts_.image, "image/seal", seal ? "mismatch" : "error");
    kill_init();
    return fail_setup(sealed.error());
  }
  spdlog::debug("image seal: {} entries checked in {} us, beside the sandbox's setup", seal->entries,
                monotonic_us() - t0);
  return true;
}

// The start byte "s". A pooled sandbox pauses before it: the sandbox is built and init waits.
// The call arrives now (or never: the sandbox is discarded); it may only lower what is still
// open (pool_refusal).
bool Run::hand_out() {
  Launch& L = *launch_;
  if (req_.pool.await_call) {
    // The call's supervisor is made now, while nothing waits for it (supervisor.hpp,
    // PreparedSupervisor): after the hand-over below, only the call's timers are left to arm.
    // It owns init's report pipe from now on (non-blocking), which the wait reads as before.
    prepare_supervisor();
    auto call = req_.pool.await_call(PoolPause{L.pidfd.get(), sup_in_.msg_fd, L.sigfd.get(),
                                               ctx_.cgroup ? ctx_.cgroup->path() : std::string(), spec().warm,
                                               L.init_is_child});
    std::string refused = call ? pool_refusal(spec(), call->spec) : "";
    if (!call || !refused.empty()) {
      if (!refused.empty()) spdlog::warn("pooled sandbox refused its call: {}", refused);
      end_supervisor();
      kill_init();
      L.sigfd.reset();
      discarded_ = true;
      return false;
    }
    handed_out_ = true;
    call_spec_ = std::move(call->spec);
    bound_events();  // by the call's output limit, which may be lower than the pool's
    inputs_ = std::move(call->inputs);
    record_extra_ = std::move(call->record_extra);
    after_run_ = std::move(call->after_run);
    // The call's time starts at hand-out: its wall-time limit, its record's started_at, and its
    // run id, which embeds a time too (make_run_id): the one made with the sandbox carried the
    // pool's build time, minutes before the call. Nothing has the id yet but the run cgroup's
    // name, a build artefact that only its owner pid names (gc_stale_cgroups), so the call's
    // record, events and response all get the new one.
    parts_.run_id = make_run_id();
    ctx_.run_id = parts_.run_id;
    parts_.started_at = rfc3339_now();
    t_spawn_ = monotonic_us();
    // "s", then the job: init reads it at once (child.cpp), so the pipe drains as it fills. A
    // failed write means init is gone, which supervise() sees and reports.
    if (auto st = L.chan.send_start_with_job(encode_pool_job(call->job)); !st)
      spdlog::debug("{}", st.error().describe());
  } else if (!L.shared) {
    L.chan.send_start();
  }
  // After "s": init must not wait for it. A pooled call's is left to the record (record()): its
  // pid 1 and program run on this CPU as soon as this process waits (the job's pipe wakes them
  // here), so whatever it does first delays the call's first line (bench/README.md, Spawn).
  if (!handed_out_) describe_request();
  return true;
}

// 3 supervise: the poll loop (supervisor.hpp) until the sandbox is empty.
void Run::supervise_run() {
  Launch& L = *launch_;
  t_go_ = monotonic_us();
  if (!prepared_sup_) prepare_supervisor();  // a cold run's: made and run back to back
  SuperviseInput& in = sup_in_;
  take_call_limits(in);
  L.kill_grace_ms = in.kill_grace_ms;
  if (events_) {
    events_->emit("started",
                  {{"run_id", parts_.run_id},
                   {"pid", L.pid},
                   {"image", spec().image},
                   {"pack", req_.typed.pack.is_object() ? req_.typed.pack.value("name", json(nullptr)) : json(nullptr)},
                   {"cgroup", ctx_.cgroup ? json(ctx_.cgroup->path()) : json(nullptr)}});
    in.events = &*events_;
    if (ctx_.cgroup_events) in.cgroup_events = &*ctx_.cgroup_events;
  }
  sup_ = prepared_sup_->run();
  end_supervisor();
  if (ctx_.cgroup_events) ctx_.cgroup_events->read_all();  // what came with the end: the OOM kill is counted by now
  L.caller_in.end_session();  // the caller's terminal as it was, before anything is reported
  stdin_record_ = L.caller_in.to_json();
  if (sup_->init_pending) exiting_init_ = L.pid;
  L.pidfd.reset();
  L.sigfd.reset();
}

// The fds the supervisor takes over (its report pipe, the program's streams, the seccomp
// hand-off) leave the launch here; the pidfd and the signalfd stay with it. What the call
// decides is set later (take_call_limits): a pooled sandbox's supervisor is made before its call.
SuperviseInput Run::supervise_input() {
  Launch& L = *launch_;
  SuperviseInput in;
  in.pid = L.pid;
  in.pidfd = L.pidfd.get();
  in.init_is_child = L.init_is_child;
  if (!L.init_is_child) in.end_fd = L.chan.supervisor_sync();
  in.msg_fd = L.chan.take_reports();  // the supervisor closes it
  // The pty master is the stdout stream (it arrives in the loop); nothing writes the pipe.
  if (req_.io.stdin_plan.mode == StdinMode::pty) L.out.r.reset();
  in.out_fd = L.out.r.release();  // the relays own and close them
  in.err_fd = L.err.r.release();
  in.input = &L.caller_in;
  if (in.out_fd >= 0) ::fcntl(in.out_fd, F_SETFL, O_NONBLOCK);
  ::fcntl(in.err_fd, F_SETFL, O_NONBLOCK);
  in.out_dst = req_.io.stdout_fd;
  in.err_dst = req_.io.stderr_fd;
  in.signal_fd = L.sigfd.get();
  in.seccomp_sock = L.chan.take_listener_socket();  // the supervisor's notifier owns it
  in.seccomp_reference = &ctx_.seccomp->reference;
  in.seccomp_named = &ctx_.seccomp->named;
  if (L.proxy) in.proxy = &*L.proxy;
  return in;
}

// The live events are bounded like stdout and stderr, by the same limit (events.hpp: kMaxBytes
// above it; a bound only ever lowers).
void Run::bound_events() {
  if (events_ && spec().limits.output_limit_bytes)
    events_->set_max_bytes(static_cast<std::size_t>(std::max<std::int64_t>(0, *spec().limits.output_limit_bytes)));
}

// The supervisor made from its input, which it references (sup_in_ outlives it: end_supervisor).
void Run::prepare_supervisor() {
  sup_in_ = supervise_input();
  prepared_sup_.emplace(sup_in_);
}

// The supervisor gone, and the fds it closed no longer named by its input.
void Run::end_supervisor() {
  prepared_sup_.reset();
  sup_in_ = {};
}

// The call's limits, and its start (a pooled call's is its hand-out, t_spawn_).
void Run::take_call_limits(SuperviseInput& in) {
  Launch& L = *launch_;
  const RunSpec& s = spec();
  in.timeout_ms = s.limits.timeout_ms;
  if (s.limits.timeout_ms) {
    // The wall-time limit counts from the sandbox's creation: the setup so far (a shared
    // init's whole setup, a forked one's start and the image's seal) has used part of it.
    std::int64_t used = (monotonic_us() - t_spawn_) / 1000;
    in.timeout_ms = std::max<std::int64_t>(1, *s.limits.timeout_ms - used);
  }
  in.timed_out_before_start = L.timed_out_in_setup;
  in.start_ms = t_spawn_ / 1000;
  in.output_limit_bytes = s.limits.output_limit_bytes;
  if (ctx_.cgroup && s.limits.cpu_time_ms) {
    in.cpu_budget_ms = s.limits.cpu_time_ms;
    in.cpu_used_us = [this] { return ctx_.cgroup->cpu_usage_us(); };
    in.max_cpus = s.limits.cpus.value_or(static_cast<double>(::sysconf(_SC_NPROCESSORS_ONLN)));
  }
}

// 4 collect: the facts of how the run ended, what it left in /out, what it was refused.
void Run::collect() {
  facts_.supervised = &*sup_;
  facts_.kill_grace_ms = launch_->kill_grace_ms;
  if (auto e = supervision_error(*sup_)) {
    add_setup_hint(*e, spec(), *identity_, cwd_);
    facts_.setup_hint = e->hint;
  }
  // /out's fd waited in the socket since setup; every process of the sandbox is dead now.
  out_dir_fd_ = launch_->chan.recv_out_dir();
  if (out_dir_fd_.ok() && !req_.export_dir.empty()) export_artifacts();
  classify_end();
  collect_violations();
}

void Run::export_artifacts() {
  ExportCaps caps{spec().limits.output_max_bytes, spec().limits.output_max_files};
  auto r = export_out(out_dir_fd_.get(), req_.export_dir, caps);
  if (!r) {
    spdlog::error("artifact export to {} failed: {}", req_.export_dir, r.error().describe());
    export_error_ = r.error().describe();
    if (events_) events_->emit("artifact_export", {{"dir", req_.export_dir}, {"error", export_error_}});
    return;
  }
  exported_ = std::move(*r);
  if (events_)
    events_->emit("artifact_export", {{"dir", req_.export_dir},
                                      {"files", exported_->file_count},
                                      {"bytes", exported_->bytes},
                                      {"skipped", exported_->skipped_count},
                                      {"limit_hit", exported_->limit_hit}});
  for (auto& s : exported_->skipped) spdlog::warn("export: skipped {}: {}", s.path, s.reason);
  if (exported_->skipped_count > static_cast<std::int64_t>(exported_->skipped.size()))
    spdlog::warn("export: {} more skipped (listed up to {} in the trace)",
                 exported_->skipped_count - static_cast<std::int64_t>(exported_->skipped.size()), kMaxListedSkips);
  facts_.export_limit_hit = exported_->limit_hit;  // output_limit, for a run that succeeded
}

// The kernel's limits without a cgroup, read from what they leave behind rather than guessed
// from a signal (decide_outcome judges them, outcome.cpp).
void Run::classify_end() {
  const RunSpec& s = spec();
  // RLIMIT_CPU is the CPU budget without a cgroup: the CPU time rusage counted tells whether
  // its SIGKILL was the budget's.
  if (!ctx_.cgroup && s.limits.cpu_time_ms) {
    facts_.rlimit_cpu_ms = s.limits.cpu_time_ms;
    facts_.cpu_used_ms = sup_->usage.ru_utime.tv_sec * 1000LL + sup_->usage.ru_utime.tv_usec / 1000 +
                         sup_->usage.ru_stime.tv_sec * 1000LL + sup_->usage.ru_stime.tv_usec / 1000;
  }
}

void Run::collect_violations() {
  Launch& L = *launch_;
  parts_.violations = violations_json(sup_->violations);
  if (ctx_.seccomp->enabled) {
    put(parts_.violations_summary, "violations_summary/seccomp",
        violation_totals_json(sup_->seccomp_totals, sup_->violations.size()));
    if (sup_->seccomp_totals.truncated())
      spdlog::warn(
          "seccomp: {} refused calls of {} distinct kinds are counted but not listed in the trace (list capped at {} entries)",
          sup_->seccomp_totals.unlisted_calls, sup_->seccomp_totals.unlisted_distinct, SeccompNotifier::kMaxListed);
  }
  if (L.proxy) {
    for (auto& v : L.proxy->violations_json()) parts_.violations.push_back(v);
    put(parts_.usage_extra, "usage/network", L.proxy->usage_json());
    if (!L.proxy->listener_received() && !supervision_error(*sup_))
      spdlog::warn("the egress proxy never received its listening socket");
  }
  if (sup_->seccomp_kill)
    spdlog::warn("seccomp: {} is refused by a kill rule of the policy: sandbox killed", sup_->seccomp_kill->name);
  if (ctx_.cgroup) {
    CgroupUsage u = ctx_.cgroup->usage();
    json cg_usage = cgroup_usage_json(u);  // a named object: items() of a temporary would dangle
    for (auto& [k, v] : cg_usage.items()) parts_.usage_extra[k] = v;
    facts_.oom_kills = u.oom_kill.value_or(0);  // the kernel's OOM killer acted (memory.events)
    pids_max_events_ = u.pids_max.value_or(0);
    memory_oom_events_ = u.oom.value_or(0) + u.oom_kill.value_or(0);
  }
}

// 4 collect: how the run ended, decided once from what the phases saw (outcome.hpp).
void Run::decide_end() { outcome_ = decide_outcome(facts_); }

// A pooled sandbox no call was handed to: nothing ran, nothing is recorded.
RunReport Run::discard() {
  ctx_.image_fd.reset();
  if (ctx_.cgroup) {
    if (auto st = ctx_.cgroup->kill(); !st) spdlog::warn("cgroup kill: {}", st.error().describe());
    if (auto st = ctx_.cgroup->remove(); !st) spdlog::warn("cgroup remove: {}", st.error().describe());
  }
  RunReport report;
  report.discarded = true;
  report.outcome = outcome_;
  return report;
}

// 4 collect (typed IO): the caller reads and validates what the run produced; its verdict on the
// output applies under decide_outcome's rule (with_verdict: only to a run that succeeded).
nlohmann::json Run::typed_io() {
  nlohmann::json extra = json::object();
  if (after_run_) {
    AfterRun r = after_run_(outcome_, out_dir_fd_.get());
    extra = std::move(r.record);
    outcome_ = with_verdict(std::move(outcome_), r.verdict);
  }
  out_dir_fd_.reset();  // the last reference: the sandbox's /out is freed
  ctx_.image_fd.reset();
  return extra;
}

// 5 record
RunReport Run::record(nlohmann::json extra) {
  t_end_ = monotonic_us();
  // A run that reached its start says where its time went (bench/README.md reads it); a pooled
  // call's sandbox was prepared before the call arrived, so it has no prepare time of its own.
  if (t_go_)
    put(parts_.usage_extra, "usage/phases_us",
        trace_object({{"usage/phases_us/prepare", req_.pool.await_call ? json(nullptr) : json(t_spawn_ - t_start_)},
                      {"usage/phases_us/start", t_go_ - t_spawn_},
                      {"usage/phases_us/run", t_end_ - t_go_}}));
  describe_request();
  parts_.ended_at = rfc3339_now();
  parts_.outcome = outcome_;
  parts_.sup = sup_ ? &*sup_ : nullptr;
  // Each facility's part (facility.hpp); capabilities.program is what init read of the started
  // program (null when it never started or its status could not be read).
  parts_.enforcement = enforcement_record(ctx_, parts_.sup);
  RunReport report;
  report.outcome = outcome_;
  report.exit_status = exit_status_for(outcome_);
  const std::string run_id = parts_.run_id;
  report.trace = trace_record(std::move(parts_));
  hits_ = limits_hit(limit_facts());
  json hit_names = json::array();
  for (auto& h : hits_) hit_names.push_back(h.name);
  put(at(report.trace, "result"), "result/limits_hit", std::move(hit_names));
  put(report.trace, "inputs", inputs_);
  put(report.trace, "stdin", stdin_record_);
  // A pooled sandbox's call (pool.hit in its record); any other run's sandbox was made for it.
  if (ctx_.from_template)
    put(report.trace, "sandbox",
        trace_object({{"sandbox/made_by", "template"}, {"sandbox/template", req_.from_template.record}}));
  else put(report.trace, "sandbox", trace_object({{"sandbox/made_by", req_.pool.await_call ? "pooled" : "cold"}}));
  add_outputs(report, extra);
  for (auto& [k, v] : record_extra_.items()) report.trace[k] = v;
  if (extra.contains("blobs") && report.trace.contains("blobs") && report.trace["blobs"].is_array()) {
    for (auto& b : extra["blobs"]) report.trace["blobs"].push_back(b);
    extra.erase("blobs");
  }
  for (auto& [k, v] : extra.items()) report.trace[k] = v;
  emit_exited(report);
  // Which build made the record (cached by the binary's identity: self_digest.hpp).
  if (auto digest = self_binary_sha256(req_.dirs); digest) put(at(report.trace, "sbx"), "sbx/binary_sha256", *digest);
  else put(at(report.trace, "sbx"), "sbx/binary_sha256_error", digest.error().describe());
  store(report, run_id);
  return report;
}

// outputs: what --output exported, then what the typed-IO caller read.
void Run::add_outputs(RunReport& report, nlohmann::json& extra) const {
  json outputs = json::array();
  if (exported_) {
    for (auto& f : exported_->files)
      outputs.push_back(
          trace_object({{"outputs/[]/path", f.path}, {"outputs/[]/bytes", f.bytes}, {"outputs/[]/sha256", f.sha256}}));
    put(report.trace, "export",
        exported_->to_json(req_.export_dir, {spec().limits.output_max_bytes, spec().limits.output_max_files}));
  } else if (!req_.export_dir.empty()) {
    put(report.trace, "export",
        trace_object({{"export/dir", req_.export_dir},
                      {"export/error",
                       export_error_.empty() ? json("the run ended before /out existed") : json(export_error_)}}));
  }
  if (extra.contains("outputs")) {
    for (auto& o : extra["outputs"]) outputs.push_back(o);
    extra.erase("outputs");
  }
  // A program decides how many files it leaves and how long their names are (64 levels of
  // 255-byte names, 10,000 of them, made a 152 MB record): the list is cut where it is made
  // (export_out) and again here with what the typed-IO caller added, counted and flagged like
  // violations (trace.hpp). The files themselves were all exported and hashed.
  auto file_bytes = [](const json& list) {
    std::int64_t n = 0;
    for (auto& o : list)
      if (auto it = o.find("bytes"); it != o.end() && it->is_number_integer()) n += it->get<std::int64_t>();
    return n;
  };
  std::int64_t here_bytes = file_bytes(outputs);
  ListCut cut = cut_list(outputs, kMaxListedOutputs, kMaxListedOutputBytes);
  std::int64_t total = static_cast<std::int64_t>(cut.total), unlisted_bytes = here_bytes - file_bytes(outputs);
  if (exported_) {  // the files export_out counted but did not list
    total += exported_->file_count - static_cast<std::int64_t>(exported_->files.size());
    unlisted_bytes += exported_->unlisted_file_bytes;
  }
  std::int64_t listed = static_cast<std::int64_t>(cut.listed);
  put(report.trace, "outputs_summary",
      trace_object({{"outputs_summary/outputs", total},
                    {"outputs_summary/listed", listed},
                    {"outputs_summary/listed_cap", kMaxListedOutputs},
                    {"outputs_summary/listed_bytes_cap", kMaxListedOutputBytes},
                    {"outputs_summary/truncated", listed < total},
                    {"outputs_summary/unlisted_outputs", total - listed},
                    {"outputs_summary/unlisted_file_bytes", unlisted_bytes}}));
  if (listed < total)
    spdlog::warn("export: {} of {} outputs are counted but not listed in the trace (list capped at {} entries, {})",
                 total - listed, total, kMaxListedOutputs,
                 format_size(static_cast<std::int64_t>(kMaxListedOutputBytes)));
  put(report.trace, "outputs", std::move(outputs));
}

// The last event, then one last non-blocking write: what the destination did not take by now
// is dropped, and the record counts it.
void Run::emit_exited(RunReport& report) {
  if (!events_) return;
  const json& res = report.trace["result"];
  const json& use = report.trace["usage"];
  json fields = {{"status", res.value("status", json(nullptr))},
                 {"exit_code", res.value("exit_code", json(nullptr))},
                 {"signal", res.value("signal", json(nullptr))},
                 {"exit_status", report.exit_status}};
  for (const char* k : {"wall_ms", "cpu_user_ms", "cpu_sys_ms", "memory_peak_bytes", "pids_peak", "oom_kills"})
    if (use.contains(k)) fields[k] = use[k];
  events_->emit("exited", std::move(fields));
  events_->finish();
  put(report.trace, "events", events_->record_json());
}

// The record is stored before anything is written to stderr: a write to stderr blocks while its
// reader is stalled, and sbx must not die there (SIGKILL from an impatient caller) with the run
// unrecorded. The supervisor's loop is over: the append (an flock wait bounded at seconds, one
// write, one fdatasync) cannot stall the run's limits. --trace-file is 0600 like the ledger: a
// record holds the run's argv and --env values.
void Run::store(RunReport& report, const std::string& run_id) {
  // The ledger's line: compact JSON; never throws (trace.hpp).
  std::string line = trace_text(report.trace, -1);
  // Nothing is appended into a state dir another user could change (a link planted there would
  // take the append elsewhere): the run was refused at setup for it, and that line said why.
  Status private_store = check_private_dir(req_.dirs.state, "sbx's state dir");
  auto stored = private_store ? store_trace(req_.dirs, run_id, line) : Result<AppendInfo>(private_store.error());
  report.recorded = stored.ok();
  if (!stored) report.record_error = stored.error().describe();
  if (stored) {
    report.record_seq = stored->seq;
    report.record_hash = stored->hash;
    // Mirrored after the durable append, by a detached shipper: never on the run's path.
    // A URL refused in prepare (its record says so) is never handed on.
    if (auto url = effective_trace_db(spec().trace_db); !url.empty() && check_trace_db_url(url).empty())
      kick_trace_shipper(req_.dirs, TraceDb{url, trace_db_schema(req_.tenant.name)});
  }
  Status trace_file_written;
  if (!req_.trace_file.empty())
    trace_file_written = write_file_durable(req_.trace_file, trace_text(report.trace), 0600);
  tell_user();
  if (!stored && req_.require_record) {
    report.exit_status = 125;  // the caller (pack run, exec) says why, in its own one line
  } else if (!stored && spec().require_record) {
    std::fprintf(
        stderr,
        "sbx: the run's trace record could not be stored durably in %s: %s; exit 125 (a run without its record is a failure here)\n",
        printable(req_.dirs.traces).c_str(), printable(stored.error().describe()).c_str());
    report.exit_status = 125;
  } else if (!stored && private_store && !key_refusal_said_) {
    spdlog::warn("could not store the trace record in {}: {}", req_.dirs.traces, stored.error().describe());
  } else if (stored && stored->torn_bytes) {
    spdlog::warn(
        "trace ledger: cut {} bytes of an interrupted append off its end (noted as ledger_repair in run {}'s record)",
        stored->torn_bytes, run_id);
  }
  if (!trace_file_written) {
    std::fprintf(stderr, "sbx: cannot write --trace-file %s: %s\n", printable(req_.trace_file).c_str(),
                 printable(trace_file_written.error().describe()).c_str());
    if (report.exit_status == 0) report.exit_status = 125;
  }
  spdlog::info("run {} ended: {} (trace: sbx trace show {})", run_id, to_string(outcome_.status), run_id);
}

LimitFacts Run::limit_facts() const {
  const Limits& l = spec().limits;
  LimitFacts f;
  f.outcome = &outcome_;
  f.output_truncated = sup_ && (sup_->out.truncated || sup_->err.truncated);
  f.pids_max_events = pids_max_events_;
  f.memory_oom_events = memory_oom_events_;
  f.timeout_ms = l.timeout_ms;
  f.cpu_time_ms = l.cpu_time_ms;
  f.memory_bytes = l.memory_bytes;
  f.pids = l.pids;
  f.output_limit_bytes = l.output_limit_bytes;
  return f;
}

// The one line that says why a run did not end by itself, output truncation, and the other
// limits hit (limits_hit_line).
void Run::tell_user() const {
  const RunSpec& s = spec();
  if (outcome_.status == RunStatus::setup_error && outcome_.error) {
    // --dry-run prints the same line (print_dry_run).
    std::fprintf(stderr, "sbx: %s\n", printable(outcome_.error->describe_setup()).c_str());
  } else if (outcome_.status == RunStatus::timeout) {
    // One line: a 124 that says nothing looks like the program's own exit status. Warnings, so
    // that --log-level error silences them, and never blocking (NonBlockingLogScope).
    if (outcome_.reason == "cpu" && s.limits.cpu_time_ms)
      spdlog::warn("CPU-time budget of {} spent: sandbox killed (exit 124)", format_duration_ms(*s.limits.cpu_time_ms));
    else if (s.limits.timeout_ms) {
      auto layer = req_.limit_layers.find("timeout");
      spdlog::warn(
          "{}", wall_time_message(*s.limits.timeout_ms,
                                  layer == req_.limit_layers.end() ? std::string() : layer->second, req_.limit_raise));
    }
  }
  if (sup_ && s.limits.output_limit_bytes)
    for (auto [name, st] : {std::pair{"stdout", &sup_->out}, std::pair{"stderr", &sup_->err}})
      if (st->truncated)
        spdlog::warn("{} truncated at the output limit of {}: {} more bytes dropped (--output-limit)", name,
                     format_size(*s.limits.output_limit_bytes), st->dropped_bytes);
  if (std::string line = limits_hit_line(hits_); !line.empty()) spdlog::warn("{}", line);
}

// 6 clean: init's exit has run beside the recording; it is reaped now, so that nothing of the
// run outlives sbx. Then anything left in the run cgroup is killed and the cgroup removed.
// Nothing else on the host: the root, /tmp and /dev lived in tmpfs mounts of the sandbox's own
// mount namespace, which died with its last process.
void Run::clean() {
  if (exiting_init_ > 0) reap_init(exiting_init_);
  if (ctx_.cgroup) {
    if (auto st = ctx_.cgroup->kill(); !st) spdlog::warn("cgroup kill: {}", st.error().describe());
    if (auto st = ctx_.cgroup->remove(); !st) spdlog::warn("cgroup remove: {}", st.error().describe());
  }
  if (t_go_) {
    std::int64_t t_done = monotonic_us();
    spdlog::debug("timing: prepare {} us, start {} us, run {} us, record {} us", t_spawn_ - t_start_, t_go_ - t_spawn_,
                  t_end_ - t_go_, t_done - t_end_);
  }
}

}  // namespace

RunReport run_sandbox(const RunRequest& req) {
  Run run(req);
  return run.execute();
}

}  // namespace sbx
