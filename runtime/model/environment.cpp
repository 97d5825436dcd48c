#include "runtime/model/environment.hpp"

#include <algorithm>
#include <cstring>
#include <map>

#include "runtime/egress/egress_policy.hpp"

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
  // The filtering proxy (proxy.hpp) listens on the sandbox's own loopback. Both spellings are set
  // because tools disagree on which they read (curl ignores upper-case HTTP_PROXY). NO_PROXY keeps
  // the sandbox's own loopback direct, except the spellings an allow rule sends to the host's
  // loopback (egress_policy.hpp's loopback_reached): a client that skipped the proxy for those
  // would get ECONNREFUSED from the sandbox's empty loopback. --env overrides any of them.
  if (spec.network.mode == "proxy") {
    std::string url = "http://127.0.0.1:" + std::to_string(kProxyPort);
    for (const char* k : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}) env[k] = url;
    std::vector<std::string> through_proxy;
    if (auto rules = parse_allow_rules(spec.network.allow)) through_proxy = loopback_reached(*rules);
    std::string direct;
    for (const char* h : {"localhost", "127.0.0.1", "::1"})
      if (std::find(through_proxy.begin(), through_proxy.end(), h) == through_proxy.end())
        direct += (direct.empty() ? "" : ",") + std::string(h);
    for (const char* k : {"NO_PROXY", "no_proxy"}) env[k] = direct;
  }
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
