#pragma once
// Seccomp: OCI `linux.seccomp` policies (and Docker/Podman's superset files) parsed strictly,
// compiled to classic BPF with libseccomp in the parent, cached by hash, and installed by the
// program child as the very last step before execve.
//
// How refused syscalls are recorded: the policy is compiled with its real actions
// (ERRNO(e), KILL_PROCESS, ...). That program is kept as the *reference*. The program that is
// installed is a copy in which every refusing return (ERRNO, KILL_*, TRAP, TRACE) is rewritten to
// SECCOMP_RET_USER_NOTIF, and nothing added: no rule lets anything through that the policy
// refuses (init, which no filter binds, hands the listener to the supervisor). When a
// notification arrives, the supervisor runs the reference program on the very same seccomp_data
// (a small BPF interpreter, seccomp_evaluate) and so knows exactly which action libseccomp's
// filter would have taken — conditional rules, overlapping rules, the default action and the bad-arch action included —
// replies with -errno, or kills the sandbox for kill actions. The syscall itself never runs.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/base/error.hpp"
#include "runtime/model/warm.hpp"

namespace sbx {

// One comparison of an OCI `args` entry (SCMP_CMP_*).
struct SeccompArg {
  unsigned index = 0;
  std::uint64_t value = 0;
  std::uint64_t value_two = 0;
  int op = 0;  // enum scmp_compare
};

struct SeccompRule {
  std::vector<std::string> names;
  std::uint32_t action = 0;  // libseccomp action value (SCMP_ACT_*)
  std::vector<SeccompArg> args;
  std::string pointer;  // JSON pointer of the rule, for error messages ("/syscalls/3")
};

struct SeccompPolicy {
  std::string source;  // what errors name: a file path, or "default" (built-in)
  std::uint32_t default_action = 0;
  std::string default_action_text;    // "SCMP_ACT_ERRNO(EPERM)"
  std::vector<std::uint32_t> arches;  // libseccomp arch tokens; the native one first
  std::vector<SeccompRule> rules;
  std::vector<std::string> unresolved;  // names libseccomp does not know (skipped, never fatal)
  std::vector<std::string> notes;       // superset keys resolved or ignored, rules skipped and why
  int newest_named = -1;  // the highest native syscall number the document names (any rule, skipped or not)
};

// Strict parse: unknown keys, bad actions/ops/values are errors of the form
// "<source>: <json pointer>: <what>", e.g. "policy.json: /syscalls/3/action: unknown action 'X'".
// `kept_caps`: the capabilities the program keeps (canonical "CAP_X" names), which decide
// Docker's includes.caps / excludes.caps rules.
Result<SeccompPolicy> parse_seccomp_policy(std::string_view text, const std::string& source,
                                           const std::vector<std::string>& kept_caps = {});

// libseccomp -> classic BPF, with the policy's real actions (the reference program). A policy
// whose default is an errno answers ENOSYS instead for system calls newer than any it names.
Result<std::vector<sock_filter>> compile_seccomp_policy(const SeccompPolicy& policy);
// The highest native syscall number the policy names when its default action is an errno (the
// calls above it answer ENOSYS), else -1.
int newest_refused_as_enosys(const SeccompPolicy& policy);

// The built-in default policy (profiles/seccomp/default.json, compiled into the binary).
std::string_view default_seccomp_policy_text();
std::string_view default_seccomp_policy_sha256();  // computed at build time (cmake/embed_text.cmake)

// A template's own filter (issue 34, runtime/server/mcp_template.hpp): the default policy with
// mount (new mounts, recursive binds and read-only remounts), sethostname and unshare without
// CLONE_NEWUSER allowed, for the driver that forks each call into namespaces of its own. Each
// call's pid 1 stacks the call's own filter (the
// default policy) on it before the call's code runs, so a call is held by both. Its name is
// kTemplateSeccomp (model/warm.hpp), which only a template's run asks for (RunRequest::template_host): a spec
// that names it is refused (spec.cpp).
std::string template_seccomp_policy_text();

// What the parent prepares for one run.
struct PreparedSeccomp {
  bool enabled = false;  // false: unconfined
  std::string profile;   // "default", "unconfined" or the file path
  std::string sha256;    // of the policy text
  std::string default_action;
  std::vector<std::string> unresolved, notes;
  // Syscall names that a non-allow rule of the policy names (mount, ptrace, bpf, ...): refusals of
  // these are always kept in the trace's violations, past the cap on distinct entries.
  std::vector<std::string> named;
  bool cached = false;                 // the BPF came from the cache (and passed its MAC)
  std::int64_t setup_us = 0;           // read + parse + (compile | cache load) + patch
  std::vector<sock_filter> reference;  // real actions, evaluated by the supervisor
  // sha256 of the reference program's bytes: what was actually loaded, whether compiled now or
  // read from the cache (the installed program is notify_program of it).
  std::string program_sha256;
};

// `which` is "default", "unconfined" or a policy file. `cache_dir` ("" for none) holds compiled
// programs as <key>.bpf, keyed by policy text, arch, libseccomp version, sbx version and the
// kept capabilities, each with a <key>.meta.json that carries the program's sha256 and an
// HMAC-SHA256 over both, keyed by `cache_secret`. A cache file is trusted only when its MAC
// verifies: a store written by someone else (a program through a bind, another user) holds
// programs nobody can vouch for, and compiling the default policy costs ~3-7 ms against ~0.1 ms
// for a verified load (tests/unit/test_seccomp_policy.cpp measures both), so the cache is kept,
// authenticated. An entry that fails the check is recompiled, rewritten and said in `notes`.
// Without a secret ("") the cache is neither read nor written.
Result<PreparedSeccomp> prepare_seccomp(const std::string& which, const std::string& cache_dir,
                                        const std::vector<std::string>& kept_caps = {},
                                        std::string_view cache_secret = {});

// The program that is installed: `reference` with every refusing return (ERRNO, KILL_*, TRAP,
// TRACE) rewritten to SECCOMP_RET_USER_NOTIF, and nothing else: it allows exactly the calls the
// policy allows (the listener's way to the supervisor needs no rule, see child.cpp).
std::vector<sock_filter> notify_program(const std::vector<sock_filter>& reference);

// Runs a seccomp classic-BPF program on `data` the way the kernel does; returns the action value
// (SECCOMP_RET_*). A malformed program yields SECCOMP_RET_KILL_PROCESS. Allocates nothing (the
// program child calls it after its last allocation).
std::uint32_t seccomp_evaluate(const std::vector<sock_filter>& prog, const struct seccomp_data& data);
// The kernel would let this call through `prog` without a notification (ALLOW or LOG).
bool seccomp_allows(const std::vector<sock_filter>& prog, const struct seccomp_data& data);

// What the supervisor does for a notification, decoded from the reference program's answer.
struct SeccompAnswer {
  enum Kind { kAllow, kErrno, kKill } kind;
  int err;  // for kErrno
};
SeccompAnswer seccomp_answer(std::uint32_t ret);

// "mkdirat", or "#nnn" when unknown; `arch` is an AUDIT_ARCH_* value.
std::string seccomp_syscall_name(std::uint32_t arch, int nr);
// An x32 call: x86-64's arch with __X32_SYSCALL_BIT (bit 30) in a number that is not negative
// (syscall(-1) is a native call with a bad number, not an x32 one).
inline bool is_x32_syscall(std::uint32_t arch, int nr) {
  return arch == AUDIT_ARCH_X86_64 && nr >= 0 && (nr & __X32_SYSCALL_BIT);
}
std::string seccomp_arch_name(std::uint32_t arch);
// "SCMP_ACT_ERRNO(EPERM)", "SCMP_ACT_KILL_PROCESS", ...
std::string seccomp_action_text(std::uint32_t action);

// enforcement.seccomp of the trace record.
nlohmann::json seccomp_enforcement_json(const PreparedSeccomp& p);

}  // namespace sbx
