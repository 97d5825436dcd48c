#pragma once
// Capabilities, dropped by prctl and capset directly (caps.cpp says why not through libcap-ng).
// The program runs with empty effective, permitted, inheritable and ambient sets and an empty
// bounding set, with securebits locked so that becoming uid 0 (or executing a
// setuid/file-capability binary) grants nothing back.
#include <string>
#include <vector>

#include "runtime/error.hpp"

namespace sbx {

// Child side, step 1 (needs CAP_SETPCAP): lock securebits. SECBIT_NO_SETUID_FIXUP keeps the
// capabilities across the identity switch that follows, so drop_all_capabilities() can still
// clear the bounding set afterwards.
Status lock_securebits();

// Child side, step 2: clear every capability set (bounding and ambient included).
Status drop_all_capabilities();

// The names kept (always empty for now; profiles may grant some later).
std::vector<std::string> kept_capabilities();

}  // namespace sbx
