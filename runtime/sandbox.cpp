#include "runtime/sandbox.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <spdlog/spdlog.h>

#include "runtime/artifact_export.hpp"
#include "runtime/caps.hpp"
#include "runtime/cgroup.hpp"
#include "runtime/child.hpp"
#include "runtime/clone.hpp"
#include "runtime/environment.hpp"
#include "runtime/events.hpp"
#include "runtime/fdpass.hpp"
#include "runtime/fsutil.hpp"
#include "runtime/gpu.hpp"
#include "runtime/image_manifest.hpp"
#include "runtime/image_seal.hpp"
#include "runtime/image_store.hpp"
#include "runtime/limits_plan.hpp"
#include "runtime/memory_fallback.hpp"
#include "runtime/log.hpp"
#include "runtime/preflight.hpp"
#include "runtime/proxy.hpp"
#include "runtime/raw_syscall.hpp"
#include "runtime/seccomp_policy.hpp"
#include "runtime/sha256.hpp"
#include "runtime/signals.hpp"
#include "runtime/supervisor.hpp"
#include "runtime/trace.hpp"
#include "runtime/self_digest.hpp"
#include "runtime/trace_store.hpp"
#include "runtime/units.hpp"
#include "runtime/text_escape.hpp"

extern char** environ;

namespace sbx {
namespace {
using nlohmann::json;

constexpr unsigned long kNamespaces = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET |
                                      CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
const char* const kNamespaceNames[] = {"user", "pid", "mount", "net", "ipc", "uts", "cgroup"};

// A pipe whose ends are both close-on-exec; the child keeps what it needs by fd number.
struct Pipe {
  int r = -1, w = -1;
  Status open() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return sys_error("prepare", "pipe");
    r = fds[0];
    w = fds[1];
    return {};
  }
  // The same pair of ends as a SOCK_SEQPACKET socketpair, for fd handoffs (fdpass.hpp): r stays
  // with the supervisor, w goes to the child.
  Status open_socketpair(const char* stage, const std::string& what) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) return sys_error(stage, "socketpair for " + what);
    r = fds[0];
    w = fds[1];
    return {};
  }
  void close_r() { if (r >= 0) ::close(r), r = -1; }
  void close_w() { if (w >= 0) ::close(w), w = -1; }
  ~Pipe() { close_r(); close_w(); }
};

std::string current_dir() {
  char buf[4096];
  return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string();
}

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
  return {{"procs", cg.namespace_root_procs}, {"subtree_control", ctl}};
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
  json c = {{"layout", cg.layout}, {"mount", cg.mount}, {"self_path", cg.self_path}, {"controllers", cg.controllers},
            {"run_cgroups_under", cg.root_subtree && offers_limits(cg) ? cg.mount + "/sbx" : std::string()},
            {"obtained_by", obtained_by}, {"namespace_root", namespace_root_json(cg)}};
  if (!systemd_scope.empty()) c["systemd_scope"] = systemd_scope;
  if (!scope_unit.empty()) c["scope_unit"] = scope_unit;
  return {{"kernel", u.release}, {"cgroup", std::move(c)}};
}

// Which limits are enforced and how: wall time, output and /tmp size are sbx's own; memory,
// processes and CPU come from the limit plan (cgroup v2, or an honest rlimit fallback).
std::vector<LimitEntry> limit_entries(const Limits& l, const LimitPlan& plan) {
  std::vector<LimitEntry> v;
  for (auto& d : plan.decisions) {
    json value = d.value;  // numbers in the record, not the plan's strings
    if (d.limit == "memory") value = *l.memory_bytes;
    if (d.limit == "pids") value = *l.pids;
    if (d.limit == "cpus") value = *l.cpus;
    if (d.limit == "cpu_time") value = *l.cpu_time_ms;
    if (d.limit == "timeout") value = *l.timeout_ms;
    if (d.limit == "output") value = *l.output_limit_bytes;
    v.push_back({d.limit, value, d.applied ? d.mechanism : "", d.reason, d.degraded});
  }
  v.push_back({"tmp_size", l.tmp_size_bytes, "tmpfs size option (/tmp)", "", false});
  return v;
}

json cgroup_usage_json(const CgroupUsage& u) {
  auto opt = [](const std::optional<std::int64_t>& x) { return x ? json(*x) : json(nullptr); };
  auto ms = [](const std::optional<std::int64_t>& us) { return us ? json(*us / 1000) : json(nullptr); };
  return {{"memory_peak_bytes", opt(u.memory_peak_bytes)},
          {"pids_peak", opt(u.pids_peak)},
          {"oom_kills", opt(u.oom_kill)},
          {"cpu_user_ms", ms(u.cpu_user_us)},
          {"cpu_sys_ms", ms(u.cpu_system_us)},
          {"cpu_usage_ms", ms(u.cpu_usage_us)},
          {"cpu_throttled_periods", opt(u.nr_throttled)},
          {"cpu_throttled_ms", ms(u.throttled_us)}};
}

json network_enforcement_json(const NetworkSpec& n) {
  json j = {{"mode", n.mode}, {"allow", n.allow}, {"interfaces", {"lo"}}};
  if (n.mode == "proxy")
    j["proxy"] = {{"listen", "127.0.0.1:" + std::to_string(kProxyPort)},
                  {"where", "sbx supervisor, outside the sandbox; socket bound in the sandbox's network namespace"},
                  {"protocols", {"CONNECT", "http absolute-URI"}},
                  {"resolver", "c-ares on the supervisor's poll loop (/etc/hosts, then resolv.conf's servers), for "
                                "allowed names only; 16 lookups in flight, 504 after min(5 s, idle_timeout_ms)"},
                  {"resolved_addresses", "checked at connect time: loopback, link-local, private, CGNAT, unique-local, "
                                         "unspecified, multicast and broadcast addresses only through an address/CIDR rule; "
                                         "IPv4-mapped IPv6 matched as IPv4"},
                  {"requests", "strict HTTP/1.x parsing (CRLF only, no control bytes, no CL+TE); plain HTTP: one "
                               "Content-Length-framed request per connection"},
                  {"max_connections", n.max_connections},
                  {"max_bytes", n.max_bytes ? json(*n.max_bytes) : json(nullptr)},
                  {"idle_timeout_ms", n.idle_timeout_ms}};
  return j;
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

std::int64_t monotonic_ms() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1'000'000;
}

