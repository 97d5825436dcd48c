#pragma once
// Capabilities. The program keeps exactly the named set of its spec (`capabilities.keep`, empty
// unless a profile grants some: profiles/trusted.json) and nothing else, whatever its uid inside:
// bounding, inheritable, permitted, effective and ambient sets all equal that set, and securebits
// are locked so that becoming uid 0 (or executing a setuid/file-capability binary) grants nothing
// more. The child side uses prctl and capset directly (caps.cpp says why not libcap-ng there);
// names, the supervisor's reading of the program's sets and `sbx doctor` use libcap-ng.
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/base/error.hpp"

namespace sbx {

// A set of capabilities as the kernel numbers them: bit N is capability N.
using CapMask = std::uint64_t;

// "CAP_CHOWN", "cap_chown" and "chown" (any case) are one capability; the canonical spelling is
// "CAP_CHOWN". Unknown names (libcap-ng's table) are std::nullopt.
std::optional<int> capability_number(const std::string& name);
std::string capability_name(int cap);  // canonical, "CAP_CHOWN"; "CAP_<n>" past the table

// The canonical name of one written name, or an error: "'CAP_CHWON' is not a capability (did you
// mean 'CAP_CHOWN'?)".
Result<std::string> canonical_capability(const std::string& name);
CapMask capability_mask(const std::vector<std::string>& canonical);
std::vector<std::string> capability_names(CapMask mask);

// Child side, step 1 (needs CAP_SETPCAP): lock securebits. SECBIT_NO_SETUID_FIXUP keeps the
// capabilities across the identity switch that follows, so restrict_capabilities() can still set
// the bounding set afterwards; SECBIT_NOROOT makes execve as uid 0 grant nothing from it.
Status lock_securebits();

// Child side, step 2: every set becomes `keep` (bounding, inheritable, permitted, effective and
// ambient), then ambient raising is locked off. With `keep` empty: nothing at all.
Status restrict_capabilities(CapMask keep);

// The five sets of a process as /proc/PID/status shows them (CapInh, CapPrm, CapEff, CapBnd,
// CapAmb), in that order.
struct ProcessCaps {
  CapMask inheritable = 0, permitted = 0, effective = 0, bounding = 0, ambient = 0;
};
// Parses a status file's text; false when a line is missing or malformed. Allocates nothing.
bool parse_status_caps(const char* text, std::size_t len, ProcessCaps& out);
// Init side, once the program has exec'd: reads /proc/PID/status in init's own /proc (the
// sandbox's) with raw system calls and a buffer on the stack (init may share the supervisor's
// memory then, raw_syscall.hpp). A small procfs read that does not block.
bool read_process_caps_raw(pid_t pid, ProcessCaps& out);
// The record's form: {"inheritable": [...], "permitted": [...], ...} of canonical names.
nlohmann::json process_caps_json(const ProcessCaps& pc);

}  // namespace sbx
