// sbx probe [RUN OPTIONS] [--json]: run the boundary probes (probe/sbx_probe.c) in a sandbox
// configured exactly as `sbx run RUN OPTIONS` would configure it, and report each boundary held
// or breached.
//
// "Exactly as run would": the probe run IS `sbx run` — this command re-executes sbx with the
// caller's own words, "probe" replaced by "run", so option parsing, profile layering, image
// defaults, planning and enforcement are run.cpp's and the runtime's, not a copy. It adds only
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
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "cli/commands.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/record/probe_report.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/linux/userns.hpp"

// The helper's bytes, placed in sbx's read-only data by cli/probe_blob.cpp.
extern "C" const unsigned char sbx_probe_helper_begin[];
extern "C" const unsigned char sbx_probe_helper_end[];

namespace sbx::cli {
namespace {
using nlohmann::json;
namespace fs = std::filesystem;

struct Captured {
  int status = -1;  // exit status of `sbx run`
  std::string out, err;
};

// Runs sbx itself with `args`, capturing stdout and stderr (bounded), killing it after `limit`.
// `env_extra` is set in the child only.
Captured run_self(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env_extra,
                  std::chrono::seconds limit, bool pass_own_pid) {
  Captured c;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return c;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return c;
  }
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
    ::_exit(127);
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
    if (::poll(p, 2, killed ? 2000 : static_cast<int>(std::min<long long>(left.count(), 1000))) < 0 && errno != EINTR) break;
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

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  if (::getrandom(raw.data(), bytes, 0) != static_cast<ssize_t>(bytes)) return {};
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char c : raw) {
    s += hex[c >> 4];
    s += hex[c & 15];
  }
  return s;
}

// Host pids whose command line holds `needle` (the termination probe's survivor).
std::vector<pid_t> pids_with(const std::string& needle) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    auto text = read_bounded("/proc/" + std::string(e->d_name) + "/cmdline", 1 << 16, "probe", "cmdline");
    if (text && text->find(needle) != std::string::npos) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

