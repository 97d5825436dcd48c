#include <doctest/doctest.h>

#include <linux/audit.h>
#include <sched.h>
#include <seccomp.h>
#include <linux/seccomp.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/base/fsutil.hpp"
#include "runtime/linux/seccomp_policy.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/model/spec.hpp"

using namespace sbx;
using nlohmann::json;

namespace {

seccomp_data call(int nr, std::initializer_list<std::uint64_t> args = {}, std::uint32_t arch = AUDIT_ARCH_X86_64) {
  seccomp_data d{};
  d.nr = nr;
  d.arch = arch;
  int i = 0;
  for (auto a : args) d.args[i++] = a;
  return d;
}

// What the supervisor would answer: "allow", "kill" or "errno N".
std::string verdict(const std::vector<sock_filter>& prog, const seccomp_data& d) {
  SeccompAnswer a = seccomp_answer(seccomp_evaluate(prog, d));
  if (a.kind == SeccompAnswer::kAllow) return "allow";
  if (a.kind == SeccompAnswer::kKill) return "kill";
  return "errno " + std::to_string(a.err);
}

std::vector<sock_filter> compile(const std::string& text) {
  auto p = parse_seccomp_policy(text, "test.json");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  auto prog = compile_seccomp_policy(*p);
  REQUIRE_MESSAGE(prog.ok(), (prog.ok() ? "" : prog.error().message));
  return *prog;
}

std::string parse_error(const std::string& text) {
  auto p = parse_seccomp_policy(text, "policy.json");
  REQUIRE_FALSE(p.ok());
  return p.error().message;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

double us_since(const timespec& a) {
  timespec b;
  clock_gettime(CLOCK_MONOTONIC, &b);
  return (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3;
}

}  // namespace

TEST_CASE("the built-in default policy is profiles/seccomp/default.json, and its hash is right") {
  std::string file = slurp(SBX_SOURCE_DIR "/profiles/seccomp/default.json");
  REQUIRE_FALSE(file.empty());
  CHECK_MESSAGE(std::string(default_seccomp_policy_text()) == file,
                "the generated policy differs from the file: cmake/embed_text.cmake did not run");
  CHECK(std::string(default_seccomp_policy_sha256()) == sha256_hex(file));
}

TEST_CASE("the default policy: allowlist, explicit denials, argument conditions, foreign ABIs") {
  std::string text(default_seccomp_policy_text());
  auto pol = parse_seccomp_policy(text, "default");
  REQUIRE(pol.ok());
  CHECK(pol->default_action_text == "SCMP_ACT_ERRNO(EPERM)");
  CHECK(pol->arches == std::vector<std::uint32_t>{AUDIT_ARCH_X86_64});
  auto prog = compile(text);

  // Ordinary calls.
  for (int nr : {SYS_read, SYS_write, SYS_openat, SYS_mmap, SYS_execve, SYS_exit_group, SYS_getpid, SYS_mkdirat, SYS_sendmsg})
    CHECK_MESSAGE(verdict(prog, call(nr)) == "allow", nr);
  // The listed dangerous families are refused with EPERM.
  for (int nr : {SYS_mount, SYS_umount2, SYS_unshare, SYS_setns, SYS_ptrace, SYS_keyctl, SYS_add_key, SYS_bpf,
                 SYS_perf_event_open, SYS_kexec_load, SYS_open_by_handle_at, SYS_io_uring_setup, SYS_userfaultfd,
                 SYS_init_module, SYS_clock_settime, SYS_pivot_root, SYS_process_vm_readv})
    CHECK_MESSAGE(verdict(prog, call(nr)) == "errno 1", nr);
  // File watches: a watch on the host's read-only /usr, shared by every sandbox, would show what
  // the host and the other sandboxes open (issue 30).
  for (int nr : {SYS_inotify_init, SYS_inotify_init1, SYS_inotify_add_watch, SYS_inotify_rm_watch, SYS_fanotify_init,
                 SYS_fanotify_mark})
    CHECK_MESSAGE(verdict(prog, call(nr)) == "errno 1", nr);
  // clone: threads and fork yes, new namespaces no; clone3 answers ENOSYS (libc falls back).
  CHECK(verdict(prog, call(SYS_clone, {0x3d0f00})) == "allow");               // pthread_create's flags
  CHECK(verdict(prog, call(SYS_clone, {0x01200011})) == "allow");             // fork
  CHECK(verdict(prog, call(SYS_clone, {0x10000000 | 0x11})) == "errno 1");    // CLONE_NEWUSER
  CHECK(verdict(prog, call(SYS_clone, {0x20000000 | 0x11})) == "errno 1");    // CLONE_NEWPID
  CHECK(verdict(prog, call(SYS_clone3)) == "errno 38");
  // Linux AIO: a context takes from fs.aio-max-nr, the host's one count; ENOSYS, as without AIO.
  CHECK(verdict(prog, call(SYS_io_setup, {1, 0})) == "errno 38");
  CHECK(verdict(prog, call(SYS_io_submit)) == "allow");  // needs a context: none can be made
  // TIOCSTI and TIOCLINUX are refused, also with junk in the upper 32 bits the kernel ignores.
  CHECK(verdict(prog, call(SYS_ioctl, {0, 0x5412})) == "errno 1");
  CHECK(verdict(prog, call(SYS_ioctl, {0, 0x100005412ULL})) == "errno 1");
  CHECK(verdict(prog, call(SYS_ioctl, {0, 0xffffffff00005412ULL})) == "errno 1");
  CHECK(verdict(prog, call(SYS_ioctl, {1, 0x541C})) == "errno 1");
  CHECK(verdict(prog, call(SYS_ioctl, {0, 0x5401})) == "allow");  // TCGETS
  CHECK(verdict(prog, call(SYS_ioctl, {0, 0x80045430ULL})) == "allow");  // TIOCGPTN
  // prlimit64: pid 1's limits are not the program's to set (it shares init's uid), also with junk
  // in the upper 32 bits of the pid; its own (pid 0: setrlimit), its children's, reading pid 1's.
  CHECK(verdict(prog, call(SYS_prlimit64, {1, 7, 0x7fff0000})) == "errno 1");
  CHECK(verdict(prog, call(SYS_prlimit64, {0xffffffff00000001ULL, 0, 0x7fff0000})) == "errno 1");
  CHECK(verdict(prog, call(SYS_prlimit64, {1, 7, 0x7fff0000, 0x7fff1000})) == "errno 1");
  CHECK(verdict(prog, call(SYS_prlimit64, {0, 7, 0x7fff0000})) == "allow");
  CHECK(verdict(prog, call(SYS_prlimit64, {0, 7, 0, 0x7fff0000})) == "allow");
  CHECK(verdict(prog, call(SYS_prlimit64, {2, 7, 0x7fff0000})) == "allow");
  CHECK(verdict(prog, call(SYS_prlimit64, {1, 7, 0, 0x7fff0000})) == "allow");
  // socket: AF_VSOCK no, the rest yes.
  CHECK(verdict(prog, call(SYS_socket, {40, 1, 0})) == "errno 1");
  CHECK(verdict(prog, call(SYS_socket, {2, 1, 0})) == "allow");
  CHECK(verdict(prog, call(SYS_socket, {1, 5, 0})) == "allow");
  // personality: only the harmless values.
  CHECK(verdict(prog, call(SYS_personality, {0})) == "allow");
  CHECK(verdict(prog, call(SYS_personality, {0xffffffff})) == "allow");
  CHECK(verdict(prog, call(SYS_personality, {0x0040000})) == "errno 1");  // ADDR_NO_RANDOMIZE
  // Foreign ABIs: i386 (int 0x80) hits the bad-arch action; x32 numbers are never allowed.
  CHECK(verdict(prog, call(20, {}, AUDIT_ARCH_I386)) == "kill");
  CHECK(verdict(prog, call(0x40000000 | SYS_getpid)) != "allow");
  CHECK(verdict(prog, call(0x40000000 | SYS_mount)) != "allow");
  // Syscalls newer than any the policy names answer ENOSYS, as a kernel without them does, so
  // that the C library falls back (a number past every table; mseal, statmount).
  CHECK(verdict(prog, call(1000)) == "errno 38");
  CHECK(verdict(prog, call(462)) == "errno 38");
  CHECK(verdict(prog, call(457)) == "errno 38");
}

TEST_CASE("syscalls newer than the policy answer ENOSYS; older ones it does not name keep its errno") {
  std::string text(default_seccomp_policy_text());
  auto pol = parse_seccomp_policy(text, "default");
  REQUIRE(pol.ok());
  int newest = newest_refused_as_enosys(*pol);
  CHECK(newest >= SYS_clone3);  // the default policy names calls up to at least clone3 (435)
  bool noted = false;
  for (auto& n : pol->notes) noted = noted || n.find("numbered above " + std::to_string(newest)) != std::string::npos;
  CHECK(noted);
  auto prog = compile(text);
  CHECK(verdict(prog, call(newest + 1)) == "errno 38");
  CHECK(verdict(prog, call(0x3fffffff)) == "errno 38");
  CHECK(verdict(prog, call(SYS_uselib)) == "errno 1");  // old, not named: the policy's own answer
  // x32 numbers (bit 30) and foreign arches still meet the policy's own checks, never ENOSYS.
  CHECK(verdict(prog, call(0x40000000 | 500)) != "errno 38");
  CHECK(verdict(prog, call(newest + 1, {}, AUDIT_ARCH_I386)) == "kill");
  // The installed program turns the answer into a notification, as every refusal: recorded.
  CHECK(seccomp_evaluate(notify_program(prog), call(newest + 1)) == SECCOMP_RET_USER_NOTIF);

  // Only where the default is an errno: an allow-by-default policy allows what it does not name,
  // a kill-by-default one kills it.
  auto allow = compile(R"({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mount"], "action": "SCMP_ACT_ERRNO"}]})");
  CHECK(verdict(allow, call(500)) == "allow");
  auto kill = compile(R"({"defaultAction": "SCMP_ACT_KILL_PROCESS", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}]})");
  CHECK(verdict(kill, call(500)) == "kill");
  // The newest call the document names is the bound, whatever its rule's action, and a rule
  // skipped for the capabilities kept counts too (its author knew the call): with read, write
  // and fchmod (91) named, mkdir (83) keeps the default's errno and anything above 91 is ENOSYS.
  auto small = compile(R"({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 13,
      "syscalls": [{"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"}, {"names": ["fchmod"], "action": "SCMP_ACT_ERRNO"},
                   {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}}]})");
  CHECK(verdict(small, call(SYS_read)) == "allow");
  CHECK(verdict(small, call(SYS_mkdir)) == "errno 13");
  CHECK(verdict(small, call(SYS_fchmod)) == "errno 1");
  CHECK(verdict(small, call(SYS_mount)) == "errno 13");  // its rule skipped: the default's errno
  CHECK(verdict(small, call(SYS_mount + 1)) == "errno 38");
}

