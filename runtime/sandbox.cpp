#include "runtime/sandbox.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <spdlog/spdlog.h>

#include "runtime/cgroup.hpp"
#include "runtime/child.hpp"
#include "runtime/clone.hpp"
#include "runtime/environment.hpp"
#include "runtime/fsutil.hpp"
#include "runtime/sha256.hpp"
#include "runtime/supervisor.hpp"
#include "runtime/trace.hpp"
#include "runtime/trace_store.hpp"
#include "runtime/units.hpp"

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
  void close_r() { if (r >= 0) ::close(r), r = -1; }
  void close_w() { if (w >= 0) ::close(w), w = -1; }
  ~Pipe() { close_r(); close_w(); }
};

std::string current_dir() {
  char buf[4096];
  return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string();
}

json host_json(const CgroupInfo& cg) {
  struct utsname u;
  ::uname(&u);
  return {{"kernel", u.release},
          {"cgroup", {{"layout", cg.layout}, {"mount", cg.mount}, {"self_path", cg.self_path}, {"controllers", cg.controllers}}}};
}

// Which limits are enforced and how. Wall time, output and /tmp size are sbx's own; memory,
// processes and CPU need cgroup v2 controllers, which are wired in by the limits work.
std::vector<LimitEntry> plan_limit_entries(const Limits& l, const CgroupInfo& cg) {
  std::vector<LimitEntry> v;
  if (l.timeout_ms) v.push_back({"timeout_ms", *l.timeout_ms, "supervisor timerfd + pidfd (SIGKILL of the pid namespace)", ""});
  if (l.output_limit_bytes) v.push_back({"output_limit_bytes", *l.output_limit_bytes, "supervisor pipe cap per stream", ""});
  v.push_back({"tmp_size_bytes", l.tmp_size_bytes, "tmpfs size option (/tmp)", ""});
  std::string why = "cgroup v2 " + std::string(cg.layout == "hybrid" ? "is a v1/v2 hybrid here without this controller"
                                                                      : "controllers not available to sbx here");
  if (l.memory_bytes) v.push_back({"memory_bytes", *l.memory_bytes, "", why + " (memory)"});
  if (l.pids) v.push_back({"pids", *l.pids, "", why + " (pids)"});
  if (l.cpus) v.push_back({"cpus", *l.cpus, "", why + " (cpu)"});
  if (l.cpu_time_ms) v.push_back({"cpu_time_ms", *l.cpu_time_ms, "", why + " (cpu)"});
  return v;
}

Outcome outcome_from(const SuperviseResult& s) {
  Outcome o;
  if (s.setup_error) {
    const ChildMsg& m = *s.setup_error;
    o.status = RunStatus::setup_error;
    o.error = Error{m.stage, m.err, m.message};
    return o;
  }
  if (s.timed_out) {
    o.status = RunStatus::timeout;
    o.reason = "wall";
    o.signal = SIGKILL;
    return o;
  }
  if (s.program_wait_status) {
    o = outcome_from_wait_status(*s.program_wait_status);
    return o;
  }
  // Init died without reporting: killed by sbx after a forwarded signal, or by something else.
  o.status = RunStatus::signaled;
  o.signal = WIFSIGNALED(s.init_wait_status) ? WTERMSIG(s.init_wait_status) : SIGKILL;
  if (s.killed_after_grace) o.reason = "killed after signal " + std::to_string(s.forwarded_signal);
  return o;
}

}  // namespace