std::size_t mounts_mentioning(const std::string& path) {
  auto text = read_bounded("/proc/self/mountinfo", 16u << 20, "probe", "mountinfo");
  if (!text) return 0;
  std::size_t n = 0;
  for (std::size_t at = 0; (at = text->find(path, at)) != std::string::npos; at += path.size()) ++n;
  return n;
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

// --tenant NAME: LABEL PATH pairs for the helper, one per resource of every other tenant that a
// sandbox of NAME must not reach: its store directory and ledger, and (as root, where tenants'
// ids differ) the files in this run's bind sources owned by its host id slice. Host paths are
// mapped through the run's binds to where they would appear inside; a path no bind covers is
// probed as it is (absent, unless the root itself holds it).
std::vector<std::string> foreign_probes(const std::string& tenant, const GlobalOptions& g, const json& plan) {
  std::vector<std::string> out;
  auto t = load_tenant(tenant);
  if (!t) return out;  // the dry run accepted it; a file changed since is the run's to refuse
  std::vector<std::pair<std::string, std::string>> binds;  // src, dst
  if (plan.contains("binds") && plan["binds"].is_array())
    for (auto& b : plan["binds"])
      if (b.is_object() && b["src"].is_string() && b["dst"].is_string())
        binds.emplace_back(b["src"].get<std::string>(), b["dst"].get<std::string>());
  // Compared as real paths: a bind given as "/", with a trailing slash or through a symlink must
  // still map the other tenant's store to where the sandbox sees it, or the probe would look at a
  // path that does not exist inside and call the store unreachable.
  auto real = [](const std::string& p) {
    char buf[PATH_MAX];
    return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
  };
  auto inside = [&](const std::string& host_path) {
    const std::string host = real(host_path);
    for (auto& [src_path, dst] : binds) {
      const std::string src = real(src_path);
      if (src == "/") return (dst == "/" ? std::string() : dst) + host;
      if (host == src || host.starts_with(src + "/")) return dst + host.substr(src.size());
    }
    return host;
  };
  for (auto& o : other_tenants(*t, resolve_dirs(g.state_dir))) {
    // probe names are [a-z0-9_.] (probe_report.cpp): the tenant's name folded to fit.
    std::string label;
    for (char c : o.name.substr(0, 40))
      label += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : (c == '-' ? '_' : c);
    out.insert(out.end(), {label + ".store", inside(o.store)});
    out.insert(out.end(), {label + ".ledger", inside(o.store + "/traces/ledger.jsonl")});
    if (::geteuid() != 0) continue;
    static const RunSpec kDefaults;
    auto plan_o = plan_identity(kDefaults, o.id_slot);
    if (!plan_o) continue;
    const std::uint64_t lo = plan_o->uid_map.at(0).outside, hi = lo + plan_o->uid_map.at(0).count;
    int files = 0;
    for (auto& [src, dst] : binds) {
      DIR* d = ::opendir(src.c_str());
      if (!d) continue;
      int seen = 0;
      while (dirent* e = ::readdir(d)) {
        if (++seen > 4096 || files >= 8) break;
        struct stat st {};
        std::string name = e->d_name;
        if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        if (st.st_uid < lo || st.st_uid >= hi) continue;
        out.insert(out.end(), {label + ".file" + std::to_string(++files), dst + "/" + name});
      }
      ::closedir(d);
    }
  }
  return out;
}

int probe_main(const GlobalOptions& g, const RunFlags& f, bool as_json) {
  if (g.after_dashdash) return usage_error("probe: takes run options only, no command (it runs its own probes)");
  if (auto what = refused(f)) return usage_error("probe: " + *what + " is not taken by probe (its output is the report)");
  // The caller's words, "probe" -> "run", without probe's own --json.
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
  if (!seen) return usage_error("probe: cannot find the word 'probe' in the command line");

  // 1. The plan: the limits the helper measures against, from run's own --dry-run.
  std::vector<std::string> dry = base;
  for (const char* w : {"--dry-run", "--", "/sbx-probe"}) dry.push_back(w);
  Captured plan = run_self(dry, {}, std::chrono::seconds(60), false);
  if (plan.status != 0) {
    std::string line = plan.err.substr(0, plan.err.find('\n'));
    if (line.starts_with("sbx: ")) line = line.substr(5);
    return usage_error("probe: the run options do not make a run: " + line);
  }
  auto spec = parse_json_doc(plan.out, {4u << 20}, "probe", "sbx run --dry-run");
  if (!spec || !spec->is_object() || !(*spec)["limits"].is_object())
    return usage_error("probe: sbx run --dry-run printed no plan");
  auto limit = [&](const char* k) -> long long {
    const json& v = (*spec)["limits"][k];
    return v.is_number_integer() ? v.get<long long>() : 0;
  };

  // 2. The host side of the probes: a private directory with the helper and a marker file, a
  //    loopback listener, a canary secret and a token that names every process of this probe.
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/sbx-probe-XXXXXX";
  TempDir dir;
  if (char* made = ::mkdtemp(tmpl.data())) dir.path = made;
  else return usage_error("probe: cannot make a directory in " + tmpl + ": " + std::strerror(errno));
  ::chmod(dir.path.c_str(), 0755);  // traversable by the sandbox's mapped user (root mode)
  const std::string helper = dir.path + "/sbx-probe", marker = dir.path + "/host-marker";
  {
    int fd = ::open(helper.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
    std::size_t size = static_cast<std::size_t>(sbx_probe_helper_end - sbx_probe_helper_begin);
    bool ok = fd >= 0 && ::write(fd, sbx_probe_helper_begin, size) == static_cast<ssize_t>(size);
    if (fd >= 0) ::close(fd);
    int mfd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    ok = ok && mfd >= 0 && ::write(mfd, "sbx probe host marker\n", 22) == 22;
    if (mfd >= 0) ::close(mfd);
    if (!ok || size == 0) return usage_error("probe: cannot write the probe helper to " + dir.path);
  }
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t sl = sizeof sa;
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(lfd, 4) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &sl) != 0)
    return usage_error(std::string("probe: cannot listen on the host's loopback: ") + std::strerror(errno));
  const std::string token = "sbxprobe" + random_hex(8), canary = random_hex(24);
  if (token.size() < 10 || canary.empty()) return usage_error("probe: getrandom failed");
  const std::string trace = dir.path + "/trace.json";
  std::size_t mounts_before = mounts_mentioning(dir.path);

  // 3. The probe run.
  std::vector<std::string> args = base;
  const std::string exported = dir.path + "/out";
  const std::vector<std::string> extra = {"--bind", helper + ":/sbx-probe", "--env-pass", "SBX_PROBE_CANARY",
                                         "--trace-file", trace, "--output", exported, "--", "/sbx-probe", token, marker,
                                         std::to_string(ntohs(sa.sin_port)), "@HOSTPID@", std::to_string(limit("pids")),
                                         std::to_string(limit("memory_bytes"))};
  args.insert(args.end(), extra.begin(), extra.end());
  if (f.tenant) {
    auto foreign = foreign_probes(*f.tenant, g, *spec);
    args.insert(args.end(), foreign.begin(), foreign.end());
  }
  Captured run = run_self(args, {{"SBX_PROBE_CANARY", canary}}, std::chrono::seconds(600), true);
  ::close(lfd);
  // sbx run's own warnings (an unconfined seccomp policy, a limit it cannot enforce here) belong
  // to the probe's caller too; its other lines are the program's, i.e. the helper's.
  for (std::size_t at = 0; at < run.err.size();) {
    std::size_t nl = run.err.find('\n', at);
    std::string line = run.err.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    // (Not the export's notes on the helper's own hostile /out entries: those are the probe.)
    if (line.starts_with("sbx: warning: ") && !line.starts_with("sbx: warning: export: skipped /out/probe-"))
      std::fprintf(stderr, "%s\n", printable(line).c_str());
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  ProbeOutput po = parse_probe_output(run.out);
  json record;
  if (auto t = read_json_file(trace, {64u << 20}, "probe", "trace")) record = std::move(*t);
  const std::string status = record.is_object() && record["result"].is_object() && record["result"]["status"].is_string()
                                 ? record["result"]["status"].get<std::string>()
                                 : "";
  if (!po.reached_memory) {
    std::string why = run.err.substr(0, run.err.find('\n'));
    return usage_error("probe: the probes did not run (sbx run exited " + std::to_string(run.status) +
                       (status.empty() ? "" : ", status " + status) + (why.empty() ? "" : ": " + printable(why)) + ")");
  }
  std::vector<ProbeResult> results = po.results;
  if (!po.finished) {
    // The memory probe is last: a kernel that ends the whole run at the limit (cgroup v2 with
    // memory.oom.group) ends it there, and the record says so.
    if (status == "oom") results.push_back({"limit.memory", "held", "the run was ended at its memory limit (status oom)"});
    else results.push_back({"limit.memory", "breached", "the run ended during the memory probe (status " + printable(status) + ")"});
  }

  // 4. After the run, on the host.
  // The survivor: double-forked, in its own session, ignoring SIGTERM/SIGHUP/SIGINT. sbx ends a
  // run by ending its pid namespace, so it must be gone by the time `sbx run` has returned; a
  // short grace covers the kernel's reaping of the namespace's last processes.
  std::vector<pid_t> left;
  const std::string survivor = std::string("sbx-probe-survivor") + '\0' + "survive" + '\0' + token;
  for (int i = 0; i < 40; ++i) {
    left = pids_with(survivor);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::erase_if(results, [](auto& r) { return r.name == "term.survivor_started"; });
  if (left.empty()) {
    results.push_back({"term.survivor", "held", "the double-forked, signal-ignoring survivor is gone after the run"});
  } else {
    std::string list;
    for (pid_t p : left) {
      list += (list.empty() ? "" : " ") + std::to_string(p);
      ::kill(p, SIGKILL);  // ours: started by this probe (the token names it)
    }
    results.push_back({"term.survivor", "breached", "still running on the host after the run: pid " + list + " (killed now)"});
  }
  // Artifact export: what --output made of the helper's hostile /out on the host.
  if (std::any_of(results.begin(), results.end(), [](auto& r) {
        return r.name == "export.prepared" && r.evidence.starts_with("/out holds");
      })) {
    struct stat file {}, hard {}, st {};
    bool have_file = ::lstat((exported + "/probe-file").c_str(), &file) == 0 && S_ISREG(file.st_mode);
    std::vector<std::string> bad;
    if (::lstat((exported + "/probe-link").c_str(), &st) == 0 && S_ISLNK(st.st_mode)) bad.push_back("a symlink was exported");
    if (::lstat((exported + "/probe-fifo").c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
      bad.push_back("a FIFO was exported");
    bool have_hard = ::lstat((exported + "/probe-hard").c_str(), &hard) == 0;
    if (have_hard && (!S_ISREG(hard.st_mode) || hard.st_nlink != 1 || (have_file && hard.st_ino == file.st_ino)))
      bad.push_back("the hard link was exported as a link, not a copy");
    if (!have_file) bad.push_back("the regular file was not exported");
    std::string b;
    for (auto& x : bad) b += (b.empty() ? "" : "; ") + x;
    if (bad.empty())
      results.push_back({"export.entries", "held", "--output exported the regular file; the symlink and the FIFO were "
                                                    "skipped; the hard link " +
                                                        std::string(have_hard ? "became an independent copy" : "was skipped")});
    else
      results.push_back({"export.entries", "breached", b});
  }
  std::erase_if(results, [](auto& r) { return r.name == "export.prepared"; });
  std::size_t mounts_after = mounts_mentioning(dir.path);
  if (mounts_after > mounts_before)
    results.push_back({"cleanup.mounts", "breached",
                       std::to_string(mounts_after - mounts_before) + " mounts of the probe's files left in sbx's mount namespace"});
  else
    results.push_back({"cleanup.mounts", "held", "no mount of the probe's files left on the host"});

  if (!record.is_object()) {
    results.push_back({"record.written", "breached", "no trace record was written"});
  } else {
    std::string text = dump_json(record, -1);
    if (text.find(canary) != std::string::npos)
      results.push_back({"secret.record", "breached", "the canary's value is in the trace record"});
    else
      results.push_back({"secret.record", "held", "the record names SBX_PROBE_CANARY, never its value"});
    const json& inv = record["invocation"];
    std::vector<std::string> missing;
    if (!record["image"].is_object() || !record["image"].contains("name")) missing.push_back("image");
    if (!inv.is_object() || !inv["profile"].is_object() || !inv["profile"]["sha256"].is_string()) missing.push_back("profile");
    if (!inv.is_object() || !inv["spec"].is_object() || !inv["spec"]["argv"].is_array() || inv["spec"]["argv"].size() < 2 ||
        inv["spec"]["argv"][0] != "/sbx-probe" || inv["spec"]["argv"][1] != token)
      missing.push_back("command");
    const json& enf = record["enforcement"];
    if (!enf.is_object() || !enf["seccomp"].is_object()) missing.push_back("seccomp policy");
    if (!enf.is_object() || !enf["identity"].is_object()) missing.push_back("identity");
    if (missing.empty())
      results.push_back({"record.names", "held",
                         "image " + printable(record["image"]["name"].is_string() ? record["image"]["name"].get<std::string>() : "?") +
                             ", profile " + printable(inv["profile"]["name"].is_string() ? inv["profile"]["name"].get<std::string>() : "?") +
                             ", command, seccomp policy and identity are named; status " + printable(status)});
    else {
      std::string m;
      for (auto& x : missing) m += (m.empty() ? "" : ", ") + x;
      results.push_back({"record.names", "breached", "the record does not name: " + m});
    }
  }
  if (po.bad_lines)
    results.push_back({"probe.output", "skipped", std::to_string(po.bad_lines) + " lines of the sandbox's output were not probe results"});

  if (as_json) {
    json j = probe_json(results);
    j["run"] = {{"exit", run.status}, {"status", status}};
    std::printf("%s\n", dump_json(j, 2, {}, true).c_str());
  } else {
    std::fputs(probe_table(results).c_str(), stdout);
  }
  return probe_exit_status(results);
}

}  // namespace

void add_probe_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  static RunFlags f;
  static bool as_json = false;
  auto* cmd = app.add_subcommand(
      "probe", "Test the boundaries of a run configuration: the run options of sbx run, probed from inside; "
               "exit 0 all held, 1 one breached, 125 could not run");
  add_run_options(cmd, f);
  cmd->add_flag("--json", as_json, "Print the results as JSON");
  cmd->fallthrough(false);
  add_global_options(*cmd, g);
  out.push_back({cmd, [&g]() -> int { return probe_main(g, f, as_json); }});
}

}  // namespace sbx::cli