TEST_CASE("the installed program allows exactly what the policy allows: refusals become notifications") {
  auto ref = compile(std::string(default_seccomp_policy_text()));
  auto inst = notify_program(ref);
  CHECK(inst.size() == ref.size());  // nothing added: no hand-off rule, no prefix
  CHECK(seccomp_evaluate(inst, call(SYS_getpid)) == SECCOMP_RET_ALLOW);
  CHECK(seccomp_evaluate(inst, call(SYS_mount)) == SECCOMP_RET_USER_NOTIF);
  CHECK(seccomp_evaluate(inst, call(SYS_clone3)) == SECCOMP_RET_USER_NOTIF);
  CHECK(seccomp_evaluate(inst, call(20, {}, AUDIT_ARCH_I386)) == SECCOMP_RET_USER_NOTIF);
  // A policy that refuses sendmsg refuses it on every fd and from every address: sbx is not
  // position-independent, so an address of its own would be one a program can map.
  auto strict = compile(R"({"defaultAction": "SCMP_ACT_KILL_PROCESS",
                            "syscalls": [{"names": ["write"], "action": "SCMP_ACT_ALLOW"}]})");
  auto strict_inst = notify_program(strict);
  for (std::uint64_t fd : {0ULL, 3ULL, 7ULL, 1023ULL})
    for (std::uint64_t ip : {0ULL, 0x607a07ULL, 0x5555deadbeefULL}) {
      seccomp_data d = call(SYS_sendmsg, {fd});
      d.instruction_pointer = ip;
      CHECK(seccomp_evaluate(strict_inst, d) == SECCOMP_RET_USER_NOTIF);
    }
  CHECK(verdict(strict, call(SYS_sendmsg, {8})) == "kill");
  // Call by call, the installed program lets through what the reference lets through, and
  // notifies for everything else.
  for (const auto* prog : {&ref, &strict}) {
    auto installed = notify_program(*prog);
    for (int nr = 0; nr < 512; ++nr)
      for (std::uint32_t arch : {std::uint32_t{AUDIT_ARCH_X86_64}, std::uint32_t{AUDIT_ARCH_I386}}) {
        seccomp_data d = call(nr, {0, 0x5412, 2}, arch);
        bool allowed = seccomp_allows(*prog, d);
        CHECK(seccomp_allows(installed, d) == allowed);
        if (!allowed) CHECK(seccomp_evaluate(installed, d) == SECCOMP_RET_USER_NOTIF);
      }
  }
}

