#pragma once
// The program's environment: cleared, then PATH, HOME, TERM and LANG set sensibly, then the
// variables passed through from the caller (--env-pass), then explicit ones (--env, profile).
#include <string>
#include <vector>

#include "runtime/model/spec.hpp"

namespace sbx {

inline constexpr const char* kSandboxPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// `caller_env` is the caller's environment (environ); `stdout_is_tty` picks TERM's default.
std::vector<std::string> build_environment(const RunSpec& spec, char** caller_env, bool stdout_is_tty);

}  // namespace sbx
