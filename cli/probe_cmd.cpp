// sbx probe [RUN OPTIONS] [--json]: run the boundary probes (probe/sbx_probe.c) in a sandbox
// configured exactly as `sbx run RUN OPTIONS` would configure it, and report each boundary held
// or breached.
//
// "Exactly as run would": the probe run IS `sbx run` — this command re-executes sbx with the
// caller's own words, "probe" replaced by "run", so option parsing, profile layering, image
// defaults, planning and enforcement are run_cmd.cpp's and the runtime's, not a copy. It adds only
// what the probes need: the helper bound read-only at /sbx-probe, a canary secret passed by name
// (--env-pass), and a trace file to check the record. A `--dry-run` of the same words first gives
// the limits the helper measures against.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "cli/commands.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/egress/egress_policy.hpp"
#include "runtime/launch/preflight.hpp"
#include "runtime/launch/probe_host.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/linux/cgroup.hpp"
#include "runtime/linux/userns.hpp"
#include "runtime/record/probe_report.hpp"
#include "runtime/record/trace_show.hpp"
#include "runtime/typed/pack_run.hpp"
#include "runtime/base/strings.hpp"

// The helper's bytes, placed in sbx's read-only data by cli/probe_blob.cpp.
extern "C" const unsigned char sbx_probe_helper_begin[];
extern "C" const unsigned char sbx_probe_helper_end[];

namespace sbx::cli {
namespace {
using nlohmann::json;
namespace fs = std::filesystem;

}  // namespace

// Runs sbx itself with `args`, capturing stdout and stderr (bounded), killing it after `limit`
// (commands.hpp).
Captured run_self(const std::vector<std::string>& args,
                  const std::vector<std::pair<std::string, std::string>>& env_extra, std::chrono::seconds limit,
                  bool pass_own_pid) {
  Captured c;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return c;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return c;
  }
  // What the child says when sbx cannot re-run itself, made before fork: it is /proc/self/exe, so
  // a missing /proc (bwrap without --proc) is the usual cause, and the fix is named.
  std::string exec_failed = "sbx: cannot re-run sbx as /proc/self/exe";
  if (!procfs_at_proc()) exec_failed += ": " + proc_mount_refused_hint(std::nullopt);
  exec_failed += "\n";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    for (auto& [k, v] : env_extra) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<std::string> a = args;
    // The helper's HOST_PID argument: this process's pid on the host, which becomes `sbx run`'s.
    if (pass_own_pid)
      for (auto& w : a)
        if (w == "@HOSTPID@") w = std::to_string(::getpid());
    std::vector<char*> argv;
    for (auto& w : a) argv.push_back(w.data());
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    // 125, not 127: the caller (doctor's sandbox row) reads 126/127 as the sandbox's program.
    (void)!::write(2, exec_failed.data(), exec_failed.size());
    ::_exit(125);
  }
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    return c;
  }
  auto deadline = std::chrono::steady_clock::now() + limit;
  pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* into[2] = {&c.out, &c.err};
  const std::size_t caps[2] = {1u << 20, 64u << 10};
  int open_fds = 2;
  bool killed = false;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !killed) {
      ::kill(pid, SIGKILL);
      killed = true;
    }
    if (::poll(p, 2, killed ? 2000 : static_cast<int>(std::min<long long>(left.count(), 1000))) < 0 && errno != EINTR)
      break;
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[16384];
      ssize_t n = ::read(p[i].fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(p[i].fd);
        p[i].fd = -1;
        --open_fds;
      } else if (into[i]->size() < caps[i]) {
        into[i]->append(buf, std::min<std::size_t>(static_cast<std::size_t>(n), caps[i] - into[i]->size()));
      }
    }
    if (killed && open_fds > 0 && std::chrono::steady_clock::now() > deadline + std::chrono::seconds(5)) break;
  }
  for (auto& x : p)
    if (x.fd >= 0) ::close(x.fd);
  int st = 0;
  ::waitpid(pid, &st, 0);
  c.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return c;
}

namespace {

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  if (::getrandom(raw.data(), bytes, 0) != static_cast<ssize_t>(bytes)) return {};
  return hex_lower(raw);
}

// The refusals: options of run that would change what the probe sees or where its output goes.
std::optional<std::string> refused(const RunFlags& f) {
  if (f.dry_run) return "--dry-run";
  if (!f.output_dir.empty()) return "--output";
  if (f.tty) return "--tty";
  if (f.interactive) return "--interactive";
  if (!f.trace_file.empty()) return "--trace-file";
  if (!f.command.empty()) return "a command";
  return std::nullopt;
}