TEST_CASE("libseccomp's programs never read the instruction pointer (the program child's check of its last calls)") {
  // child.cpp checks execve and exit against the policy before the filter exists, with every
  // field of seccomp_data but the instruction pointer: exact only because no program sbx
  // installs loads it. Policies with argument rules of every kind, and the default one.
  std::vector<std::string> policies = {std::string(default_seccomp_policy_text()), R"({
    "defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
    "syscalls": [
      {"names": ["execve"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 3, "value": 0, "op": "SCMP_CMP_EQ"}]},
      {"names": ["kill"], "action": "SCMP_ACT_KILL_PROCESS", "args": [{"index": 1, "value": 9, "op": "SCMP_CMP_GT"}]},
      {"names": ["fchmod"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 1, "value": 2048, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}
    ]})"};
  for (auto& text : policies) {
    for (const sock_filter& f : compile(text)) {
      bool loads_ip = f.code == (BPF_LD | BPF_W | BPF_ABS) && f.k >= offsetof(seccomp_data, instruction_pointer) &&
                      f.k < offsetof(seccomp_data, args);
      CHECK_FALSE(loads_ip);
    }
  }
}

// Comparisons of the syscall number by order: a binary tree has many, libseccomp's linear list at
// most the x32 check's one.
// The check in front of an errno-default policy's program that answers newer calls ENOSYS
// (seccomp_policy.cpp) is not counted: its six instructions end with that answer.
int ordered_jumps(const std::vector<sock_filter>& prog) {
  bool prefixed = prog.size() > 6 && prog[5].code == (BPF_RET | BPF_K) && prog[5].k == (SECCOMP_RET_ERRNO | ENOSYS);
  int n = 0;
  for (std::size_t k = prefixed ? 6 : 0; k < prog.size(); ++k)
    if (prog[k].code == (BPF_JMP | BPF_JGT | BPF_K) || prog[k].code == (BPF_JMP | BPF_JGE | BPF_K)) ++n;
  return n;
}

