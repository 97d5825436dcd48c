#pragma once
// The running kernel's version, for features that depend on it (seccomp rules' minKernel,
// overlay on an idmapped layer: runtime/linux/mounts.cpp make_idmapped_image).
#include <string>

namespace sbx {

// Whether the running kernel is at least "MAJOR.MINOR" (`want`). True when uname fails, which it
// cannot on Linux: a feature is then tried, and its own error says what went wrong.
bool kernel_at_least(const std::string& want);

}  // namespace sbx