RunReport run_sandbox(const RunRequest& req) {
  const RunSpec& spec = req.spec;
  TraceParts parts;
  parts.run_id = make_run_id();
  parts.started_at = rfc3339_now();
  std::string cwd = current_dir();
  parts.invocation = {{"argv", req.invocation_argv},
                      {"cwd", cwd},
                      {"profile", {{"name", req.profile.name}, {"origin", req.profile.origin}, {"sha256", sha256_hex(req.profile.text)}}},
                      {"pack", nullptr},
                      {"spec", spec_to_json(spec)}};
  CgroupInfo cg = detect_cgroup();
  parts.host = host_json(cg);
  parts.limits = plan_limit_entries(spec.limits, cg);
  json namespaces = json::array();
  for (auto* n : kNamespaceNames) namespaces.push_back(n);
  parts.enforcement = {{"namespaces", namespaces},
                       {"cgroup", "unavailable"},
                       {"seccomp", {{"profile", nullptr}, {"sha256", nullptr}, {"unresolved", json::array()},
                                    {"note", "not yet enforced: the seccomp policy is not part of this version"}}},
                       {"capabilities", {{"kept", json::array()}, {"bounding", json::array()}, {"securebits", "locked"}, {"no_new_privs", true}}},
                       {"network", {{"mode", spec.network.mode}, {"allow", json::array()}, {"interfaces", {"lo"}}}}};
  parts.image = {{"name", spec.image}, {"digest", nullptr}, {"mounts", json::array()}};

  Outcome outcome;
  std::optional<SuperviseResult> sup;
  auto fail_setup = [&](const Error& e) {
    outcome = Outcome{};
    outcome.status = RunStatus::setup_error;
    outcome.error = e;
  };

  [&] {
    // 1 prepare
    std::vector<std::string> not_enforced;
    for (auto& l : parts.limits)
      if (l.mechanism.empty()) not_enforced.push_back(l.limit);
    if (!not_enforced.empty()) {
      std::string list;
      for (auto& n : not_enforced) list += (list.empty() ? "" : ", ") + n;
      if (spec.require_limits)
        return fail_setup(make_error("limits", "--require-limits: cannot enforce " + list + " on this host (cgroup v2 " + cg.layout + "; see 'sbx doctor')"));
      spdlog::warn("limits not enforced on this host: {} (see the trace's enforcement section and 'sbx doctor')", list);
    }
    auto identity = plan_identity(spec);
    if (!identity) return fail_setup(identity.error());
    parts.enforcement["identity"] = identity_to_json(*identity);
    auto mounts = plan_mounts(spec, cwd);
    if (!mounts) return fail_setup(mounts.error());
    parts.image["mounts"] = mounts_to_json(*mounts);

    ChildConfig cfg;
    cfg.identity = *identity;
    cfg.mounts = std::move(*mounts);
    cfg.hostname = spec.hostname;
    cfg.argv = spec.argv;
    cfg.envp = build_environment(spec, environ, ::isatty(STDOUT_FILENO) == 1);
    cfg.rlimits = {{RLIMIT_CORE, 0}};
    Pipe sync, msg, out, err;
    for (Pipe* p : {&sync, &msg, &out, &err})
      if (auto st = p->open(); !st) return fail_setup(st.error());
    cfg.sync_fd = sync.r;
    cfg.msg_fd = msg.w;
    cfg.out_fd = out.w;
    cfg.err_fd = err.w;

    // The forwarded signals go to a signalfd; they must be blocked before clone so that none is
    // lost in between (and init inherits the mask, which it wants for sigwaitinfo too).
    sigset_t forwarded, all_supervised, old;
    sigemptyset(&forwarded);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&forwarded, s);
    supervised_signals(&all_supervised);
    ::sigprocmask(SIG_BLOCK, &all_supervised, &old);
    ::signal(SIGPIPE, SIG_IGN);
    int sigfd = ::signalfd(-1, &forwarded, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd < 0) return fail_setup(sys_error("prepare", "signalfd"));

    // 2 spawn
    bool in_cgroup = false;
    auto child = clone_sandbox(kNamespaces, -1, in_cgroup);
    if (!child) {
      ::close(sigfd);
      return fail_setup(child.error());
    }
    if (child->pid == 0) run_init(cfg);  // never returns
    sync.close_r();
    msg.close_w();
    out.close_w();
    err.close_w();
    if (auto st = write_id_maps(child->pid, *identity); !st) {
      ::kill(child->pid, SIGKILL);
      int ws;
      ::waitpid(child->pid, &ws, 0);
      ::close(child->pidfd);
      ::close(sigfd);
      return fail_setup(st.error());
    }
    if (::write(sync.w, "g", 1) != 1) spdlog::debug("sync write failed: {}", std::strerror(errno));

    // 3 supervise
    SuperviseInput in;
    in.pid = child->pid;
    in.pidfd = child->pidfd;
    in.msg_fd = msg.r;
    in.out_fd = out.r;
    in.err_fd = err.r;
    out.r = err.r = -1;  // the pumps own and close them
    ::fcntl(in.out_fd, F_SETFL, O_NONBLOCK);
    ::fcntl(in.err_fd, F_SETFL, O_NONBLOCK);
    in.timeout_ms = spec.limits.timeout_ms;
    in.output_limit_bytes = spec.limits.output_limit_bytes;
    in.signal_fd = sigfd;
    sup = supervise(in);
    ::close(child->pidfd);
    ::close(sigfd);
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    // 4 collect
    outcome = outcome_from(*sup);
  }();

  // 5 record
  parts.ended_at = rfc3339_now();
  parts.outcome = outcome;
  parts.sup = sup ? &*sup : nullptr;
  RunReport report;
  report.outcome = outcome;
  report.exit_status = exit_status_for(outcome);
  report.trace = trace_record(parts);
  std::string text = report.trace.dump(2) + "\n";
  if (outcome.status == RunStatus::setup_error && outcome.error) {
    std::fprintf(stderr, "sbx: %s\n", outcome.error->describe_with_stage().c_str());
  } else if (outcome.status == RunStatus::timeout) {
    spdlog::info("wall-time limit of {} reached: sandbox killed", format_duration_ms(*spec.limits.timeout_ms));
  }
  if (auto st = store_trace(req.dirs, parts.run_id, text); !st)
    spdlog::warn("could not store the trace record in {}: {}", req.dirs.traces, st.error().describe());
  if (!req.trace_file.empty()) {
    if (auto st = write_file_durable(req.trace_file, text); !st) {
      std::fprintf(stderr, "sbx: cannot write --trace-file %s: %s\n", req.trace_file.c_str(), st.error().describe().c_str());
      if (report.exit_status == 0) report.exit_status = 125;
    }
  }
  spdlog::info("run {} ended: {} (trace in {}/{}.json)", parts.run_id, to_string(outcome.status), req.dirs.traces, parts.run_id);
  // 6 clean: nothing on the host to remove. The root, /tmp and /dev lived in tmpfs mounts of the
  // sandbox's own mount namespace, which died with its last process.
  return report;
}

}  // namespace sbx