TEST_CASE("many rules compile to a binary tree; none or few keep the list, and decide the same") {
  // The default policy (hundreds of names): a tree, so that its install is cheap (seccomp_policy.cpp).
  auto def = compile(std::string(default_seccomp_policy_text()));
  CHECK(ordered_jumps(def) > 8);
  CHECK(verdict(def, call(SYS_read)) == "allow");
  CHECK(verdict(def, call(SYS_mount)) == "errno 1");
  CHECK(verdict(def, call(SYS_getpid, {}, AUDIT_ARCH_I386)) == "kill");
  // No rules: libseccomp before 2.5.4 lost the default action of a rule-less tree (every call
  // killed); a list is built, which allows.
  auto none = compile(R"({"defaultAction": "SCMP_ACT_ALLOW"})");
  CHECK(ordered_jumps(none) <= 1);
  CHECK(verdict(none, call(SYS_getpid)) == "allow");
  CHECK(verdict(none, call(SYS_mount)) == "allow");
  auto few = compile(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["getpid", "read"], "action": "SCMP_ACT_ALLOW"}]})");
  CHECK(ordered_jumps(few) <= 1);
  CHECK(verdict(few, call(SYS_getpid)) == "allow");
  CHECK(verdict(few, call(SYS_write)) == "errno 1");
}

TEST_CASE("custom policies: errnoRet, args, and a rule whose action equals the default") {
  auto prog = compile(R"({
    "defaultAction": "SCMP_ACT_ALLOW",
    "syscalls": [
      {"names": ["mkdirat", "mkdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13},
      {"names": ["kill"], "action": "SCMP_ACT_KILL_PROCESS", "args": [{"index": 1, "value": 9, "op": "SCMP_CMP_EQ"}]},
      {"names": ["getpid"], "action": "SCMP_ACT_ALLOW"}
    ]})");
  CHECK(verdict(prog, call(SYS_mkdirat)) == "errno 13");
  CHECK(verdict(prog, call(SYS_mkdir)) == "errno 13");
  CHECK(verdict(prog, call(SYS_kill, {1, 9})) == "kill");
  CHECK(verdict(prog, call(SYS_kill, {1, 15})) == "allow");
  CHECK(verdict(prog, call(SYS_getpid)) == "allow");

  // ERRNO(EPERM) conditional rule on an ERRNO(EPERM) default: libseccomp would refuse it; it is
  // re-encoded and still answers EPERM.
  auto p2 = compile(R"({
    "defaultAction": "SCMP_ACT_ERRNO",
    "syscalls": [
      {"names": ["fchmod"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 1, "value": 2048, "valueTwo": 2048, "op": "SCMP_CMP_MASKED_EQ"}]},
      {"names": ["fchmod"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 1, "value": 0, "op": "SCMP_CMP_GE"}]},
      {"names": ["mount"], "action": "SCMP_ACT_ERRNO"}
    ]})");
  CHECK(verdict(p2, call(SYS_fchmod, {3, 04755})) == "errno 1");
  CHECK(verdict(p2, call(SYS_fchmod, {3, 0755})) == "allow");
  CHECK(verdict(p2, call(SYS_mount)) == "errno 1");
  CHECK(seccomp_action_text(seccomp_evaluate(p2, call(SYS_fchmod, {3, 04755}))) == "SCMP_ACT_ERRNO(EPERM)");
}

TEST_CASE("unknown syscall names are skipped and listed, never fatal") {
  auto p = parse_seccomp_policy(R"({"defaultAction": "SCMP_ACT_ERRNO",
      "syscalls": [{"names": ["read", "no_such_call", "write", "frobnicate2"], "action": "SCMP_ACT_ALLOW"},
                   {"names": ["no_such_call"], "action": "SCMP_ACT_ALLOW"}]})", "p.json");
  REQUIRE(p.ok());
  CHECK(p->unresolved == std::vector<std::string>{"no_such_call", "frobnicate2"});
  REQUIRE(p->rules.size() == 1);
  CHECK(p->rules[0].names == std::vector<std::string>{"read", "write"});
  CHECK(compile_seccomp_policy(*p).ok());
}

TEST_CASE("strict parsing: errors name the file and the JSON path") {
  CHECK(parse_error(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["a"], "action": "SCMP_ACT_ALLOW"}, {"names": ["b"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["write"], "action": "SCMP_ACT_FOO"}]})") ==
        "policy.json: /syscalls/3/action: unknown action 'SCMP_ACT_FOO'");
  CHECK(parse_error(R"({"defaultAction": "SCMP_ACT_NOPE"})") == "policy.json: /defaultAction: unknown action 'SCMP_ACT_NOPE'");
  CHECK(parse_error(R"({"syscalls": []})") == "policy.json: /defaultAction: is required");
  CHECK(parse_error(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscals": []})") == "policy.json: /syscals: unknown key 'syscals'");
  CHECK(parse_error(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 7, "value": 1, "op": "SCMP_CMP_EQ"}]}]})") == "policy.json: /syscalls/0/args/0/index: must be 0 to 5");
  CHECK(parse_error(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_SORTOF"}]}]})") ==
        "policy.json: /syscalls/0/args/0/op: unknown operator 'SCMP_CMP_SORTOF'");
  CHECK(parse_error(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 0, "value": -1, "op": "SCMP_CMP_EQ"}]}]})") ==
        "policy.json: /syscalls/0/args/0/value: must be a non-negative integer");
  CHECK(parse_error(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": "read", "action": "SCMP_ACT_ALLOW"}]})") ==
        "policy.json: /syscalls/0/names: must be an array of strings");
  CHECK(parse_error(R"({"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_AARCH64"]})") ==
        "policy.json: /architectures: does not include this machine's architecture (SCMP_ARCH_X86_64)");
  CHECK(parse_error(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 1, "value": 1, "op": "SCMP_CMP_GT"}, {"index": 1, "value": 9, "op": "SCMP_CMP_LT"}]}]})")
            .find("policy.json: /syscalls/0/args/1/index: argument 1 compared twice in one rule") == 0);
  CHECK(parse_error(R"({"defaultAction": "SCMP_ACT_NOTIFY"})").find("policy.json: /defaultAction: SCMP_ACT_NOTIFY is not supported") == 0);
  CHECK(parse_error("{\"defaultAction\": ").find("policy.json: /defaultAction: not valid JSON") == 0);
}