struct TempDir {
  std::string path;
  ~TempDir() {
    if (!path.empty()) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  }
};

// The caller's words, "probe" -> "run", without probe's own --json; empty when there is no
// "probe" among them.
std::vector<std::string> run_words(const GlobalOptions& g) {
  std::vector<std::string> base;
  bool seen = false;
  for (std::size_t i = 0; i < g.argv.size(); ++i) {
    const std::string& a = g.argv[i];
    if (i == 0) {
      base.push_back(a);
      continue;
    }
    if (!seen && (a == "--state-dir" || a == "--log-level") && i + 1 < g.argv.size()) {
      base.push_back(a);
      base.push_back(g.argv[++i]);
      continue;
    }
    if (!seen && a == "probe") {
      seen = true;
      base.push_back("run");
      continue;
    }
    if (seen && a == "--json") continue;
    base.push_back(a);
  }
  return seen ? base : std::vector<std::string>{};
}

// 1. The plan: the limits the helper measures against, from run's own --dry-run. Sets `rc` to
// the usage error's status when the words make no run.
json dry_run_plan(const std::vector<std::string>& base, int& rc) {
  std::vector<std::string> dry = base;
  for (const char* w : {"--dry-run", "--", "/sbx-probe"}) dry.push_back(w);
  Captured plan = run_self(dry, {}, std::chrono::seconds(60), false);
  if (plan.status != 0) {
    std::string line = plan.err.substr(0, plan.err.find('\n'));
    if (line.starts_with("sbx: ")) line = line.substr(5);
    rc = usage_error("probe: the run options do not make a run: " + line);
    return nullptr;
  }
  auto spec = parse_json_doc(plan.out, {4u << 20}, "probe", "sbx run --dry-run");
  if (!spec || !spec->is_object() || !(*spec)["limits"].is_object()) {
    rc = usage_error("probe: sbx run --dry-run printed no plan");
    return nullptr;
  }
  return std::move(*spec);
}

// 2. The host side of the probes: a private directory with the helper and a marker file, a
//    loopback listener, a canary secret and a token that names every process of this probe.
struct HostSide {
  TempDir dir;
  std::string helper, marker, token, canary, trace, run_tmp, exported;
  int listen_fd = -1;
  int port = 0;
};

// The helper's bytes and the marker file, in modes the sandbox's mapped user can read.
bool write_helper(const std::string& helper, const std::string& marker) {
  int fd = ::open(helper.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
  std::size_t size = static_cast<std::size_t>(sbx_probe_helper_end - sbx_probe_helper_begin);
  // Modes set explicitly: the caller's umask (077 is common) must not hide the helper and the
  // marker from the sandbox's mapped user, or the probe run fails at execve.
  bool ok =
      fd >= 0 && ::write(fd, sbx_probe_helper_begin, size) == static_cast<ssize_t>(size) && ::fchmod(fd, 0755) == 0;
  if (fd >= 0) ::close(fd);
  int mfd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  ok = ok && mfd >= 0 && ::write(mfd, "sbx probe host marker\n", 22) == 22 && ::fchmod(mfd, 0644) == 0;
  if (mfd >= 0) ::close(mfd);
  return ok && size != 0;
}

std::optional<int> prepare_host_side(HostSide& h) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/sbx-probe-XXXXXX";
  if (char* made = ::mkdtemp(tmpl.data())) h.dir.path = made;
  else return usage_error("probe: cannot make a directory in " + tmpl + ": " + std::strerror(errno));
  ::chmod(h.dir.path.c_str(), 0755);  // traversable by the sandbox's mapped user (root mode)
  h.helper = h.dir.path + "/sbx-probe";
  h.marker = h.dir.path + "/host-marker";
  if (!write_helper(h.helper, h.marker)) return usage_error("probe: cannot write the probe helper to " + h.dir.path);
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  h.listen_fd = lfd;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t sl = sizeof sa;
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(lfd, 4) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &sl) != 0)
    return usage_error(std::string("probe: cannot listen on the host's loopback: ") + std::strerror(errno));
  h.port = ntohs(sa.sin_port);
  h.token = "sbxprobe" + random_hex(8);
  h.canary = random_hex(24);
  if (h.token.size() < 10 || h.canary.empty()) return usage_error("probe: getrandom failed");
  h.trace = h.dir.path + "/trace.json";
  // The run's own TMPDIR: whatever sbx run makes through it is the run's, and must be gone after.
  h.run_tmp = h.dir.path + "/tmp";
  if (::mkdir(h.run_tmp.c_str(), 0755) != 0)
    return usage_error("probe: cannot make " + h.run_tmp + ": " + std::strerror(errno));
  h.exported = h.dir.path + "/out";
  return std::nullopt;
}

