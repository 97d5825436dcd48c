#include "runtime/environment.hpp"

#include <cstring>
#include <map>

namespace sbx {

std::vector<std::string> build_environment(const RunSpec& spec, char** caller_env, bool stdout_is_tty) {
  std::map<std::string, std::string> caller;
  for (char** e = caller_env; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) caller.emplace(std::string(*e, static_cast<std::size_t>(eq - *e)), eq + 1);
  }
  std::map<std::string, std::string> env;
  env["PATH"] = kSandboxPath;
  env["HOME"] = "/tmp";
  env["LANG"] = "C.UTF-8";
  // A terminal type only makes sense when something terminal-like is at the other end.
  auto term = caller.find("TERM");
  env["TERM"] = stdout_is_tty && term != caller.end() ? term->second : "dumb";
  for (auto& name : spec.env_pass) {
    auto it = caller.find(name);
    if (it != caller.end()) env[name] = it->second;
  }
  for (auto& [k, v] : spec.env) env[k] = v;
  std::vector<std::string> out;
  for (auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace sbx