TEST_CASE("a Docker/Podman superset file loads: archMap, includes and excludes resolved") {
  std::string text = slurp(SBX_SOURCE_DIR "/tests/fixtures/seccomp/docker-trimmed.json");
  REQUIRE_FALSE(text.empty());
  auto p = parse_seccomp_policy(text, "docker-trimmed.json");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  // x86_64 plus the sub-architectures Docker lists for it (the policy's choice).
  CHECK(p->arches == std::vector<std::uint32_t>{AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, SCMP_ARCH_X32});
  CHECK(p->unresolved == std::vector<std::string>{"landlock_frobnicate"});
  auto noted = [&](const std::string& what) {
    return std::any_of(p->notes.begin(), p->notes.end(), [&](auto& n) { return n.find(what) != std::string::npos; });
  };
  CHECK(noted("/syscalls/4 (mount, ...) skipped: included only with capability CAP_SYS_ADMIN"));
  CHECK(noted("/syscalls/5 (sync_file_range2) skipped: included only for other architectures"));
  CHECK(noted("/syscalls/7 (arm_fadvise64_64) skipped"));
  CHECK(noted("archMap"));
  auto prog = compile_seccomp_policy(*p);
  REQUIRE(prog.ok());
  CHECK(verdict(*prog, call(SYS_mount)) == "errno 1");              // only with CAP_SYS_ADMIN: skipped
  CHECK(verdict(*prog, call(SYS_clone, {0x11})) == "allow");         // excluded for CAP_SYS_ADMIN: applies
  CHECK(verdict(*prog, call(SYS_clone3)) == "errno 38");
  CHECK(verdict(*prog, call(SYS_ptrace)) == "allow");                // minKernel 4.8 <= this kernel
  CHECK(verdict(*prog, call(20, {}, AUDIT_ARCH_I386)) == "allow");    // getpid on i386: listed by the policy
  CHECK(verdict(*prog, call(SYS_modify_ldt)) == "allow");            // included for amd64
  CHECK(verdict(*prog, call(SYS_open_by_handle_at)) == "errno 1");   // included only for CAP_DAC_READ_SEARCH
  CHECK(noted("/syscalls/9 (open_by_handle_at) skipped: included only with capability CAP_DAC_READ_SEARCH"));
}

TEST_CASE("includes.caps and excludes.caps follow the capabilities the run keeps, as Docker decides them") {
  std::string text = slurp(SBX_SOURCE_DIR "/tests/fixtures/seccomp/docker-trimmed.json");
  REQUIRE_FALSE(text.empty());
  // --cap-add SYS_ADMIN: the rule that needs it applies, the rules excluded for it do not.
  auto admin = parse_seccomp_policy(text, "docker-trimmed.json", {"CAP_SYS_ADMIN"});
  REQUIRE_MESSAGE(admin.ok(), (admin.ok() ? "" : admin.error().message));
  auto prog = compile_seccomp_policy(*admin);
  REQUIRE(prog.ok());
  CHECK(verdict(*prog, call(SYS_mount)) == "allow");
  CHECK(verdict(*prog, call(SYS_clone3)) == "errno 1");             // its ENOSYS rule is excluded: the default
  CHECK(verdict(*prog, call(SYS_open_by_handle_at)) == "errno 1");  // needs CAP_DAC_READ_SEARCH, not kept
  auto noted = [&](const std::string& what) {
    return std::any_of(admin->notes.begin(), admin->notes.end(), [&](auto& n) { return n.find(what) != std::string::npos; });
  };
  CHECK(noted("/syscalls/3 (clone3) skipped: excluded with capability CAP_SYS_ADMIN (kept)"));
  CHECK(noted("/syscalls/9 (open_by_handle_at) skipped: included only with capability CAP_DAC_READ_SEARCH (not kept)"));
  // A rule that includes two capabilities needs both.
  std::string two = R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["getpid"], "action": "SCMP_ACT_ALLOW",
                        "includes": {"caps": ["CAP_SYS_ADMIN", "CAP_SYS_PTRACE"]}}]})";
  auto one_of_two = compile_seccomp_policy(*parse_seccomp_policy(two, "p.json", {"CAP_SYS_ADMIN"}));
  auto both = compile_seccomp_policy(*parse_seccomp_policy(two, "p.json", {"CAP_SYS_ADMIN", "CAP_SYS_PTRACE"}));
  REQUIRE((one_of_two.ok() && both.ok()));
  CHECK(verdict(*one_of_two, call(SYS_getpid)) == "errno 1");
  CHECK(verdict(*both, call(SYS_getpid)) == "allow");
}