// The run's --secret values (read as run reads them; the dry run has accepted them). The host
// side looks for these bytes after the run.
std::optional<int> read_secrets(const RunFlags& f, SecretValues& secrets) {
  for (auto& w : f.secrets) {
    auto eq = w.find('=');
    if (eq == std::string::npos) continue;
    auto v = read_secret_source(w.substr(eq + 1));
    if (!v) return usage_error("probe: --secret " + w.substr(0, eq) + ": " + v.error().describe());
    secrets.push_back({w.substr(0, eq), std::move(*v)});
  }
  return std::nullopt;
}

// 3. The probe run's words: the caller's, the helper bound in, the canary passed by name, the
// trace and the export kept here, and the helper's own arguments.
std::vector<std::string> probe_run_words(const std::vector<std::string>& base, const HostSide& h, const json& spec,
                                         const SecretValues& secrets, const RunFlags& f, const Dirs& dirs) {
  auto limit = [&](const char* k) -> long long {
    const json& limits = spec["limits"];
    auto v = limits.find(k);
    return v != limits.end() && v->is_number_integer() ? v->get<long long>() : 0;
  };
  std::vector<std::string> args = base;
  const std::vector<std::string> extra = {"--bind",
                                          h.helper + ":/sbx-probe",
                                          "--env-pass",
                                          "SBX_PROBE_CANARY",
                                          "--trace-file",
                                          h.trace,
                                          "--output",
                                          h.exported,
                                          "--",
                                          "/sbx-probe",
                                          h.token,
                                          h.marker,
                                          std::to_string(h.port),
                                          "@HOSTPID@",
                                          std::to_string(limit("pids")),
                                          std::to_string(limit("memory_bytes"))};
  args.insert(args.end(), extra.begin(), extra.end());
  const EgressTargets egress = egress_targets(spec);
  for (auto& t : egress.allowed) args.insert(args.end(), {"allow", t});
  for (auto& t : egress.other) args.insert(args.end(), {"other", t});
  for (auto& [name, value] : secrets) args.insert(args.end(), {"secret", name});
  if (f.tenant) {
    auto foreign = foreign_probes(*f.tenant, dirs, spec);
    args.insert(args.end(), foreign.begin(), foreign.end());
  }
  return args;
}