// --input: each host file or directory hashed before the run (what the program was given).
Result<json> hash_inputs(const std::vector<BindMount>& inputs, const std::string& cwd) {
  json out = json::array();
  for (auto& in : inputs) {
    std::string src = in.src[0] == '/' ? in.src : cwd + "/" + in.src;
    struct stat st;
    if (::stat(src.c_str(), &st) != 0) return sys_error("usage", "--input " + in.src);
    if (S_ISDIR(st.st_mode)) {
      auto scan = scan_tree(src);
      if (!scan) return make_error("usage", "--input " + in.src + ": " + scan.error().message, scan.error().err);
      json entry = {{"path", in.dst}, {"source", src}, {"type", "directory"}, {"bytes", scan->bytes},
                    {"sha256", sha256_hex(manifest_text(scan->entries))}, {"digest_of", "sbx-manifest v1"},
                    {"entries", scan->entries.size()}};
      if (!scan->skipped.empty()) entry["skipped_special_files"] = scan->skipped.size();
      out.push_back(entry);
    } else if (S_ISREG(st.st_mode)) {
      int fd = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return sys_error("usage", "--input " + in.src);
      std::int64_t bytes = 0;
      auto h = sha256_fd(fd, &bytes);
      ::close(fd);
      if (!h) return make_error("usage", "--input " + in.src + ": read", h.error().err);
      out.push_back({{"path", in.dst}, {"source", src}, {"type", "file"}, {"bytes", bytes}, {"sha256", *h}});
    } else {
      return make_error("usage", "--input " + in.src + " is not a regular file or a directory");
    }
  }
  return out;
}

}  // namespace

namespace {
std::int64_t mono_us() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000LL + ts.tv_nsec / 1000;
}
}  // namespace