namespace {
constexpr std::string_view kSecret = "0123456789abcdef0123456789abcdef";  // the cache's MAC key in these tests
}  // namespace

TEST_CASE("the compiled-program cache keys on the kept capabilities") {
  char dir[] = "/tmp/sbx-seccomp-caps-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  std::string policy = std::string(dir) + "/docker.json";
  {
    std::ofstream(policy) << slurp(SBX_SOURCE_DIR "/tests/fixtures/seccomp/docker-trimmed.json");
  }
  std::string cache = std::string(dir) + "/cache";
  auto none = prepare_seccomp(policy, cache, {}, kSecret);
  REQUIRE(none.ok());
  auto admin = prepare_seccomp(policy, cache, {"CAP_SYS_ADMIN"}, kSecret);
  REQUIRE(admin.ok());
  CHECK_FALSE(admin->cached);  // not the program compiled without the capability
  CHECK(verdict(none->reference, call(SYS_mount)) == "errno 1");
  CHECK(verdict(admin->reference, call(SYS_mount)) == "allow");
  auto again = prepare_seccomp(policy, cache, {"CAP_SYS_ADMIN"}, kSecret);
  REQUIRE(again.ok());
  CHECK(again->cached);
  CHECK(verdict(again->reference, call(SYS_mount)) == "allow");
  std::system(("rm -rf '" + std::string(dir) + "'").c_str());
}

TEST_CASE("Podman's seccomp.json as Debian 12 ships it loads unchanged (defaultErrno, errno names)") {
  std::string text = slurp(SBX_SOURCE_DIR "/tests/fixtures/seccomp/podman-debian12.json");
  REQUIRE_FALSE(text.empty());
  auto p = parse_seccomp_policy(text, "seccomp.json");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  CHECK(p->default_action_text == "SCMP_ACT_ERRNO(ENOSYS)");
  auto prog = compile_seccomp_policy(*p);
  REQUIRE(prog.ok());
  CHECK(verdict(*prog, call(SYS_getpid)) == "allow");
  CHECK(verdict(*prog, call(SYS_bpf)) == "errno 1");        // errno "EPERM" with errnoRet 1, no CAP_SYS_ADMIN
  CHECK(verdict(*prog, call(SYS_kexec_file_load)) == "errno 1");
  CHECK(verdict(*prog, call(1000)) == "errno 38");           // the default: ENOSYS
}

TEST_CASE("errno names: alone, with a matching number, and refused when they disagree or are unknown") {
  auto action_of = [](const std::string& rule_extra, const std::string& top_extra = "") {
    std::string text = R"({"defaultAction": "SCMP_ACT_ALLOW")" + top_extra + R"(, "syscalls": [{"names": ["getpid"],
                          "action": "SCMP_ACT_ERRNO")" + rule_extra + "}]}";
    auto p = parse_seccomp_policy(text, "policy.json");
    if (!p.ok()) return p.error().message;
    auto prog = compile_seccomp_policy(*p);
    return prog.ok() ? verdict(*prog, call(SYS_getpid)) : prog.error().message;
  };
  CHECK(action_of(R"(, "errno": "ENOSYS")") == "errno 38");
  CHECK(action_of(R"(, "errno": "EWOULDBLOCK")") == "errno 11");
  CHECK(action_of(R"(, "errno": "EACCES", "errnoRet": 13)") == "errno 13");
  CHECK(action_of(R"(, "errno": "EACCES", "errnoRet": 1)") ==
        "policy.json: /syscalls/0/errno: 'EACCES' is 13 but errnoRet says 1");
  CHECK(action_of(R"(, "errno": "ENOPE")") == "policy.json: /syscalls/0/errno: unknown errno name 'ENOPE'");
  CHECK(action_of(R"(, "errno": 5)") == "policy.json: /syscalls/0/errno: must be an errno name such as \"EPERM\"");
  auto top = parse_seccomp_policy(R"({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrno": "EROFS"})", "policy.json");
  REQUIRE(top.ok());
  CHECK(top->default_action_text == "SCMP_ACT_ERRNO(EROFS)");
}

