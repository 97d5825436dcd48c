#include "cli/systemd_scope.hpp"

#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "runtime/cgroup.hpp"
#include "runtime/limits_plan.hpp"
#include "runtime/signals.hpp"

namespace sbx::cli {

std::vector<std::string> systemd_scope_argv(const std::string& self_exe, const std::vector<std::string>& argv) {
  // --scope runs the command in this process (stdio, signals and exit status stay ours);
  // Delegate=yes hands the scope's cgroup to the user, so sbx can create run cgroups below it.
  std::vector<std::string> out = {"systemd-run", "--user", "--scope", "-p", "Delegate=yes", "--quiet", "--collect", "--",
                                  self_exe};
  bool after_dashdash = false;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    if (!after_dashdash && argv[i] == "--systemd-scope") continue;
    if (argv[i] == "--") after_dashdash = true;
    out.push_back(argv[i]);
  }
  return out;
}

std::optional<int> reexec_in_systemd_scope(const std::vector<std::string>& argv, const RunSpec& spec) {
  if (::geteuid() == 0) {
    spdlog::info("--systemd-scope: not needed as root");
    return std::nullopt;
  }
  if (const char* in = std::getenv(kInScopeEnv); in && *in) return std::nullopt;  // we are the re-exec
  if (plan_limits(spec.limits, detect_cgroup(), true, true).use_cgroup) {
    spdlog::info("--systemd-scope: a delegated cgroup v2 is already usable here");
    return std::nullopt;
  }
  // systemd-run itself exits 1 when it cannot reach the user's systemd, which a caller could not
  // tell from the program's own exit 1: check for the user bus first and fail as sbx (125).
  const char* rt = std::getenv("XDG_RUNTIME_DIR");
  const char* bus = std::getenv("DBUS_SESSION_BUS_ADDRESS");
  std::string bus_path = rt && *rt ? std::string(rt) + "/bus" : "";
  if (!(bus && *bus) && (bus_path.empty() || ::access(bus_path.c_str(), F_OK) != 0))
    return usage_error("--systemd-scope: no systemd user session to delegate a cgroup (no $XDG_RUNTIME_DIR/bus or "
                       "$DBUS_SESSION_BUS_ADDRESS); log in through systemd, or drop --systemd-scope");
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return usage_error(std::string("--systemd-scope: cannot find sbx's own binary: ") + std::strerror(errno));
  auto args = systemd_scope_argv(std::string(exe, static_cast<std::size_t>(n)), argv);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  ::setenv(kInScopeEnv, "1", 1);
  spdlog::info("--systemd-scope: re-executing under systemd-run --user --scope -p Delegate=yes");
  int err;
  {
    // systemd-run gets the mask sbx was started with; the re-executed sbx blocks again (main).
    CallerSignalMaskScope callers_mask;
    ::execvp("systemd-run", cargs.data());
    err = errno;
  }
  ::unsetenv(kInScopeEnv);
  return usage_error(std::string("--systemd-scope: cannot run systemd-run: ") + std::strerror(err) +
                     (err == ENOENT ? " (install systemd, or drop --systemd-scope)" : ""));
}

}  // namespace sbx::cli
