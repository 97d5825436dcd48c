// sbx doctor [--json]: what sbx needs on this host, what is missing, and how to fix it.
// Exit 0 when sbx can run here (every required check ok), 1 otherwise. The probes live in
// runtime/hostcheck; this file only prints.
#include <algorithm>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>

#include <cstdio>
#include <cstdlib>

#include "cli/commands.hpp"
#include "runtime/linux/cgroup_ns.hpp"
#include "runtime/linux/host_blockers.hpp"
#include "runtime/linux/hostcheck.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"

namespace sbx::cli {
namespace {

// The "cgroupns" row, right after "cgroup": inside a container whose cgroup namespace root holds
// its processes, the exact fix (runtime/linux/cgroup_ns.hpp).
void add_cgroup_namespace_check(std::vector<CheckResult>& checks) {
  auto row = assess_cgroup_namespace(probe_cgroup_ns_root(detect_cgroup()));
  auto at = std::find_if(checks.begin(), checks.end(), [](const CheckResult& c) { return c.name == "cgroup"; });
  checks.insert(at == checks.end() ? at : at + 1, std::move(row));
}

}  // namespace

namespace {

// The host settings that commonly block or weaken sbx (runtime/linux/host_blockers.hpp), read from this
// host, judged with what the userns probe found.
void append_blocker_checks(std::vector<CheckResult>& checks) {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string self = n > 0 ? std::string(exe, static_cast<std::size_t>(n)) : "";
  const char* rt = std::getenv("XDG_RUNTIME_DIR");
  std::string runtime_dir = rt && *rt ? rt : "/run/user/" + std::to_string(::geteuid());
  BlockerFacts f = read_blocker_facts("", ::geteuid(), self, runtime_dir);
  for (auto& c : checks)
    if (c.name == "userns") f.userns_probe_ok = c.status == CheckStatus::ok;
  CgroupInfo cg = detect_cgroup();
  f.cgroup_layout = cg.layout;
  for (auto& c : checks)
    if (c.name == "cgroup") f.cgroup_usable = c.status == CheckStatus::ok;
  for (auto& c : assess_blockers(f)) checks.push_back(std::move(c));
}

void append_sandbox_check(std::vector<CheckResult>& checks) { checks.push_back(throwaway_sandbox_check("", "")); }

}  // namespace

// The "sandbox" row: what every run does, done once. sbx re-runs itself as `sbx run -- /bin/true`
// (the same parsing, profile and setup as the caller's runs), bounded in time so that doctor never
// hangs. Doctor's runs in a private state dir removed after (nothing lands in the caller's ledger);
// `sbx mcp --listen`'s readiness check (mcp_cmd.cpp) in the server's own, whose images its profile
// may name: that run is recorded there like any other.
CheckResult throwaway_sandbox_check(const std::string& profile, const std::string& state_dir) {
  std::string dir = state_dir;
  if (dir.empty()) {
    // As root, /tmp whatever TMPDIR says: the dir is removed afterwards by path (remove_tree), and
    // in a TMPDIR another user can write, its entries could be swapped for links meanwhile.
    const char* tmpdir = ::geteuid() == 0 ? nullptr : std::getenv("TMPDIR");
    dir = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/sbx-doctor-XXXXXX";
    if (!::mkdtemp(dir.data()))
      return {"sandbox", CheckStatus::missing, true, "cannot make a temporary state dir: " + dir,
              "set TMPDIR to a writable directory"};
  }
  constexpr auto limit = std::chrono::seconds(15);
  auto started = std::chrono::steady_clock::now();
  std::vector<std::string> args = {"sbx", "--state-dir", dir, "run", "--timeout", "10s"};
  if (!profile.empty()) args.insert(args.end(), {"--profile", profile});
  args.insert(args.end(), {"--", "/bin/true"});
  Captured c = run_self(args, {}, limit, false);
  bool killed = c.status == 128 + SIGKILL && std::chrono::steady_clock::now() - started >= limit;
  if (state_dir.empty()) (void)remove_tree(dir);
  return assess_sandbox_run(c.status, c.err, killed);
}

void add_doctor_command(CLI::App& app, GlobalOptions&, std::vector<Command>& out) {
  auto* doctor = app.add_subcommand("doctor", "Check what sbx needs on this host, with a fix for each missing piece");
  static bool json = false;
  doctor->add_flag("--json", json, "Print a JSON object {ok, checks: [{name, status, required, detail, hint}]}");
  out.push_back({doctor, [] {
                   auto checks = run_host_checks();
                   add_cgroup_namespace_check(checks);
                   append_blocker_checks(checks);
                   append_sandbox_check(checks);
                   nlohmann::json doc = json ? checks_to_json(checks) : nlohmann::json();
                   // Host paths and messages may be any bytes: dump_json escapes them (json_io.hpp).
                   std::string text = json ? dump_json(doc, 2) + "\n" : render_table(checks);
                   std::fwrite(text.data(), 1, text.size(), stdout);
                   std::fflush(stdout);
                   return host_can_run(checks) ? 0 : 1;
                 }});
}

}  // namespace sbx::cli
