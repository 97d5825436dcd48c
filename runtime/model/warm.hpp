#pragma once
// The profile key `warm` (issue 34): what a warm pool (`sbx mcp --pool N`, runtime/server/mcp_pool.hpp)
// prepares in each sandbox before its call arrives. `{"interpreter": "python3"|"node"|"sh"|"bash",
// "preload": [MODULE, ...], "mode": "pool"|"template"}`.
//
// With an interpreter that has a driver (python3, node), each pooled sandbox starts that
// interpreter as its program right after it is built, under the sandbox's identity, limits and
// seccomp filter, and imports the preload list (its output discarded); the interpreter then
// waits on its stdin, a socket to init, for the call (runtime/launch/warm_start.hpp). The call's
// code runs in it as a fresh main module (`__main__`, node's require.main) — one call per
// interpreter, destroyed with its sandbox. The shells have no driver: they start in about a
// millisecond and have nothing to import, so a shell's warm sandbox is the pool's (built ahead,
// the shell exec'd at the call) and `preload` must be empty.
//
// With "mode": "template" (python3 only), the interpreter and its preloads are started once, in a
// template sandbox, and each call runs in a copy-on-write fork of it in namespaces of its own
// (runtime/server/mcp_template.hpp).
//
// A warm pool serves run_code calls of its interpreter's language (WarmInterpreter::language);
// another language's call runs cold, its record saying why (mcp_worker.cpp).
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"

namespace sbx {

struct WarmSpec {
  std::string interpreter;           // "" when the profile prepares nothing
  std::vector<std::string> preload;  // module names, imported in order
  std::string mode = "pool";         // "pool" or "template" (forked copy-on-write: mcp_template.hpp)
  bool operator==(const WarmSpec&) const = default;
};

struct WarmInterpreter {
  const char* name;      // the profile's spelling: "python3"
  const char* path;      // its path in the sandbox's root: "/usr/bin/python3"
  const char* language;  // the exec request's language it serves (typed/exec.hpp): "python"
  bool has_driver;       // false: nothing to prepare beyond the sandbox (the shells)
};
const std::vector<WarmInterpreter>& warm_interpreters();
const WarmInterpreter* find_warm_interpreter(std::string_view name);

// The seccomp policy of a template's own sandbox (linux/seccomp_policy.hpp,
// template_seccomp_policy_text): sbx's name for it, which no spec may name (spec.cpp).
inline constexpr const char* kTemplateSeccomp = "default+template";

// At most this many preloads, each at most kMaxPreloadNameBytes: they travel as argv.
inline constexpr std::size_t kMaxPreloads = 64;
inline constexpr std::size_t kMaxPreloadNameBytes = 128;

// "" when `spec` may be used; else what is wrong, for the error at warm.<key>.
// Checks the interpreter's name, the mode, and each module's name (python3: dotted identifiers;
// node: a package name or a node: builtin, no paths).
struct WarmProblem {
  std::string key;  // "interpreter", "preload/2", "mode"
  std::string message;
};
std::vector<WarmProblem> check_warm(const WarmSpec& spec);

// How a prepared Python interpreter runs its call (runtime/model/python_main.py, compiled in): the
// text both Python drivers start with.
std::string_view python_main_text();
std::string_view python_main_sha256();
// A warm template's driver (python_main.py, then runtime/model/warm_template.py, compiled in) and
// its SHA-256.
std::string_view template_driver_text();
std::string_view template_driver_sha256();
// The template's argv: the interpreter running the driver, then the preload list. Only python3
// has a template driver (check_warm refuses "template" for the others).
std::vector<std::string> template_driver_argv(const WarmSpec& spec);

// A template's digest (runtime/server/mcp_template.hpp): what a call forked from it inherits (the
// profile, resolved; the image; the interpreter and preload list; the driver; sbx's version and
// binary). A call whose digest made now differs runs cold (mcp_worker.cpp).
std::string template_digest(const std::string& profile_sha256, const std::string& image, const WarmSpec& warm,
                            const std::string& binary_sha256);

// The prepared interpreter's argv (its driver, then the preload list); empty when `spec` has no
// interpreter or one without a driver.
std::vector<std::string> warm_driver_argv(const WarmSpec& spec);

}  // namespace sbx