TEST_CASE("prepare_seccomp: cache hit skips the compile; unconfined has no filter") {
  char dir[] = "/tmp/sbx-unit-seccomp-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  std::string cache = std::string(dir) + "/cache/seccomp";
  timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  auto first = prepare_seccomp("default", cache, {}, kSecret);
  double cold = us_since(t0);
  REQUIRE(first.ok());
  CHECK_FALSE(first->cached);
  CHECK(first->enabled);
  CHECK(first->sha256 == std::string(default_seccomp_policy_sha256()));
  std::vector<double> hits, misses;
  for (int i = 0; i < 20; ++i) {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    auto again = prepare_seccomp("default", cache, {}, kSecret);
    hits.push_back(us_since(t0));
    REQUIRE(again.ok());
    CHECK(again->cached);
    CHECK(again->reference.size() == first->reference.size());
    CHECK(std::equal(again->reference.begin(), again->reference.end(), first->reference.begin(),
                     [](const sock_filter& a, const sock_filter& b) { return a.code == b.code && a.k == b.k && a.jt == b.jt && a.jf == b.jf; }));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    auto nocache = prepare_seccomp("default", "");
    misses.push_back(us_since(t0));
    REQUIRE(nocache.ok());
  }
  std::sort(hits.begin(), hits.end());
  std::sort(misses.begin(), misses.end());
  MESSAGE("seccomp policy setup (default policy, " << first->reference.size() << " BPF instructions): first "
          << cold << " us; median without cache " << misses[10] << " us; median with cache " << hits[10] << " us");
  // A torn cache file is a miss, not an error.
  {
    std::string cmd = "sh -c 'for f in " + cache + "/*.bpf; do head -c 13 $f > $f.x && mv $f.x $f; done'";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
  auto torn = prepare_seccomp("default", cache, {}, kSecret);
  REQUIRE(torn.ok());
  CHECK_FALSE(torn->cached);
  auto un = prepare_seccomp("unconfined", cache);
  REQUIRE(un.ok());
  CHECK_FALSE(un->enabled);
  CHECK(seccomp_enforcement_json(*un)["mode"] == "unconfined");
  CHECK(seccomp_enforcement_json(*first)["mode"] == "filter");
  auto missing = prepare_seccomp(std::string(dir) + "/nope.json", cache);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("nope.json") != std::string::npos);
  CHECK(std::system(("rm -rf " + std::string(dir)).c_str()) == 0);
}

TEST_CASE("a cached program written over (RET_ALLOW), or under another secret, is not trusted") {
  char dir[] = "/tmp/sbx-unit-seccomp-mac-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  std::string cache = std::string(dir) + "/cache/seccomp";
  auto first = prepare_seccomp("default", cache, {}, kSecret);
  REQUIRE(first.ok());
  CHECK(is_sha256_hex(first->program_sha256));
  CHECK(seccomp_enforcement_json(*first)["program_sha256"] == first->program_sha256);
  REQUIRE(prepare_seccomp("default", cache, {}, kSecret)->cached);
  // Every .bpf overwritten with one instruction: SECCOMP_RET_ALLOW.
  const char allow[8] = {0x06, 0, 0, 0, 0, 0, static_cast<char>(0xff), 0x7f};
  for (auto& e : std::filesystem::directory_iterator(cache))
    if (e.path().extension() == ".bpf") std::ofstream(e.path(), std::ios::binary).write(allow, sizeof allow);
  auto after = prepare_seccomp("default", cache, {}, kSecret);
  REQUIRE(after.ok());
  CHECK_FALSE(after->cached);
  CHECK(after->program_sha256 == first->program_sha256);
  CHECK(verdict(after->reference, call(SYS_mount)) == "errno 1");
  bool said = false;
  for (auto& n : after->notes) said = said || n.find("failed its integrity check") != std::string::npos;
  CHECK(said);
  // Rewritten: the next load is a verified hit again.
  CHECK(prepare_seccomp("default", cache, {}, kSecret)->cached);
  // Program and meta rewritten together with a MAC under another key: still refused.
  auto other = prepare_seccomp("default", std::string(dir) + "/other", {}, "another secret, another writer");
  REQUIRE(other.ok());
  for (auto& e : std::filesystem::directory_iterator(std::string(dir) + "/other"))
    std::filesystem::copy_file(e.path(), cache + "/" + e.path().filename().string(),
                               std::filesystem::copy_options::overwrite_existing);
  CHECK_FALSE(prepare_seccomp("default", cache, {}, kSecret)->cached);
  // No secret: the cache is neither read nor written.
  auto none = prepare_seccomp("default", std::string(dir) + "/nosecret", {}, "");
  REQUIRE(none.ok());
  CHECK_FALSE(std::filesystem::exists(std::string(dir) + "/nosecret"));
  CHECK(std::system(("rm -rf " + std::string(dir)).c_str()) == 0);
}

TEST_CASE("an x32 call has bit 30 in a number that is not negative") {
  CHECK(is_x32_syscall(AUDIT_ARCH_X86_64, 0x40000000 | 39));
  CHECK_FALSE(is_x32_syscall(AUDIT_ARCH_X86_64, 39));
  CHECK_FALSE(is_x32_syscall(AUDIT_ARCH_X86_64, -1));  // syscall(-1): a native call with a bad number
  CHECK_FALSE(is_x32_syscall(AUDIT_ARCH_X86_64, -2));
  CHECK_FALSE(is_x32_syscall(AUDIT_ARCH_I386, 0x40000000 | 39));
  CHECK(seccomp_syscall_name(AUDIT_ARCH_X86_64, -1) == "#-1");
}

TEST_CASE("syscall and arch names for the record") {
  CHECK(seccomp_syscall_name(AUDIT_ARCH_X86_64, SYS_mount) == "mount");
  CHECK(seccomp_syscall_name(AUDIT_ARCH_I386, 20) == "getpid");
  CHECK(seccomp_syscall_name(AUDIT_ARCH_X86_64, 0x40000000 | 39) == "getpid");
  CHECK(seccomp_syscall_name(AUDIT_ARCH_X86_64, 99999) == "#99999");
  CHECK(seccomp_arch_name(AUDIT_ARCH_I386) == "x86");
}