RunReport run_sandbox(const RunRequest& req) {
  // Where the time of a run goes (-vv): prepare; start (clone + id maps, and with a shared init
  // the sandbox's whole setup up to the program's execve; with a forked init the image's seal);
  // run (the rest: setup of a forked init, the program, until the sandbox is empty); record
  // (trace + durable store).
  std::int64_t t_start = mono_us(), t_spawn = 0, t_go = 0, t_end = 0;
  NonBlockingLogScope log_never_blocks;
  // A copy: a pooled sandbox takes its call's spec at hand-out (await_call, below).
  RunSpec call_spec = req.spec;
  const RunSpec& spec = call_spec;
  nlohmann::json record_extra = req.record_extra;
  auto after_run = req.after_run;
  bool discarded = false;  // a pooled sandbox no call was handed to
  TraceParts parts;
  parts.run_id = make_run_id();
  parts.started_at = rfc3339_now();
  std::string cwd = current_dir();
  CgroupInfo cg = detect_cgroup();
  // The parts of the record that describe the request, not its outcome, are built once the
  // sandbox is under way (after the second sync byte below), while init sets up or the program
  // runs, off the critical path; a run that fails before that builds them at the end.
  bool have_cgroup = false;  // a RunCgroup was created (declared here for describe_request)
  auto describe_request = [&, described = false]() mutable {
    if (described) return;
    described = true;
    parts.invocation = {{"argv", req.invocation_argv},
                        {"cwd", cwd},
                        {"profile", {{"name", req.profile.name}, {"origin", req.profile.origin}, {"sha256", sha256_hex(req.profile.text)}}},
                        {"pack", req.pack},
                        {"spec", spec_to_json(spec)}};
    parts.host = host_json(cg, cgroup_obtained_by(cg, have_cgroup, req.cgroup_via_scope), req.systemd_scope,
                           req.scope_unit);
  };
  json namespaces = json::array();
  for (auto* n : kNamespaceNames) namespaces.push_back(n);
  parts.enforcement = {{"namespaces", namespaces},
                       {"cgroup", "unavailable"},
                       {"seccomp", {{"profile", spec.seccomp}, {"sha256", nullptr}, {"unresolved", json::array()}, {"mode", nullptr},
                                    {"note", "not installed: the run ended before the policy was prepared"}}},
                       {"capabilities", {{"kept", spec.capabilities.keep}, {"bounding", spec.capabilities.keep}, {"securebits", "locked"}, {"no_new_privs", true}}},
                       {"network", network_enforcement_json(spec.network)}};
  parts.image = {{"name", spec.image}, {"digest", nullptr}, {"mounts", json::array()}};
  json inputs = req.inputs;
  json stdin_record = CallerStdin(req.stdin_plan).to_json();  // replaced by the relay's own once it ran
  int image_fd = -1;  // the stored tree, checked against its seal, handed to init
  std::optional<ImageRecord> image;  // the image the run is on (not "host")
  Pipe out_pair;      // init sends the O_PATH fd of /out on it (artifact_export.hpp)
  int out_dir_fd = -1;
  std::optional<ExportResult> exported;
  std::string export_error;

  Outcome outcome;
  std::optional<SuperviseResult> sup;
  auto fail_setup = [&](const Error& e) {
    outcome = Outcome{};
    outcome.status = RunStatus::setup_error;
    outcome.error = e;
  };

  // Live events (events.hpp): opened first, so that a run that fails in setup still says so.
  std::optional<EventStream> events;
  std::optional<Error> events_error;
  if (!spec.events.empty()) {
    auto ev = EventStream::open(spec.events);
    if (ev) events.emplace(std::move(*ev));
    else events_error = ev.error();
  }
  std::optional<RunCgroup> cgroup;
  std::optional<CgroupEvents> cgroup_events;  // the run cgroup's limit events, while it exists
  SharedInitStack init_stack;  // declared before anything that may outlive init
  pid_t exiting_init = -1;  // init reported an empty sandbox and is still exiting: reaped at the end
  std::optional<NonDumpableWhileShared> non_dumpable;  // a shared init's: until it is reaped (clone.hpp)
  auto identity = plan_identity(spec, req.id_slot);
  if (identity) parts.enforcement["identity"] = identity_to_json(*identity);
  else parts.enforcement["identity"] = {{"mode", ::geteuid() == 0 ? "root" : "rootless"}, {"error", identity.error().message}};
  [&] {
    if (req.refuse) {  // refused by the caller (input_invalid): nothing is created
      outcome = *req.refuse;
      return;
    }
    if (events_error) return fail_setup(*events_error);
    if (!identity) return fail_setup(identity.error());
    // 1 prepare: the caller's sources and limits first, so that a missing --bind source or
    // --require-limits refuses before anything is created (the checks --dry-run makes too).
    if (auto st = check_sources(spec, cwd, &*identity); !st) return fail_setup(st.error());
    bool rootless = ::geteuid() != 0;
    // GPUs first: a request past the profile's ceiling, or for a GPU the host lacks, refuses
    // before anything is created (gpu.hpp).
    GpuPlan gpu;
    if (!spec.gpu.devices.empty()) {
      auto planned = plan_gpu_for_run(spec, *identity, req.limit_layers);
      if (!planned) return fail_setup(planned.error());
      gpu = std::move(*planned);
    }
    parts.enforcement["gpu"] = gpu_enforcement_json(gpu);
    if (gpu.enabled) parts.usage_extra["gpu"] = gpu_usage_json(gpu);
    LimitPlan plan = plan_limits(spec.limits, cg, rootless, true, gpu.enabled);
    std::optional<Error> cgroup_error;  // RunCgroup::create failed
    if (spec.require_limits)
      if (auto e = require_limits_shortfall(plan, cg, req.limit_layers)) return fail_setup(*e);
    if (plan.use_cgroup) {
      // A killed sbx cannot remove its run cgroup; the next run does.
      if (auto st = gc_stale_cgroups(cg); !st) spdlog::debug("cgroup gc: {}", st.error().describe());
      auto created = RunCgroup::create(cg, plan.cgroup_limits, parts.run_id);
      if (created) {
        cgroup.emplace(std::move(*created));
        have_cgroup = true;
        // Weaker than asked but not worth a warning line of its own (one per run at most): the
        // trace keeps them, -v shows them.
        if (!cgroup->warnings().empty()) parts.enforcement["cgroup_notes"] = cgroup->warnings();
        for (auto& w : cgroup->warnings()) spdlog::info("cgroup: {}", w);
        // Before anything runs in it: the counters' baseline is the empty cgroup's.
        if (events) cgroup_events.emplace(cgroup->dir_fd(), plan.cgroup_limits.cpus.has_value(), &*events);
      } else {
        // The whole story (paths, the pids in the way, errno) goes to the trace; the one line
        // below names only the cause.
        cgroup_error = created.error();
        parts.enforcement["cgroup_error"] = created.error().describe();
        spdlog::debug("cgroup v2 unusable, falling back to rlimits: {}", created.error().describe());
        plan = plan_limits(spec.limits, cg, rootless, false, gpu.enabled);
      }
    }
    parts.limits = limit_entries(spec.limits, plan);
    parts.enforcement["cgroup"] = cgroup ? "v2 " + cgroup->path() : "unavailable (" + cg.layout + ")";
    std::string missing, degraded;
    bool asked = false;
    for (auto* d : plan.shortfalls(true)) {
      (d->applied ? degraded : missing) += (std::string(", ") + d->limit);
      for (auto& e : req.explicit_limits) asked = asked || e == d->limit;
    }
    if (spec.require_limits)  // again: a cgroup that could not be created weakened the plan
      if (auto e = require_limits_shortfall(plan, cg, req.limit_layers)) return fail_setup(*e);
    auto mounts = plan_mounts(spec, cwd);
    if (!mounts) return fail_setup(mounts.error());
    for (auto& n : gpu.nodes) mounts->device_nodes.push_back({n.host_path, n.path});
    for (auto& f : gpu.driver_files) mounts->binds.push_back(f);
    // The tmpfs mounts against the memory limit: needed only where no cgroup charges their pages.
    TmpfsBudget scaled;
    auto fallback = apply_memory_fallback(spec, plan, req.explicit_limits, *identity, *mounts, &scaled);
    if (!fallback) return fail_setup(fallback.error());
    const bool memory_fallback = !fallback->is_null();
    if (memory_fallback) parts.enforcement["memory_fallback"] = std::move(*fallback);
    // At most this one line per run about limits: what is weaker and the cause in a few words;
    // the details are in the trace (enforcement) and `sbx doctor`. A warning when the caller
    // asked for the limit or a cgroup setup failed unexpectedly; otherwise info (-v).
    if (!missing.empty() || !degraded.empty())
      spdlog::log(asked || cgroup_error ? spdlog::level::warn : spdlog::level::info, "limits {}{}{} ({}; see the trace, 'sbx doctor')",
                   missing.empty() ? "" : "not enforced: " + missing.substr(2),
                   !missing.empty() && !degraded.empty() ? "; " : "",
                   degraded.empty() ? "" : "only per process (rlimits): " + degraded.substr(2),
                   cgroup_gap_short(cg, rootless, cgroup_error ? &*cgroup_error : nullptr));
    if (scaled.scaled)
      spdlog::info("tmpfs sizes scaled down to fit the memory limit {} (no cgroup v2 counts their pages): {}",
                   format_size(*spec.limits.memory_bytes), describe_shares(scaled.shares));
    if (gpu.enabled && spec.limits.memory_bytes && !plan.cgroup_limits.memory_bytes)
      spdlog::warn("--gpu without a cgroup v2 memory controller: the memory limit of {} is NOT applied (rlimits break "
                   "CUDA); host memory is unbounded for this run (enforcement.limits_not_applied; --require-limits refuses)",
                   format_size(*spec.limits.memory_bytes));
    parts.image["mounts"] = mounts_to_json(*mounts);
    // A pooled sandbox's /code and /in: tmpfs mounts only init writes, at hand-out (pool_job.hpp).
    // Added after the memory fallback's scaling: they hold the call's own bytes, bounded by the
    // job's size, and are read-only before the program starts.
    if (req.await_call)
      for (auto& d : kPoolDirs) mounts->tmpfs.push_back({d, kPoolDirBytes});
    if (spec.image != "host") {
      // The tree is opened once here; its seal is taken through this fd while init builds the
      // sandbox (below, after "go"), and init checks that the tree it mounts is this one.
      ImageStore store(req.dirs.images);
      auto resolved = store.resolve(spec.image);
      if (!resolved) return fail_setup(resolved.error());
      image.emplace(std::move(*resolved));
      image_fd = ::open(image->rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (image_fd < 0) return fail_setup(sys_error("image", "open " + image->rootfs));
      parts.image = {{"name", spec.image}, {"digest", image->digest}, {"names", image->names},
                     {"entries", image->meta.value("entries", 0LL)}, {"seal", "checked"},
                     {"root", {{"type", "overlay"}, {"lower", image->rootfs}, {"upper", "tmpfs"},
                               {"upper_size_bytes", mounts->upper_size_bytes}, {"read_only", true}}},
                     {"mounts", mounts_to_json(*mounts)}};
      mounts->image_fd = image_fd;
      mounts->image_path = image->rootfs;
    }
    if (!spec.inputs.empty()) {
      auto hashed = hash_inputs(spec.inputs, cwd);
      if (!hashed) return fail_setup(hashed.error());
      for (auto& h : *hashed) inputs.push_back(h);
    }
    mounts->files = req.files;
    // Seccomp: parsed, compiled (or loaded from the cache) and patched here in the parent; the
    // program child only installs the result (seccomp_policy.hpp).
    auto seccomp = prepare_seccomp(spec.seccomp, req.dirs.state.empty() ? "" : req.dirs.state + "/cache/seccomp",
                                   spec.capabilities.keep);
    if (!seccomp) return fail_setup(seccomp.error());
    parts.enforcement["seccomp"] = seccomp_enforcement_json(*seccomp);
    if (!seccomp->enabled)
      spdlog::warn("seccomp is UNCONFINED for this run: the program may use every system call the kernel offers");
    if (seccomp->enabled)
      spdlog::info("seccomp policy {}: {} BPF instructions, {} in {} us", spec.seccomp, seccomp->reference.size(),
                   seccomp->cached ? "loaded from the cache" : "compiled", seccomp->setup_us);
    for (auto& n : seccomp->notes) spdlog::info("seccomp policy {}: {}", spec.seccomp, n);
    if (!seccomp->unresolved.empty())
      spdlog::info("seccomp policy {}: {} system call name(s) unknown to libseccomp skipped (listed in the trace)",
                   spec.seccomp, seccomp->unresolved.size());

    ChildConfig cfg;
    cfg.identity = *identity;
    cfg.mounts = std::move(*mounts);
    cfg.mounts.secret_files = req.secret_files;
    cfg.mounts.owner_uid = identity->uid;
    cfg.mounts.owner_gid = identity->gid;
    // The mount plan is final: the operations init runs are the ones the record lists.
    cfg.mounts.ops = mount_ops(cfg.mounts);
    parts.image["mounts"] = mount_ops_to_json(cfg.mounts.ops);
    if (auto st = out_pair.open_socketpair("prepare", "/out"); !st) return fail_setup(st.error());
    cfg.out_sock = out_pair.w;
    cfg.hostname = spec.hostname;
    cfg.argv = spec.argv;
    // With a pty the program's stdout is a terminal: the caller's TERM describes the terminal
    // that finally shows it.
    cfg.envp = build_environment(spec, environ, ::isatty(STDOUT_FILENO) == 1 || req.stdin_plan.mode == StdinMode::pty);
    if (gpu.enabled) add_gpu_environment(cfg.envp, gpu, spec);
    for (auto& [name, value] : req.secret_env) cfg.envp.push_back(name + "=" + value);
    cfg.rlimits = {{RLIMIT_CORE, 0}};
    cfg.keep_caps = capability_mask(spec.capabilities.keep);
    cfg.umask = req.umask;
    if (memory_fallback && sysv_shm_capped(*identity)) cfg.sysv_shm_bytes = *spec.limits.memory_bytes;
    for (auto& [res, value] : plan.rlimits) cfg.rlimits.push_back({res, static_cast<rlim_t>(value)});
    Pipe sync, msg, out, err;
    for (Pipe* p : {&sync, &msg, &out, &err})
      if (auto st = p->open(); !st) return fail_setup(st.error());
    // The caller's stdin: a pipe fed by the supervisor, a pty, or /dev/null (stdin_relay.hpp).
    // Declared here so that it ends, and the caller's terminal settings are restored, on every
    // way out of this run, before anything is printed.
    CallerStdin caller_in(req.stdin_plan);
    if (auto st = caller_in.prepare(); !st) return fail_setup(st.error());
    cfg.in_fd = caller_in.child_in_fd();
    cfg.pty_sock = caller_in.child_pty_sock();
    cfg.pty_size = caller_in.initial_size();
    cfg.sync_fd = sync.r;
    cfg.msg_fd = msg.w;
    cfg.out_fd = out.w;
    cfg.err_fd = err.w;
    Pipe handoff;  // a socketpair: r stays with the supervisor, w is init's end (child.cpp, install_seccomp)
    if (seccomp->enabled) {
      if (auto st = handoff.open_socketpair("seccomp", "the listener hand-off"); !st) return fail_setup(st.error());
      cfg.seccomp_sock = handoff.w;
      cfg.seccomp_filter = notify_program(seccomp->reference);
      cfg.seccomp_reference = &seccomp->reference;
    }

    // Egress proxy: init makes the listening socket inside the sandbox's netns and sends it back
    // on this socketpair (proxy.hpp explains why this way).
    Pipe proxy_pair;
    std::optional<EgressProxy> proxy;
    if (spec.network.mode == "proxy") {
      auto rules = parse_allow_rules(spec.network.allow);
      if (!rules) return fail_setup(rules.error());
      if (auto st = proxy_pair.open_socketpair("network", "the egress proxy"); !st) return fail_setup(st.error());
      cfg.proxy_sock = proxy_pair.w;
      cfg.proxy_port = kProxyPort;
      ProxyConfig pc;
      if (events)
        pc.on_violation = [ev = &*events](const json& v) {
          json fields = v;
          fields.erase("time_ms");  // the event's own time_ms says when
          ev->emit("violation", std::move(fields));
        };
      pc.rules = std::move(*rules);
      pc.max_connections = spec.network.max_connections;
      pc.max_bytes = spec.network.max_bytes;
      pc.idle_timeout_ms = spec.network.idle_timeout_ms;
      pc.start_ms = monotonic_ms();
      proxy.emplace(std::move(pc), proxy_pair.r);
      proxy_pair.r = -1;  // the proxy owns it
    }

    // The forwarded signals go to a signalfd; they must be blocked before clone so that none is
    // lost in between (and init inherits the mask, which it wants for sigwaitinfo too). main()
    // blocked them already (signals.hpp); the guards put the mask and SIGPIPE's disposition
    // back on every return path of this step. SIGPIPE is ignored so that a reader gone away is
    // an EPIPE for the relays (output_relay.hpp), not the end of sbx and its record.
    sigset_t forwarded, all_supervised;
    forwarded_signals(&forwarded);
    supervised_signals(&all_supervised);
    SignalMaskGuard mask_guard(SIG_BLOCK, all_supervised);
    SignalDispositionGuard sigpipe_guard(SIGPIPE, SIG_IGN);
    int sigfd = ::signalfd(-1, &forwarded, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd < 0) return fail_setup(sys_error("prepare", "signalfd"));
    // A signal that came before the sandbox exists (while sbx prepared, or in its first
    // milliseconds, main.cpp) ends the run here: the program is not started, and the record
    // says why, as a terminal's Ctrl-C before a command starts means it never runs.
    if (int sig = take_pending_forwarded_signal()) {
      ::close(sigfd);
      outcome = Outcome{};
      outcome.status = RunStatus::signaled;
      outcome.signal = sig;
      outcome.reason = signal_name(sig) + " received by sbx before the program started: it was not started";
      return;
    }
    if (auto st = caller_in.begin_session(); !st) {
      ::close(sigfd);
      return fail_setup(st.error());
    }

    // 2 spawn
    t_spawn = mono_us();
    // Shared init (clone.hpp): without an image there is nothing for the supervisor to do while
    // init builds the sandbox, so init runs in our address space. Init is a fork instead
    //  - with an image: the supervisor takes the image's seal meanwhile;
    //  - with a run cgroup: init is in it, and when the cgroup's OOM killer picks a process it
    //    kills every process that shares the victim's address space — with a shared init that
    //    would be sbx itself, and the run would end without its record.
    //  - in a warm pool: the supervisor waits for the call while init waits before the execve.
    const bool shared = image_fd < 0 && !cgroup && !req.await_call;
    cfg.pool_job = static_cast<bool>(req.await_call);
    cfg.shared_memory = shared;
    bool in_cgroup = false;
    Result<CloneResult> child = CloneResult{};
    if (shared) {
      if (auto st = init_stack.allocate(); !st) {
        ::close(sigfd);
        return fail_setup(st.error());
      }
      cfg.program_stack_top = init_stack.program_top();
      child = clone_shared(kNamespaces, init_entry, &cfg, init_stack.top());
    } else {
      child = clone_sandbox(kNamespaces, cgroup ? cgroup->dir_fd() : -1, in_cgroup);
    }
    if (!child) {
      ::close(sigfd);
      return fail_setup(child.error());
    }
    if (child->pid == 0) run_init(cfg);  // never returns
    sync.close_r();
    msg.close_w();
    out.close_w();
    err.close_w();
    handoff.close_w();
    proxy_pair.close_w();
    out_pair.close_w();
    caller_in.close_child_ends();
    Status placed;
    if (cgroup && !in_cgroup) placed = cgroup->add_pid(child->pid);  // before "go": nothing ran yet
    if (auto st = placed.ok() ? write_id_maps(child->pid, *identity) : placed; !st) {
      ::kill(child->pid, SIGKILL);
      int ws;
      ::waitpid(child->pid, &ws, 0);
      ::close(child->pidfd);
      ::close(sigfd);
      return fail_setup(st.error());
    }
    bool timed_out_in_setup = false;
    if (shared) {
      non_dumpable.emplace();  // the maps are written: /proc/1 turns root-owned before init goes on
      // From "go" until init reports kStarted, init runs ordinary code in our memory: nothing
      // but raw system calls here (raw_syscall.hpp), not even logging.
      // A failed write means init is gone: the wait below sees its pidfd, and supervise() why.
      (void)raw::write(sync.w, "gs", 2);
      timed_out_in_setup = wait_for_shared_init(msg.r, child->pidfd, spec.limits.timeout_ms);
    } else if (::write(sync.w, "g", 1) != 1) {
      spdlog::debug("sync write failed: {}", std::strerror(errno));
    }
    // The image's seal is taken now, while init builds the sandbox on the other core: init waits
    // for the second byte before it starts the program, so nothing of the image runs unchecked.
    // The walk is one fstatat per entry: its cost grows with the image, the overlay's does not.
    if (image_fd >= 0) {
      std::int64_t t0 = mono_us();
      auto seal = compute_seal_fd(image_fd);
      ::close(image_fd);
      image_fd = -1;
      Status sealed = seal ? seal_matches(*image, *seal, spec.image) : Status(seal.error());
      if (!sealed) {
        parts.image["seal"] = seal ? "mismatch" : "error";
        ::kill(child->pid, SIGKILL);
        int ws;
        ::waitpid(child->pid, &ws, 0);
        ::close(child->pidfd);
        ::close(sigfd);
        return fail_setup(sealed.error());
      }
      spdlog::debug("image seal: {} entries checked in {} us, beside the sandbox's setup", seal->entries, mono_us() - t0);
    }
    if (req.await_call) {
      // The pool's pause: the sandbox is built and init waits for "s". The call arrives now (or
      // never: the sandbox is discarded); it may only lower what is still open (pool_refusal).
      auto call = req.await_call(PoolPause{child->pidfd, msg.r, sigfd});
      std::string refused = call ? pool_refusal(spec, call->spec) : "";
      if (!call || !refused.empty()) {
        if (!refused.empty()) spdlog::warn("pooled sandbox refused its call: {}", refused);
        ::kill(child->pid, SIGKILL);
        int ws;
        ::waitpid(child->pid, &ws, 0);
        ::close(child->pidfd);
        ::close(sigfd);
        discarded = true;
        return;
      }
      call_spec = std::move(call->spec);
      inputs = std::move(call->inputs);
      record_extra = std::move(call->record_extra);
      after_run = std::move(call->after_run);
      // The call's time starts at hand-out: its wall-time limit and its record's started_at.
      parts.started_at = rfc3339_now();
      t_spawn = mono_us();
      // "s", then the job: init reads it at once (child.cpp), so the pipe drains as it fills. A
      // failed write means init is gone, which supervise() sees and reports.
      if (auto st = write_all(sync.w, "s" + encode_pool_job(call->job), "the pooled sandbox's job"); !st)
        spdlog::debug("{}", st.error().describe());
    } else if (!shared && ::write(sync.w, "s", 1) != 1) {
      spdlog::debug("sync write failed: {}", std::strerror(errno));
    }
    describe_request();  // after "s": init must not wait for it

    // 3 supervise
    t_go = mono_us();
    SuperviseInput in;
    in.pid = child->pid;
    in.pidfd = child->pidfd;
    in.msg_fd = msg.r;
    in.out_fd = out.r;
    in.err_fd = err.r;
    out.r = err.r = -1;  // the relays own and close them
    if (req.stdin_plan.mode == StdinMode::pty) {
      // The pty master is the stdout stream (it arrives in the loop); nothing writes the pipe.
      ::close(in.out_fd);
      in.out_fd = -1;
    }
    in.input = &caller_in;
    if (in.out_fd >= 0) ::fcntl(in.out_fd, F_SETFL, O_NONBLOCK);
    ::fcntl(in.err_fd, F_SETFL, O_NONBLOCK);
    in.out_dst = req.stdout_fd;
    in.err_dst = req.stderr_fd;
    in.timeout_ms = spec.limits.timeout_ms;
    if (spec.limits.timeout_ms) {
      // The wall-time limit counts from the sandbox's creation: the setup so far (a shared
      // init's whole setup, a forked one's start and the image's seal) has used part of it.
      std::int64_t used = (mono_us() - t_spawn) / 1000;
      in.timeout_ms = std::max<std::int64_t>(1, *spec.limits.timeout_ms - used);
    }
    in.timed_out_before_start = timed_out_in_setup;
    in.start_ms = t_spawn / 1000;
    in.output_limit_bytes = spec.limits.output_limit_bytes;
    in.signal_fd = sigfd;
    in.seccomp_sock = handoff.r;
    handoff.r = -1;  // the supervisor's notifier owns it
    in.seccomp_reference = &seccomp->reference;
    in.seccomp_named = &seccomp->named;
    if (cgroup && spec.limits.cpu_time_ms) {
      in.cpu_budget_ms = spec.limits.cpu_time_ms;
      in.cpu_used_us = [&] { return cgroup->cpu_usage_us(); };
      in.max_cpus = spec.limits.cpus.value_or(static_cast<double>(::sysconf(_SC_NPROCESSORS_ONLN)));
    }
    if (proxy) in.proxy = &*proxy;
    if (events) {
      events->emit("started", {{"run_id", parts.run_id}, {"pid", child->pid}, {"image", spec.image},
                               {"pack", req.pack.is_object() ? req.pack.value("name", json(nullptr)) : json(nullptr)},
                               {"cgroup", cgroup ? json(cgroup->path()) : json(nullptr)}});
      in.events = &*events;
      if (cgroup_events) in.cgroup_events = &*cgroup_events;
    }
    sup = supervise(in);
    if (cgroup_events) cgroup_events->read_all();  // what came with the end: the OOM kill is counted by now
    caller_in.end_session();  // the caller's terminal as it was, before anything is reported
    stdin_record = caller_in.to_json();
    if (sup->init_pending) exiting_init = child->pid;
    ::close(child->pidfd);
    ::close(sigfd);
    // 4 collect
    outcome = outcome_from_supervision(*sup, in.kill_grace_ms);
    // What the program held once started (init read /proc/PID/status right after its execve);
    // null when it never started or its status could not be read.
    parts.enforcement["capabilities"]["program"] = sup->program_caps ? process_caps_json(*sup->program_caps) : json(nullptr);
    if (outcome.error) add_setup_hint(*outcome.error, spec, *identity, cwd);
    // /out's fd waited in the socket since setup; every process of the sandbox is dead now.
    if (recv_fd(out_pair.r, &out_dir_fd) <= 0) out_dir_fd = -1;
    if (out_dir_fd >= 0 && !req.export_dir.empty()) {
      ExportCaps caps{spec.limits.output_max_bytes, spec.limits.output_max_files};
      auto r = export_out(out_dir_fd, req.export_dir, caps);
      if (!r) {
        spdlog::error("artifact export to {} failed: {}", req.export_dir, r.error().describe());
        export_error = r.error().describe();
        if (events) events->emit("artifact_export", {{"dir", req.export_dir}, {"error", export_error}});
      } else {
        exported = std::move(*r);
        if (events)
          events->emit("artifact_export", {{"dir", req.export_dir}, {"files", exported->files.size()}, {"bytes", exported->bytes},
                                           {"skipped", exported->skipped_count}, {"limit_hit", exported->limit_hit}});
        for (auto& s : exported->skipped) spdlog::warn("export: skipped {}: {}", s.path, s.reason);
        if (exported->skipped_count > static_cast<std::int64_t>(exported->skipped.size()))
          spdlog::warn("export: {} more skipped (listed up to {} in the trace)", exported->skipped_count - static_cast<std::int64_t>(exported->skipped.size()), kMaxListedSkips);
        if (exported->limit_hit && outcome.status == RunStatus::ok) {
          outcome.status = RunStatus::output_limit;
          outcome.reason = "artifact export caps reached (--output-max-bytes/--output-max-files)";
        }
      }
    }
    // Without a cgroup the CPU budget is RLIMIT_CPU, which the kernel enforces with SIGKILL (hard
    // limit): a program killed that way having used its budget ran out of CPU time. rusage
    // undercounts what the kernel's CPU timer saw (it samples ticks), hence the 80% margin.
    if (!cgroup && spec.limits.cpu_time_ms && outcome.status == RunStatus::signaled &&
        (outcome.signal == SIGKILL || outcome.signal == SIGXCPU)) {
      std::int64_t used = sup->usage.ru_utime.tv_sec * 1000LL + sup->usage.ru_utime.tv_usec / 1000 +
                          sup->usage.ru_stime.tv_sec * 1000LL + sup->usage.ru_stime.tv_usec / 1000;
      if (used * 10 >= *spec.limits.cpu_time_ms * 8) {
        outcome.status = RunStatus::timeout;
        outcome.reason = "cpu";
      }
    }
    // SIGXFSZ comes only from RLIMIT_FSIZE, which sbx sets only for the memory fallback: a program
    // killed by it wrote a file (a memfd, a /tmp or /out file) past that cap. Said in the reason,
    // since "signaled 25" alone does not tell a user which limit bit.
    if (memory_fallback && outcome.status == RunStatus::signaled && outcome.signal == SIGXFSZ)
      outcome.reason = "SIGXFSZ: a file grew past RLIMIT_FSIZE (" + format_size(*spec.limits.memory_bytes) +
                       ", the memory fallback's cap on each file and memfd; see enforcement.memory_fallback)";
    parts.violations = violations_json(sup->violations);
    if (seccomp && seccomp->enabled) {
      parts.violations_summary["seccomp"] = violation_totals_json(sup->seccomp_totals, sup->violations.size());
      if (sup->seccomp_totals.truncated())
        spdlog::warn("seccomp: {} refused calls of {} distinct kinds are counted but not listed in the trace (list capped at {} entries)",
                     sup->seccomp_totals.unlisted_calls, sup->seccomp_totals.unlisted_distinct, SeccompNotifier::kMaxListed);
    }
    if (proxy) {
      for (auto& v : proxy->violations_json()) parts.violations.push_back(v);
      parts.usage_extra["network"] = proxy->usage_json();
      if (!proxy->listener_received() && outcome.status != RunStatus::setup_error)
        spdlog::warn("the egress proxy never received its listening socket");
    }
    if (sup->seccomp_kill)
      spdlog::warn("seccomp: {} is refused by a kill rule of the policy: sandbox killed", sup->seccomp_kill->name);
    if (cgroup) {
      CgroupUsage u = cgroup->usage();
      json cg_usage = cgroup_usage_json(u);  // a named object: items() of a temporary would dangle
      for (auto& [k, v] : cg_usage.items()) parts.usage_extra[k] = v;
      // The kernel's OOM killer acted: read from memory.events, not guessed from SIGKILL.
      if (u.oom_kill.value_or(0) > 0 && outcome.signal == SIGKILL && outcome.status == RunStatus::signaled)
        outcome.status = RunStatus::oom;
    }
  }();
  if (discarded) {
    if (image_fd >= 0) ::close(image_fd);
    if (cgroup) {
      if (auto st = cgroup->kill(); !st) spdlog::warn("cgroup kill: {}", st.error().describe());
      if (auto st = cgroup->remove(); !st) spdlog::warn("cgroup remove: {}", st.error().describe());
    }
    RunReport report;
    report.discarded = true;
    return report;
  }
  // 4 collect (typed IO): the caller reads and validates what the run produced.
  nlohmann::json extra = json::object();
  if (after_run) extra = after_run(outcome, out_dir_fd);
  if (out_dir_fd >= 0) ::close(out_dir_fd);  // the last reference: the sandbox's /out is freed
  if (image_fd >= 0) ::close(image_fd);

  // 5 record
  t_end = mono_us();
  describe_request();
  parts.ended_at = rfc3339_now();
  parts.outcome = outcome;
  parts.sup = sup ? &*sup : nullptr;
  RunReport report;
  report.outcome = outcome;
  report.exit_status = exit_status_for(outcome);
  const std::string run_id = parts.run_id;
  report.trace = trace_record(std::move(parts));
  report.trace["inputs"] = inputs;
  report.trace["stdin"] = stdin_record;
  json outputs = json::array();
  if (exported) {
    for (auto& f : exported->files) outputs.push_back({{"path", f.path}, {"bytes", f.bytes}, {"sha256", f.sha256}});
    report.trace["export"] = exported->to_json(req.export_dir, {spec.limits.output_max_bytes, spec.limits.output_max_files});
  } else if (!req.export_dir.empty()) {
    report.trace["export"] = {{"dir", req.export_dir}, {"error", export_error.empty() ? json("the run ended before /out existed") : json(export_error)}};
  }
  if (extra.contains("outputs")) {
    for (auto& o : extra["outputs"]) outputs.push_back(o);
    extra.erase("outputs");
  }
  report.trace["outputs"] = outputs;
  for (auto& [k, v] : record_extra.items()) report.trace[k] = v;
  if (extra.contains("blobs") && report.trace.contains("blobs") && report.trace["blobs"].is_array()) {
    for (auto& b : extra["blobs"]) report.trace["blobs"].push_back(b);
    extra.erase("blobs");
  }
  for (auto& [k, v] : extra.items()) report.trace[k] = v;
  if (events) {
    // The last event, then one last non-blocking write: what the destination did not take by now
    // is dropped, and the record counts it.
    const json& res = report.trace["result"];
    const json& use = report.trace["usage"];
    json fields = {{"status", res.value("status", json(nullptr))}, {"exit_code", res.value("exit_code", json(nullptr))},
                   {"signal", res.value("signal", json(nullptr))}, {"exit_status", report.exit_status}};
    for (const char* k : {"wall_ms", "cpu_user_ms", "cpu_sys_ms", "memory_peak_bytes", "pids_peak", "oom_kills"})
      if (use.contains(k)) fields[k] = use[k];
    events->emit("exited", std::move(fields));
    events->finish();
    report.trace["events"] = events->record_json();
  }
  // Which build made the record (cached by the binary's identity: self_digest.hpp).
  if (auto digest = self_binary_sha256(req.dirs); digest) report.trace["sbx"]["binary_sha256"] = *digest;
  else report.trace["sbx"]["binary_sha256_error"] = digest.error().describe();
  // The ledger's line: compact JSON; never throws (trace.hpp).
  std::string line = trace_text(report.trace, -1);
  // The record is stored before anything is written to stderr: a write to stderr blocks while
  // its reader is stalled, and sbx must not die there (SIGKILL from an impatient caller) with
  // the run unrecorded. The supervisor's loop is over: the append (an flock wait bounded at
  // seconds, one write, one fdatasync) cannot stall the run's limits. --trace-file is 0600 like
  // the ledger: a record holds the run's argv and --env values.
  auto stored = store_trace(req.dirs, run_id, line);
  report.recorded = stored.ok();
  if (!stored) report.record_error = stored.error().describe();
  Status trace_file_written;
  if (!req.trace_file.empty()) trace_file_written = write_file_durable(req.trace_file, trace_text(report.trace), 0600);
  if (outcome.status == RunStatus::setup_error && outcome.error) {
    // --dry-run prints the same line (print_dry_run).
    std::fprintf(stderr, "sbx: %s\n", printable(outcome.error->describe_setup()).c_str());
  } else if (outcome.status == RunStatus::timeout) {
    // One line: a 124 that says nothing looks like the program's own exit status. Warnings, so
    // that --log-level error silences them, and never blocking (NonBlockingLogScope).
    if (outcome.reason == "cpu" && spec.limits.cpu_time_ms)
      spdlog::warn("CPU-time budget of {} spent: sandbox killed (exit 124)", format_duration_ms(*spec.limits.cpu_time_ms));
    else if (spec.limits.timeout_ms)
      spdlog::warn("wall-time limit of {} reached: sandbox killed (exit 124)", format_duration_ms(*spec.limits.timeout_ms));
  }
  if (sup && spec.limits.output_limit_bytes)
    for (auto [name, st] : {std::pair{"stdout", &sup->out}, std::pair{"stderr", &sup->err}})
      if (st->truncated)
        spdlog::warn("{} truncated at the output limit of {}: {} more bytes dropped (--output-limit)", name,
                     format_size(*spec.limits.output_limit_bytes), st->dropped_bytes);
  if (!stored && req.require_record) {
    report.exit_status = 125;  // the caller (pack run, exec) says why, in its own one line
  } else if (!stored && spec.require_record) {
    std::fprintf(stderr, "sbx: the run's trace record could not be stored durably in %s: %s; exit 125 (a run without its record is a failure here)\n",
                 printable(req.dirs.traces).c_str(), printable(stored.error().describe()).c_str());
    report.exit_status = 125;
  } else if (!stored) {
    spdlog::warn("could not store the trace record in {}: {}", req.dirs.traces, stored.error().describe());
  } else if (stored->torn_bytes) {
    spdlog::warn("trace ledger: cut {} bytes of an interrupted append off its end (noted as ledger_repair in run {}'s record)",
                 stored->torn_bytes, run_id);
  }
  if (!trace_file_written) {
    std::fprintf(stderr, "sbx: cannot write --trace-file %s: %s\n", printable(req.trace_file).c_str(),
                 printable(trace_file_written.error().describe()).c_str());
    if (report.exit_status == 0) report.exit_status = 125;
  }
  spdlog::info("run {} ended: {} (trace: sbx trace show {})", run_id, to_string(outcome.status), run_id);
  // 6 clean: init's exit has run beside the recording; it is reaped now, so that nothing of the
  // run outlives sbx. Then anything left in the run cgroup is killed and the cgroup removed.
  // Nothing else on the host: the root, /tmp and /dev lived in tmpfs mounts of the sandbox's own
  // mount namespace, which died with its last process.
  if (exiting_init > 0) reap_init(exiting_init);
  if (cgroup) {
    if (auto st = cgroup->kill(); !st) spdlog::warn("cgroup kill: {}", st.error().describe());
    if (auto st = cgroup->remove(); !st) spdlog::warn("cgroup remove: {}", st.error().describe());
  }
  if (t_go) {
    std::int64_t t_done = mono_us();
    spdlog::debug("timing: prepare {} us, start {} us, run {} us, record {} us", t_spawn - t_start,
                  t_go - t_spawn, t_end - t_go, t_done - t_end);
  }
  return report;
}

}  // namespace sbx