// sbx run's own warnings (an unconfined seccomp policy, a limit it cannot enforce here) belong
// to the probe's caller too; its other lines are the program's, i.e. the helper's.
void relay_run_warnings(const std::string& err) {
  for (std::size_t at = 0; at < err.size();) {
    std::size_t nl = err.find('\n', at);
    std::string line = err.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    // (Not the export's notes on the helper's own hostile /out entries, nor the run's summary of
    // what the sandbox was refused: the helper's attempts are the probe, reported line by line.)
    if (line.starts_with("sbx: warning: ") && !line.starts_with("sbx: warning: export: skipped /out/probe-") &&
        !is_violations_line(line.substr(14)))
      std::fprintf(stderr, "%s\n", printable(line).c_str());
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
}

std::string status_of(json& record) {
  return record.is_object() && record["result"].is_object() && record["result"]["status"].is_string()
             ? record["result"]["status"].get<std::string>()
             : "";
}

// 4. After the run, on the host: every check of probe_host.hpp.
void host_checks(std::vector<ProbeResult>& results, const ProbeOutput& po, const json& record, const HostSide& h,
                 const SecretValues& secrets, const Dirs& dirs, const std::map<std::string, int>& mounts_before,
                 const std::set<pid_t>& pids_before, std::time_t started, const std::string& status, const json& plan) {
  degraded_limits(results, record);
  survivor_check(results, h.token);
  export_check(results, h.exported);
  cleanup_checks(results, po, record, mounts_before, pids_before, h.run_tmp, h.token,
                 run_mount_roots(plan, {h.dir.path, h.run_tmp, dirs.state}));
  if (!secrets.empty()) secret_file_check(results, po, secrets);
  SecretValues all = secrets;
  all.push_back({"SBX_PROBE_CANARY", h.canary});
  secret_after_check(results, all, pids_before, mounts_before, {h.run_tmp, "/dev/shm", dirs.state}, started);
  if (!record.is_object()) {
    results.push_back({"record.written", "breached", "no trace record was written"});
  } else {
    // The record as written and the ledger's newest lines (the same record, chained and maybe
    // signed): neither may hold a value, raw or JSON-escaped.
    secret_record_check(results, record_and_ledger_text(h.trace, record, dirs.traces + "/ledger.jsonl"), all);
    record_names_check(results, record, h.token, status);
  }
  if (po.bad_lines)
    results.push_back({"probe.output", "skipped",
                       std::to_string(po.bad_lines) + " lines of the sandbox's output were not probe results"});
}

int print_report(const std::vector<ProbeResult>& results, bool as_json, int run_status, const std::string& status) {
  if (as_json) {
    json j = probe_json(results);
    j["run"] = {{"exit", run_status}, {"status", status}};
    std::printf("%s\n", dump_json(j, 2, {}, true).c_str());
  } else {
    std::fputs(probe_table(results).c_str(), stdout);
  }
  return probe_exit_status(results);
}

int probe_main(const GlobalOptions& g, const RunFlags& f, bool as_json) {
  if (g.after_dashdash) return usage_error("probe: takes run options only, no command (it runs its own probes)");
  if (auto what = refused(f))
    return usage_error("probe: " + *what + " is not taken by probe (its output is the report)");
  const std::vector<std::string> base = run_words(g);
  if (base.empty()) return usage_error("probe: cannot find the word 'probe' in the command line");
  int rc = 0;
  json spec = dry_run_plan(base, rc);
  if (rc) return rc;
  HostSide h;
  if (auto bad = prepare_host_side(h)) return *bad;
  SecretValues secrets;
  if (auto bad = read_secrets(f, secrets)) return *bad;
  const Dirs dirs = resolve_dirs(g.state_dir);
  const std::map<std::string, int> mounts_before = mount_table();
  const std::set<pid_t> pids_before = host_pids();
  const std::time_t started = std::time(nullptr) - 1;
  // Rootless in a delegated cgroup, the probe must not keep <own> busy for its run (cgroup.hpp).
  enter_supervisor_leaf(detect_cgroup());

  Captured run = run_self(probe_run_words(base, h, spec, secrets, f, dirs),
                          {{"SBX_PROBE_CANARY", h.canary}, {"TMPDIR", h.run_tmp}}, std::chrono::seconds(600), true);
  ::close(h.listen_fd);
  relay_run_warnings(run.err);
  ProbeOutput po = parse_probe_output(run.out);
  json record;
  if (auto t = read_json_file(h.trace, {64u << 20}, "probe", "trace")) record = std::move(*t);
  const std::string status = status_of(record);
  if (!po.reached_memory) {
    std::string why = run.err.substr(0, run.err.find('\n'));
    return usage_error("probe: the probes did not run (sbx run exited " + std::to_string(run.status) +
                       (status.empty() ? "" : ", status " + status) + (why.empty() ? "" : ": " + printable(why)) + ")");
  }
  std::vector<ProbeResult> results = po.results;
  if (!po.finished) {
    // The memory probe is last: a kernel that ends the whole run at the limit (cgroup v2 with
    // memory.oom.group) ends it there, and the record says so.
    if (status == "oom")
      results.push_back({"limit.memory", "held", "the run was ended at its memory limit (status oom)"});
    else
      results.push_back(
          {"limit.memory", "breached", "the run ended during the memory probe (status " + printable(status) + ")"});
  }
  host_checks(results, po, record, h, secrets, dirs, mounts_before, pids_before, started, status, spec);
  return print_report(results, as_json, run.status, status);
}

}  // namespace

void add_probe_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  static RunFlags f;
  static bool as_json = false;
  auto* cmd =
      app.add_subcommand("probe",
                         "Test the boundaries of a run configuration: the run options of sbx run, probed from inside; "
                         "exit 0 all held, 1 one breached, 125 could not run");
  add_run_options(cmd, f);
  cmd->add_flag("--json", as_json, "Print the results as JSON");
  cmd->fallthrough(false);
  add_global_options(*cmd, g);
  out.push_back({cmd, [&g]() -> int { return probe_main(g, f, as_json); }});
}

}  // namespace sbx::cli