TEST_CASE("RunSpec carries the seccomp policy; strict") {
  RunSpec s;
  CHECK(s.seccomp == "default");
  s.argv = {"true"};
  s.seccomp = "/etc/sbx/p.json";
  auto back = spec_from_json(spec_to_json(s), "t");
  REQUIRE(back.ok());
  CHECK(back->seccomp == "/etc/sbx/p.json");
  json j = spec_to_json(RunSpec{});
  j["seccomp"] = "";
  auto r = spec_from_json(j, "p.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "p.json: /seccomp: must be 'default', 'unconfined' or a policy file");
  j["seccomp"] = 3;
  auto r2 = spec_from_json(j, "p.json");
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.error().message == "p.json: /seccomp: must be a string");
}

TEST_CASE("a template's policy: the default's, with its driver's mounts, every namespace but a user namespace, setns to a pid namespace") {
  auto prog = compile(template_seccomp_policy_text());
  auto def = compile(std::string(default_seccomp_policy_text()));
  for (int nr : {SYS_mount, SYS_sethostname}) {
    CHECK_MESSAGE(verdict(prog, call(nr)) == "allow", nr);
    CHECK_MESSAGE(verdict(def, call(nr)) == "errno 1", nr);
  }
  CHECK(verdict(prog, call(SYS_umount2)) == "errno 1");  // uncovers what a read-only mount hid
  // Mounts: any new one, and remounts that make a mount read-only; never a remount that leaves
  // its target writable (a read-only bind of the caller's files made writable again).
  const std::uint64_t kRemount = 0x20, kRdonly = 0x1, kBind = 0x1000, kNosuid = 0x2, kNodev = 0x4, kRec = 0x4000,
                      kMove = 0x2000, kPrivate = 1 << 18;
  CHECK(verdict(prog, call(SYS_mount, {0, 0, 0, kNosuid | kNodev})) == "allow");  // a tmpfs, proc
  CHECK(verdict(prog, call(SYS_mount, {0, 0, 0, kRec | kPrivate})) == "allow");
  CHECK(verdict(prog, call(SYS_mount, {0, 0, 0, kBind | kRec})) == "allow");
  CHECK(verdict(prog, call(SYS_mount, {0, 0, 0, kRemount | kBind | kRdonly | kNosuid | kNodev})) == "allow");
  CHECK(verdict(prog, call(SYS_mount, {0, 0, 0, kRemount | kRdonly | kNosuid | kNodev})) == "allow");
  CHECK(verdict(prog, call(SYS_mount, {0, 0, 0, kBind})) == "errno 1");  // leaves out the mounts below
  CHECK(verdict(prog, call(SYS_mount, {0, 0, 0, kMove})) == "errno 1");
  CHECK(verdict(prog, call(SYS_mount, {0, 0, 0, kRemount | kBind})) == "errno 1");
  CHECK(verdict(prog, call(SYS_mount, {0, 0, 0, kRemount | kBind | kRdonly})) == "errno 1");  // nosuid, nodev dropped
  CHECK(verdict(prog, call(SYS_mount, {0, 0, 0, kRemount | kBind | kNosuid | kNodev})) == "errno 1");
  CHECK(verdict(prog, call(SYS_mount, {0, 0, 0, 0xC0ED0000ULL | kRemount})) == "errno 1");  // MS_MGC_VAL
  const std::uint64_t call_ns = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID | CLONE_NEWCGROUP;
  CHECK(verdict(prog, call(SYS_unshare, {call_ns})) == "allow");
  // The attack: a user namespace (all capabilities again inside it), alone or with the others.
  CHECK(verdict(prog, call(SYS_unshare, {CLONE_NEWUSER})) == "errno 1");
  CHECK(verdict(prog, call(SYS_unshare, {call_ns | CLONE_NEWUSER})) == "errno 1");
  // Back to its own pid namespace after a call's fork, and nothing else setns does: a user or
  // mount namespace (entering another's), or several at once through a pidfd.
  CHECK(verdict(prog, call(SYS_setns, {3, CLONE_NEWPID})) == "allow");
  for (std::uint64_t nstype : {std::uint64_t{0}, std::uint64_t{CLONE_NEWUSER}, std::uint64_t{CLONE_NEWNS},
                               std::uint64_t{CLONE_NEWPID | CLONE_NEWNS}, std::uint64_t{CLONE_NEWNET}})
    CHECK_MESSAGE(verdict(prog, call(SYS_setns, {3, nstype})) == "errno 1", nstype);
  // Everything else the default refuses stays refused; what it allows stays allowed.
  for (int nr : {SYS_pivot_root, SYS_ptrace, SYS_bpf, SYS_keyctl, SYS_open_by_handle_at, SYS_setdomainname,
                 SYS_init_module, SYS_fsopen, SYS_move_mount, SYS_open_tree})
    CHECK_MESSAGE(verdict(prog, call(nr)) == verdict(def, call(nr)), nr);
  CHECK(verdict(prog, call(SYS_clone, {CLONE_NEWUSER})) == "errno 1");
  for (int nr : {SYS_read, SYS_write, SYS_openat, SYS_execve, SYS_pidfd_open, SYS_sendmsg})
    CHECK_MESSAGE(verdict(prog, call(nr)) == "allow", nr);
  // No spec may name it: only a template's run asks for it (RunRequest::template_host).
  CHECK(std::string(kTemplateSeccomp) == "default+template");
}
