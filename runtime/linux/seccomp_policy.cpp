#include "runtime/linux/seccomp_policy.hpp"

#include <fcntl.h>
#include <sched.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/base/clock.hpp"
#include "runtime/base/trace_field.hpp"
#include "runtime/base/doc_reader.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/kernel.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/strings.hpp"

namespace sbx {
using nlohmann::json;

namespace {

constexpr const char* kStage = "seccomp";
constexpr std::uint32_t kNativeArch = SCMP_ARCH_X86_64;
// Bumped whenever the cached artefact's meaning changes (cache key input).
// 3: meta carries program_sha256 and a MAC; 4: syscalls newer than the policy answer ENOSYS.
constexpr const char* kCacheFormat = "sbx-seccomp-bpf/4";
// TRACE data with this bit set carries an errno (see compile_seccomp_policy); policies' own TRACE
// values are errnoRet values, at most 4095.
constexpr std::uint32_t kErrnoTag = 0x8000;

struct NamedErrno {
  const char* name;
  int value;
};
// The errno names a policy is likely to use in comments and that the trace prints.
constexpr NamedErrno kErrnoNames[] = {{"EPERM", EPERM},   {"ENOENT", ENOENT}, {"EACCES", EACCES},
                                      {"EINVAL", EINVAL}, {"ENOSYS", ENOSYS}, {"EOPNOTSUPP", EOPNOTSUPP},
                                      {"ENOTTY", ENOTTY}, {"EAGAIN", EAGAIN}, {"EBADF", EBADF},
                                      {"ENOMEM", ENOMEM}, {"EFAULT", EFAULT}, {"EROFS", EROFS}};

std::string errno_text(int e) {
  for (auto& n : kErrnoNames)
    if (n.value == e) return n.name;
  return std::to_string(e);
}

// The errno an action returns: the OCI number (`num_key`: errnoRet, defaultErrnoRet) and/or the
// name Podman's files give beside it (`name_key`: errno, defaultErrno, e.g. "ENOSYS"); when both
// are present they must agree. Names are glibc's (strerrorname_np), so every E* constant works.
Result<std::optional<std::uint64_t>> errno_member(DocReader& rd, const char* num_key, const char* name_key) {
  std::optional<std::uint64_t> num, named;
  if (rd.has(num_key)) {
    std::uint64_t e = 0;
    SBX_TRY(rd.get_u64(num_key, e));
    if (e > 4095) return rd.fail_key(num_key, "must be an errno value (0-4095)");
    num = e;
  }
  if (rd.has(name_key)) {
    const json& n = rd.at(name_key);
    if (!n.is_string()) return rd.fail_key(name_key, "must be an errno name such as \"EPERM\"");
    static constexpr NamedErrno kAliases[] = {
        {"EWOULDBLOCK", EWOULDBLOCK}, {"EDEADLOCK", EDEADLOCK}, {"ENOTSUP", ENOTSUP}};
    for (auto& a : kAliases)
      if (n.get<std::string>() == a.name) named = static_cast<std::uint64_t>(a.value);
    for (int e = 1; e < 4096 && !named; ++e) {
      const char* known = ::strerrorname_np(e);
      if (known && n.get<std::string>() == known) named = static_cast<std::uint64_t>(e);
    }
    if (!named) return rd.fail_key(name_key, "unknown errno name '" + n.get<std::string>() + "'");
    if (num && *num != *named)
      return rd.fail_key(name_key, "'" + n.get<std::string>() + "' is " + std::to_string(*named) + " but " + num_key +
                                       " says " + std::to_string(*num));
  }
  return num ? num : named;
}

// "SCMP_ACT_ERRNO" + errnoRet -> libseccomp action value.
Result<std::uint32_t> parse_action(DocReader& rd, const char* key, std::optional<std::uint64_t> errno_ret,
                                   std::string& text) {
  const json& v = rd.at(key);
  if (!v.is_string()) return rd.fail_key(key, "must be a string (SCMP_ACT_...)");
  std::string a = v.get<std::string>();
  int e = errno_ret ? static_cast<int>(*errno_ret) : EPERM;  // OCI: errnoRet defaults to EPERM
  text = a;
  if (a == "SCMP_ACT_ALLOW") return SCMP_ACT_ALLOW;
  if (a == "SCMP_ACT_LOG") return SCMP_ACT_LOG;
  if (a == "SCMP_ACT_KILL" || a == "SCMP_ACT_KILL_THREAD") return SCMP_ACT_KILL_THREAD;
  if (a == "SCMP_ACT_KILL_PROCESS") return SCMP_ACT_KILL_PROCESS;
  if (a == "SCMP_ACT_TRAP") return SCMP_ACT_TRAP;
  if (a == "SCMP_ACT_ERRNO") {
    text = a + "(" + errno_text(e) + ")";
    return SCMP_ACT_ERRNO(static_cast<std::uint32_t>(e));
  }
  if (a == "SCMP_ACT_TRACE") {
    text = a + "(" + std::to_string(e) + ")";
    return SCMP_ACT_TRACE(static_cast<std::uint32_t>(e));
  }
  if (a == "SCMP_ACT_NOTIFY")
    return rd.fail_key(key, "SCMP_ACT_NOTIFY is not supported: sbx's supervisor answers refused system calls itself");
  return rd.fail_key(key, "unknown action '" + a + "'");
}

Result<int> parse_op(DocReader& rd, const char* key) {
  static const std::pair<const char*, int> ops[] = {{"SCMP_CMP_NE", SCMP_CMP_NE},
                                                    {"SCMP_CMP_LT", SCMP_CMP_LT},
                                                    {"SCMP_CMP_LE", SCMP_CMP_LE},
                                                    {"SCMP_CMP_EQ", SCMP_CMP_EQ},
                                                    {"SCMP_CMP_GE", SCMP_CMP_GE},
                                                    {"SCMP_CMP_GT", SCMP_CMP_GT},
                                                    {"SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ}};
  const json& v = rd.at(key);
  if (!v.is_string()) return rd.fail_key(key, "must be a string (SCMP_CMP_...)");
  for (auto& [n, op] : ops)
    if (v.get<std::string>() == n) return op;
  return rd.fail_key(key, "unknown operator '" + v.get<std::string>() + "'");
}

// "SCMP_ARCH_X86_64" / "x86_64" -> token (0 when libseccomp does not know it).
std::uint32_t arch_token(std::string name) {
  if (name.rfind("SCMP_ARCH_", 0) == 0) name = name.substr(10);
  name = ascii_lower(name);
  return seccomp_arch_resolve_name(name.c_str());
}

// Docker/Go architecture names that mean "this machine" in includes/excludes.
bool names_native(const std::vector<std::string>& arches) {
  for (auto& a : arches)
    if (a == "amd64" || a == "x86_64" || a == "SCMP_ARCH_X86_64") return true;
  return false;
}

// Docker's includes/excludes: does this rule apply to this run on this machine? As Docker
// decides it: a rule that includes capabilities applies only when the program keeps every one of
// them (capabilities.keep, --cap-add: caps.hpp), and one that excludes capabilities is dropped
// when the program keeps any of them. Without kept capabilities (the default) no rule that needs
// one applies. `include`: the "includes" member (else "excludes"); false with `why` when the rule
// does not apply.
Result<bool> condition_holds(DocReader& rule, bool include, const std::vector<std::string>& kept_caps,
                             std::string& why) {
  const char* key = include ? "includes" : "excludes";
  rule.ignore(key);
  if (!rule.has(key)) return true;
  DocReader c = rule.member(key);
  SBX_TRY(c.check_object("must be an object"));
  c.known({"arches", "caps", "minKernel"});
  SBX_TRY(c.finish({.name = true}));
  auto no = [&why](std::string reason) {
    why = std::move(reason);
    return false;
  };
  std::vector<std::string> arches, caps;
  SBX_TRY(c.get_strings("arches", arches));
  if (include && !arches.empty() && !names_native(arches)) return no("included only for other architectures");
  if (!include && names_native(arches)) return no("excluded on this architecture");
  SBX_TRY(c.get_strings("caps", caps));
  for (auto& cap : caps) {
    bool kept = std::find(kept_caps.begin(), kept_caps.end(), cap) != kept_caps.end();
    if (include && !kept)
      return no("included only with capability " + cap + (kept_caps.empty() ? " (the run keeps none)" : " (not kept)"));
    if (!include && kept) return no("excluded with capability " + cap + " (kept)");
  }
  if (c.has("minKernel")) {
    if (!c.at("minKernel").is_string()) return c.fail_key("minKernel", "must be a string");
    std::string v = c.at("minKernel").get<std::string>();
    if (include && !kernel_at_least(v)) return no("needs kernel " + v);
    if (!include && kernel_at_least(v)) return no("excluded from kernel " + v);
  }
  return true;
}

Result<bool> rule_applies(DocReader& rule, const std::vector<std::string>& kept_caps, std::string& why) {
  auto inc = condition_holds(rule, true, kept_caps, why);
  if (!inc || !*inc) return inc;
  return condition_holds(rule, false, kept_caps, why);
}

// Architectures: the native one always; the policy may add its sub-architectures (x86, x32).
// Anything not listed is rejected by the filter's bad-arch action (KILL_PROCESS, recorded).
Status read_architectures(DocReader& rd, SeccompPolicy& pol) {
  pol.arches.push_back(kNativeArch);
  std::vector<std::string> arch_names;
  SBX_TRY(rd.get_strings("architectures", arch_names));
  rd.ignore("archMap");
  if (rd.has("archMap")) {
    DocReader am = rd.member("archMap");
    SBX_TRY(am.check_array());
    for (std::size_t i = 0; i < am.value().size(); ++i) {
      DocReader e = am.element(i);
      SBX_TRY(e.check_object("must be an object"));
      e.known({"architecture", "subArchitectures"});
      SBX_TRY(e.finish({.name = true}));
      if (!e.contains("architecture") || !e.at("architecture").is_string())
        return e.fail_key("architecture", "must be a string");
      if (arch_token(e.at("architecture").get<std::string>()) != kNativeArch) continue;
      arch_names.push_back(e.at("architecture").get<std::string>());
      std::vector<std::string> subs;
      SBX_TRY(e.get_strings("subArchitectures", subs));
      arch_names.insert(arch_names.end(), subs.begin(), subs.end());
    }
    pol.notes.push_back("archMap: resolved for x86_64");
  }
  bool native_listed = arch_names.empty();
  for (auto& name : arch_names) {
    std::uint32_t t = arch_token(name);
    if (t == 0) return rd.fail_key("architectures", "unknown architecture '" + name + "'");
    if (t == kNativeArch) native_listed = true;
    else if ((t == SCMP_ARCH_X86 || t == SCMP_ARCH_X32) &&
             std::find(pol.arches.begin(), pol.arches.end(), t) == pol.arches.end())
      pol.arches.push_back(t);
    // Other machines' architectures cannot reach this kernel: nothing to add.
  }
  if (!native_listed)
    return rd.fail_key("architectures", "does not include this machine's architecture (SCMP_ARCH_X86_64)");
  return {};
}

// One argument comparison of a rule ({index, value, valueTwo, op}).
Status read_arg(DocReader& a, SeccompRule& rule) {
  SBX_TRY(a.check_object("must be an object"));
  a.known({"index", "value", "valueTwo", "op"});
  SBX_TRY(a.finish({.name = true}));
  // index and value must be given, and null is not a number here.
  auto required = [&a](const char* key, std::uint64_t& out) -> Status {
    if (!a.contains(key)) return a.fail_key(key, "is required");
    if (a.value().at(key).is_null()) return a.fail_key(key, "must be a non-negative integer");
    return a.get_u64(key, out);
  };
  SeccompArg arg;
  std::uint64_t index = 0;
  SBX_TRY(required("index", index));
  if (index > 5) return a.fail_key("index", "must be 0 to 5");
  arg.index = static_cast<unsigned>(index);
  SBX_TRY(required("value", arg.value));
  SBX_TRY(a.get_u64("valueTwo", arg.value_two));
  if (!a.contains("op")) return a.fail_key("op", "is required");
  auto op = parse_op(a, "op");
  if (!op) return op.error();
  arg.op = *op;
  for (auto& prev : rule.args)
    if (prev.index == arg.index)
      return a.fail_key(
          "index", "argument " + std::to_string(arg.index) +
                       " compared twice in one rule (libseccomp allows one comparison per argument; split the rule)");
  rule.args.push_back(arg);
  return {};
}

// One member of "syscalls", read whole (its pointer kept for later messages).
Status read_rule(DocReader& r, SeccompRule& rule) {
  SBX_TRY(r.check_object("must be an object"));
  r.known({"names", "name", "action", "errnoRet", "errno", "args", "comment", "includes", "excludes"});
  SBX_TRY(r.finish({.name = true}));
  rule.pointer = r.pointer();
  SBX_TRY(r.get_strings("names", rule.names));
  if (r.has("name")) {
    if (!r.at("name").is_string()) return r.fail_key("name", "must be a string");
    rule.names.push_back(r.at("name").get<std::string>());
  }
  if (rule.names.empty()) return r.fail_key("names", "must list at least one system call");
  if (!r.contains("action")) return r.fail_key("action", "is required");
  auto eret = errno_member(r, "errnoRet", "errno");
  if (!eret) return eret.error();
  std::string atext;
  auto act = parse_action(r, "action", *eret, atext);
  if (!act) return act.error();
  rule.action = *act;
  if (r.has("comment") && !r.at("comment").is_string()) return r.fail_key("comment", "must be a string");
  if (r.has("args")) {
    DocReader args = r.member("args");
    SBX_TRY(args.check_array());
    if (args.value().size() > 6) return args.fail("at most 6 comparisons");
    for (std::size_t k = 0; k < args.value().size(); ++k) {
      DocReader a = args.element(k);
      SBX_TRY(read_arg(a, rule));
    }
  }
  return {};
}

// Names libseccomp does not know on any of the filter's architectures: dropped from the rule,
// listed once in pol.unresolved.
void resolve_names(SeccompPolicy& pol, SeccompRule& rule) {
  std::vector<std::string> known;
  for (auto& n : rule.names) {
    bool found = false;
    for (auto a : pol.arches) found = found || seccomp_syscall_resolve_name_arch(a, n.c_str()) != __NR_SCMP_ERROR;
    if (found) known.push_back(n);
    else if (std::find(pol.unresolved.begin(), pol.unresolved.end(), n) == pol.unresolved.end())
      pol.unresolved.push_back(n);
  }
  rule.names = std::move(known);
}

Status read_syscalls(DocReader& rd, SeccompPolicy& pol, const std::vector<std::string>& kept_caps) {
  rd.ignore("syscalls");
  if (!rd.has("syscalls")) return {};
  DocReader sc = rd.member("syscalls");
  SBX_TRY(sc.check_array());
  for (std::size_t i = 0; i < sc.value().size(); ++i) {
    DocReader r = sc.element(i);
    SeccompRule rule;
    SBX_TRY(read_rule(r, rule));
    // Every call the document names counts for what its author knew, a skipped rule's too.
    for (auto& name : rule.names) {
      int nr = seccomp_syscall_resolve_name_arch(kNativeArch, name.c_str());
      if (nr != __NR_SCMP_ERROR && nr >= 0) pol.newest_named = std::max(pol.newest_named, nr);
    }
    std::string why;
    auto applies = rule_applies(r, kept_caps, why);
    if (!applies) return applies.error();
    if (!*applies) {
      pol.notes.push_back(rule.pointer + " (" + rule.names[0] + (rule.names.size() > 1 ? ", ..." : "") +
                          ") skipped: " + why);
      continue;
    }
    resolve_names(pol, rule);
    if (!rule.names.empty()) pol.rules.push_back(std::move(rule));
  }
  return {};
}

// Raw sock_filter array <-> bytes (the cache file format).
Result<std::vector<sock_filter>> read_bpf_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.ok()) return sys_error(kStage, "open " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || st.st_size <= 0 ||
      static_cast<std::size_t>(st.st_size) % sizeof(sock_filter) != 0 ||
      st.st_size > static_cast<off_t>(BPF_MAXINSNS * sizeof(sock_filter)))
    return make_error(kStage, "bad cached program " + path, EINVAL);
  std::vector<sock_filter> prog(static_cast<std::size_t>(st.st_size) / sizeof(sock_filter));
  char* p = reinterpret_cast<char*>(prog.data());
  std::size_t left = static_cast<std::size_t>(st.st_size);
  while (left > 0) {
    ssize_t n = ::read(fd.get(), p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error(kStage, "short read of " + path, EIO);
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return prog;
}

// A cache is not a record: write beside, rename over, no fsync (a torn file fails the checks
// above and is recompiled).
void write_cache(const std::string& dir, const std::string& path, const void* data, std::size_t len) {
  if (!ensure_dir(dir, 0700)) return;
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.ok()) return;
  bool ok = ::write(fd.get(), data, len) == static_cast<ssize_t>(len);
  fd.reset();
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) ::unlink(tmp.c_str());
}

// HMAC-SHA256 (RFC 2104) from the streaming SHA-256 (sha256.hpp).
std::string raw_of_hex(const std::string& hex) {
  std::string raw(hex.size() / 2, '\0');
  auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(nib(hex[2 * i]) << 4 | nib(hex[2 * i + 1]));
  return raw;
}
std::string hmac_sha256_hex(std::string_view key, std::string_view msg) {
  std::string k(64, '\0');
  if (key.size() > 64) k.replace(0, 32, raw_of_hex(sha256_hex(key)));
  else k.replace(0, key.size(), key);
  std::string ipad = k, opad = k;
  for (std::size_t i = 0; i < 64; ++i) {
    ipad[i] = static_cast<char>(ipad[i] ^ 0x36);
    opad[i] = static_cast<char>(opad[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.update(ipad);
  inner.update(msg);
  Sha256 outer;
  outer.update(opad);
  outer.update(raw_of_hex(inner.final_hex()));
  return outer.final_hex();
}
// The bytes a cache entry's MAC covers: its key (policy, versions, capabilities) and its meta
// document without the MAC (the program's sha256 is in it).
std::string cache_mac(std::string_view secret, const std::string& key, json meta) {
  meta.erase("mac");
  return hmac_sha256_hex(secret, "sbx seccomp cache\n" + key + "\n" + meta.dump());
}
bool same_text(const std::string& a, const std::string& b) {  // without an early exit
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}
std::string program_digest(const std::vector<sock_filter>& prog) {
  return sha256_hex(std::string_view(reinterpret_cast<const char*>(prog.data()), prog.size() * sizeof(sock_filter)));
}

std::string libseccomp_version() {
  const scmp_version* v = seccomp_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->micro);
}

}  // namespace

Result<SeccompPolicy> parse_seccomp_policy(std::string_view text, const std::string& source,
                                           const std::vector<std::string>& kept_caps) {
  SeccompPolicy pol;
  pol.source = source;
  // Bounded in size and depth (json_io.hpp), like every document sbx reads.
  auto parsed = parse_json_doc(text, {kMaxPolicyBytes}, kStage, source);
  if (!parsed) return parsed.error();
  json j = std::move(*parsed);
  // Errors: "<source>: <pointer>: <what>", the document itself as "/"; strings may hold any byte
  // (names never reach a C string unchecked: libseccomp resolves them).
  DocSource src{pol.source, kStage, "/", false};
  DocReader rd(j, src);
  SBX_TRY(rd.check_object("must be a JSON object (OCI linux.seccomp)"));
  rd.known({"defaultAction", "defaultErrnoRet", "defaultErrno", "architectures", "archMap", "syscalls", "flags",
            "listenerPath", "listenerMetadata"});
  SBX_TRY(rd.finish({.name = true}));
  if (!rd.contains("defaultAction")) return rd.fail_key("defaultAction", "is required");
  auto default_errno = errno_member(rd, "defaultErrnoRet", "defaultErrno");
  if (!default_errno) return default_errno.error();
  auto da = parse_action(rd, "defaultAction", *default_errno, pol.default_action_text);
  if (!da) return da.error();
  pol.default_action = *da;
  SBX_TRY(read_architectures(rd, pol));
  std::vector<std::string> flags;
  SBX_TRY(rd.get_strings("flags", flags));
  for (auto& fl : flags) pol.notes.push_back("flag " + fl + " ignored (sbx chooses the filter flags)");
  for (auto* k : {"listenerPath", "listenerMetadata"})
    if (rd.contains(k)) pol.notes.push_back(std::string(k) + " ignored (sbx's supervisor is the listener)");
  SBX_TRY(read_syscalls(rd, pol, kept_caps));
  if (int newest = newest_refused_as_enosys(pol); newest >= 0)
    pol.notes.push_back("system calls numbered above " + std::to_string(newest) + " (" +
                        seccomp_syscall_name(AUDIT_ARCH_X86_64, newest) +
                        ", the newest this policy names) are answered ENOSYS, as a kernel without them answers");
  return pol;
}

int newest_refused_as_enosys(const SeccompPolicy& pol) {
  return (pol.default_action & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ERRNO ? pol.newest_named : -1;
}

namespace {
Result<std::vector<sock_filter>> export_filter(scmp_filter_ctx ctx, const std::string& source);

// A system call newer than any the policy names is one its author could not have meant to refuse:
// the policy's errno for it (EPERM) reads as "refused" to the C library, which then fails where it
// would fall back on ENOSYS, what a kernel without the call answers (as glibc does for clone3,
// faccessat2 and fchmodat2 on kernels older than them). So such calls answer ENOSYS, as runc and crun do: in front of the
// program, for native numbers above `newest` (x32 numbers, with bit 30, go on to the arch checks
// that kill them). It is still a refusal: a notification, and a violation in the record.
Result<std::vector<sock_filter>> with_newer_calls_as_enosys(Result<std::vector<sock_filter>> prog,
                                                            const SeccompPolicy& pol) {
  const int newest = newest_refused_as_enosys(pol);
  if (!prog || newest < 0) return prog;
  const sock_filter prefix[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 4),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, static_cast<std::uint32_t>(newest), 0, 2),
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, __X32_SYSCALL_BIT, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
  };
  prog->insert(prog->begin(), std::begin(prefix), std::end(prefix));
  if (prog->size() > BPF_MAXINSNS) return make_error(kStage, pol.source + ": the compiled filter is too long", E2BIG);
  return prog;
}
}  // namespace

Result<std::vector<sock_filter>> compile_seccomp_policy(const SeccompPolicy& pol) {
  scmp_filter_ctx ctx = seccomp_init(pol.default_action);
  if (!ctx)
    return make_error(kStage, pol.source + ": libseccomp cannot create a filter with the default action", EINVAL);
  struct Guard {
    scmp_filter_ctx c;
    ~Guard() { seccomp_release(c); }
  } guard{ctx};
  // Foreign ABIs (i386 `int 0x80`, x32) are not in the filter: they hit the bad-arch action.
  seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);  // sbx sets no_new_privs itself
  for (auto a : pol.arches)
    if (a != kNativeArch && seccomp_arch_add(ctx, a) != 0)
      return make_error(kStage, pol.source + ": /architectures: libseccomp cannot add architecture", EINVAL);

  std::size_t added = 0;
  for (auto& rule : pol.rules) {
    std::vector<scmp_arg_cmp> cmps;
    for (auto& a : rule.args) cmps.push_back({a.index, static_cast<scmp_compare>(a.op), a.value, a.value_two});
    for (auto& name : rule.names) {
      int nr = seccomp_syscall_resolve_name(name.c_str());
      if (nr == __NR_SCMP_ERROR) {
        for (auto a : pol.arches)
          if ((nr = seccomp_syscall_resolve_name_arch(a, name.c_str())) != __NR_SCMP_ERROR) break;
      }
      std::uint32_t action = rule.action;
      int rc = seccomp_rule_add_array(ctx, action, nr, static_cast<unsigned>(cmps.size()), cmps.data());
      if (rc == -EACCES && action == pol.default_action) {
        // libseccomp refuses a rule whose action equals the default. Unconditional, it changes
        // nothing; conditional, it matters when other rules of the same syscall allow. The
        // installed program turns every refusal into a notification and the supervisor decodes
        // the reference program's answer (seccomp_answer), so the same answer can travel under a
        // different value: ERRNO(e) as TRACE(kErrnoTag | e), TRACE as ERRNO(ENOSYS) (what an
        // untraced TRACE returns), and KILL_THREAD/KILL_PROCESS both kill the sandbox.
        std::uint32_t act = action & SECCOMP_RET_ACTION_FULL;
        if (act == SCMP_ACT_ERRNO(0)) action = SCMP_ACT_TRACE(kErrnoTag | (action & 0xfff));
        else if (act == SCMP_ACT_TRACE(0)) action = SCMP_ACT_ERRNO(ENOSYS);
        else if (action == SCMP_ACT_KILL_PROCESS) action = SCMP_ACT_KILL_THREAD;
        else if (action == SCMP_ACT_KILL_THREAD) action = SCMP_ACT_KILL_PROCESS;
        else continue;  // ALLOW/LOG on an allow-by-default policy: nothing to add
        if (cmps.empty()) continue;
        rc = seccomp_rule_add_array(ctx, action, nr, static_cast<unsigned>(cmps.size()), cmps.data());
      }
      if (rc != 0)
        return make_error(kStage,
                          pol.source + ": " + rule.pointer + ": libseccomp rejected the rule for '" + name + "'", -rc);
      ++added;
    }
  }
  // A binary tree over the syscall numbers instead of libseccomp's default linear list. Loading
  // a filter costs the kernel a walk of it per syscall number (seccomp_cache_prepare emulates the
  // program for each number, to find those it always allows) besides the JIT: on this project's
  // machine the default policy's 336-instruction list took ~470 us to install, the tree (411
  // instructions) ~150 us, paid by every run just before its program's execve (bench/README.md,
  // the warm pool). A call the program makes also walks ~log2 of the rules instead of all of
  // them. Only with rules enough to matter (runc's threshold): libseccomp before 2.5.4 ignores the
  // default action of a tree without rules (libseccomp#370). A tree is ~25% longer: one past the
  // kernel's length limit falls back to the list.
  if (added >= 8) {
    if (int rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2); rc != 0)
      return make_error(kStage, pol.source + ": libseccomp cannot build a binary-tree filter", -rc);
    auto tree = with_newer_calls_as_enosys(export_filter(ctx, pol.source), pol);
    if (tree || tree.error().err != E2BIG) return tree;
    if (int rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 1); rc != 0)
      return make_error(kStage, pol.source + ": libseccomp cannot build a linear filter", -rc);
  }
  return with_newer_calls_as_enosys(export_filter(ctx, pol.source), pol);
}

namespace {
// The compiled program, read back from libseccomp's export (refused past the kernel's limit).
Result<std::vector<sock_filter>> export_filter(scmp_filter_ctx ctx, const std::string& source) {
  UniqueFd fd(static_cast<int>(::syscall(SYS_memfd_create, "sbx-seccomp", MFD_CLOEXEC)));
  if (!fd.ok()) return sys_error(kStage, "memfd_create");
  if (int rc = seccomp_export_bpf(ctx, fd.get()); rc != 0)
    return make_error(kStage, source + ": libseccomp could not export the filter", -rc);
  off_t len = ::lseek(fd.get(), 0, SEEK_END);
  if (len <= 0 || len % static_cast<off_t>(sizeof(sock_filter)) != 0)
    return make_error(kStage, source + ": libseccomp exported a malformed filter", EINVAL);
  std::vector<sock_filter> prog(static_cast<std::size_t>(len) / sizeof(sock_filter));
  ssize_t n = ::pread(fd.get(), prog.data(), static_cast<std::size_t>(len), 0);
  if (n != len) return make_error(kStage, "read back the compiled filter", EIO);
  if (prog.size() > BPF_MAXINSNS) return make_error(kStage, source + ": the compiled filter is too long", E2BIG);
  return prog;
}
}  // namespace

namespace {
// The names of the policy's non-allow rules, sorted and unique (a cache entry written before this
// list existed has no "named" member and is treated as a miss).
std::vector<std::string> refused_names(const SeccompPolicy& pol) {
  std::vector<std::string> v;
  for (auto& r : pol.rules)
    if (r.action != SCMP_ACT_ALLOW)
      for (auto& n : r.names) v.push_back(n);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}
}  // namespace

namespace {
// Kept capabilities decide which includes/excludes rules apply, so they are part of what was
// compiled; without any the key is as it was before capabilities counted (the cache stays warm).
std::string kept_caps_key(std::vector<std::string> caps) {
  if (caps.empty()) return "";
  std::sort(caps.begin(), caps.end());
  std::string k = "\ncaps";
  for (auto& c : caps) k += " " + c;
  return k;
}
// The cache's entry for `key` (<key>.bpf and <key>.meta.json) into p, when it is there and
// authentic; a tampered one is noted in p and ignored. True on a hit.
bool take_cached_program(PreparedSeccomp& p, const std::string& bpf_path, const std::string& meta_path,
                         const std::string& key, std::string_view cache_secret) {
  auto meta_text = read_file(meta_path);
  auto prog = meta_text ? read_bpf_file(bpf_path) : Result<std::vector<sock_filter>>(make_error(kStage, "miss"));
  if (meta_text && prog) {
    json m = parse_json(*meta_text, {kMaxPolicyBytes}).value;  // null when refused: a miss
    bool shaped = m.is_object() && m.value("default_action", json()).is_string() &&
                  m.value("unresolved", json()).is_array() && m.value("notes", json()).is_array() &&
                  m.value("named", json()).is_array() && m.value("program_sha256", json()).is_string() &&
                  m.value("mac", json()).is_string();
    // Trusted only when the MAC (keyed by a secret the store's writers do not hold) covers the
    // meta document and the program's bytes hash to the digest it names.
    bool authentic = shaped && same_text(m["mac"].get<std::string>(), cache_mac(cache_secret, key, m)) &&
                     same_text(m["program_sha256"].get<std::string>(), program_digest(*prog));
    if (meta_text && !authentic)
      p.notes.push_back("the cached program " + bpf_path +
                        " failed its integrity check (MAC): not used; compiled again");
    if (authentic) {
      p.default_action = m["default_action"].get<std::string>();
      for (auto& n : m["named"])
        if (n.is_string()) p.named.push_back(n.get<std::string>());
      for (auto& n : m["unresolved"])
        if (n.is_string()) p.unresolved.push_back(n.get<std::string>());
      for (auto& n : m["notes"])
        if (n.is_string()) p.notes.push_back(n.get<std::string>());
      p.reference = std::move(*prog);
      p.program_sha256 = m["program_sha256"].get<std::string>();
      p.cached = true;
      return true;
    }
  }
  return false;
}
}  // namespace

std::string template_seccomp_policy_text() {
  // The calls the template's driver makes for each call it forks (runtime/model/warm_template.py):
  // a mount namespace and the call's mounts, the call's network, ipc, uts, pid and cgroup
  // namespaces, its hostname, and a return to the template's own pid namespace for its next fork
  // (setns with CLONE_NEWPID only: the kernel refuses any but the caller's own or a descendant).
  // Never CLONE_NEWUSER: the calls share the template's user namespace, in which they hold no
  // capability (pid 1 drops them all before the call's code).
  static const std::set<std::string> kLifted = {"mount", "unshare", "setns", "sethostname"};
  json pol = json::parse(default_seccomp_policy_text());
  json rules = json::array();
  for (auto& rule : pol["syscalls"]) {
    if (rule.value("action", "") != "SCMP_ACT_ALLOW") {
      json names = json::array();
      for (auto& n : rule["names"])
        if (!kLifted.count(n.get<std::string>())) names.push_back(n);
      if (names.empty()) continue;
      rule["names"] = names;
    }
    rules.push_back(rule);
  }
  rules.push_back({{"names", {"sethostname"}},
                   {"action", "SCMP_ACT_ALLOW"},
                   {"comment", "a template's driver: the hostname of each call it forks"}});
  // The mounts the driver makes, and no way to a writable view of a read-only mount. The template
  // holds CAP_SYS_ADMIN in its user namespace, which owns its mount namespace, and runs its
  // preloads' code; the profile's read-only binds (rootless, the caller's own files) must stay
  // read-only for it. So: new mounts (tmpfs, proc, devpts, propagation changes) and recursive
  // binds, which copy each read-only mount below with its flags; never a bind that leaves out
  // the mounts below its source (a read-write bind's directory under a read-only one), a move
  // (of a read-only mount off what it covers), an unmount (likewise), or a remount that does not
  // keep its target read-only, nosuid and nodev. The new mount API stays refused.
  const std::uint64_t kShape = MS_REMOUNT | MS_BIND | MS_REC | MS_MOVE;
  for (std::uint64_t shape : {std::uint64_t{0}, std::uint64_t{MS_REC}, std::uint64_t{MS_BIND | MS_REC}})
    rules.push_back({{"names", {"mount"}},
                     {"action", "SCMP_ACT_ALLOW"},
                     {"args", {{{"index", 3}, {"value", kShape}, {"valueTwo", shape}, {"op", "SCMP_CMP_MASKED_EQ"}}}},
                     {"comment", "a template's driver: a call's new mounts and recursive binds"}});
  const std::uint64_t kKept = MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV;
  rules.push_back({{"names", {"mount"}},
                   {"action", "SCMP_ACT_ALLOW"},
                   {"args", {{{"index", 3}, {"value", kKept}, {"valueTwo", kKept}, {"op", "SCMP_CMP_MASKED_EQ"}}}},
                   {"comment", "a template's driver: remounts that make a call's mounts read-only"}});
  rules.push_back({{"names", {"unshare"}},
                   {"action", "SCMP_ACT_ALLOW"},
                   {"args", {{{"index", 0}, {"value", CLONE_NEWUSER}, {"valueTwo", 0}, {"op", "SCMP_CMP_MASKED_EQ"}}}},
                   {"comment", "a template's driver: every namespace of a call but a user namespace"}});
  rules.push_back({{"names", {"setns"}},
                   {"action", "SCMP_ACT_ALLOW"},
                   {"args", {{{"index", 1}, {"value", CLONE_NEWPID}, {"op", "SCMP_CMP_EQ"}}}},
                   {"comment", "a template's driver: back to its own pid namespace after each call's fork"}});
  pol["syscalls"] = rules;
  return pol.dump(2);
}

Result<PreparedSeccomp> prepare_seccomp(const std::string& which, const std::string& cache_dir_in,
                                        const std::vector<std::string>& kept_caps, std::string_view cache_secret) {
  // No secret, no cache: an entry nobody can vouch for is worth nothing (seccomp_policy.hpp).
  const std::string cache_dir = cache_secret.empty() ? std::string() : cache_dir_in;
  PreparedSeccomp p;
  std::int64_t t0 = monotonic_us();
  p.profile = which;
  if (which == "unconfined") {
    p.enabled = false;
    p.default_action = "SCMP_ACT_ALLOW";
    return p;
  }
  std::string text;
  if (which == "default") {
    text = std::string(default_seccomp_policy_text());
  } else if (which == kTemplateSeccomp) {
    text = template_seccomp_policy_text();
  } else {
    auto t = read_bounded(which, kMaxPolicyBytes, kStage, "seccomp policy " + which);
    if (!t) return t.error();
    text = std::move(*t);
  }
  p.enabled = true;
  p.sha256 = which == "default" ? std::string(default_seccomp_policy_sha256()) : sha256_hex(text);

  // Cache: <key>.bpf (the reference program, raw sock_filter array) and <key>.meta.json (what the
  // trace needs from the parse). A hit skips parsing and compiling: the same text compiled before
  // under the same libseccomp, sbx and kernel, so it was valid then and compiles the same now.
  std::string bpf_path, meta_path, key;
  if (!cache_dir.empty()) {
    struct utsname u;
    std::string release = ::uname(&u) == 0 ? u.release : "";
    key = sha256_hex(p.sha256 + "\n" + seccomp_arch_name(AUDIT_ARCH_X86_64) + "\nlibseccomp " + libseccomp_version() +
                     "\nsbx " SBX_VERSION "\nkernel " + release + "\n" + kCacheFormat + kept_caps_key(kept_caps));
    bpf_path = cache_dir + "/" + key + ".bpf";
    meta_path = cache_dir + "/" + key + ".meta.json";
    if (take_cached_program(p, bpf_path, meta_path, key, cache_secret)) {
      p.setup_us = monotonic_us() - t0;
      return p;
    }
  }
  auto pol = parse_seccomp_policy(text, which, kept_caps);
  if (!pol) return pol.error();
  p.default_action = pol->default_action_text;
  p.unresolved = pol->unresolved;
  p.notes.insert(p.notes.end(), pol->notes.begin(), pol->notes.end());
  p.named = refused_names(*pol);
  auto prog = compile_seccomp_policy(*pol);
  if (!prog) return prog.error();
  p.reference = std::move(*prog);
  p.program_sha256 = program_digest(p.reference);
  if (!cache_dir.empty()) {
    json m = {{"default_action", p.default_action},
              {"unresolved", p.unresolved},
              {"notes", pol->notes},
              {"named", p.named},
              {"program_sha256", p.program_sha256}};
    m["mac"] = cache_mac(cache_secret, key, m);
    std::string mt = m.dump();
    write_cache(cache_dir, meta_path, mt.data(), mt.size());
    write_cache(cache_dir, bpf_path, p.reference.data(), p.reference.size() * sizeof(sock_filter));
  }
  p.setup_us = monotonic_us() - t0;
  return p;
}

std::vector<sock_filter> notify_program(const std::vector<sock_filter>& reference) {
  // The policy itself, with no rule added: every refusing return becomes a notification, every
  // allowing one stays. The listener reaches the supervisor through init (init_end.cpp,
  // InitEnd::send_listener), which no filter binds, so the program child needs no exception either.
  std::vector<sock_filter> out;
  out.reserve(reference.size());
  for (sock_filter ins : reference) {
    if (ins.code == (BPF_RET | BPF_K)) {
      std::uint32_t act = ins.k & SECCOMP_RET_ACTION_FULL;
      if (act == SECCOMP_RET_KILL_PROCESS || act == SECCOMP_RET_KILL_THREAD || act == SECCOMP_RET_TRAP ||
          act == SECCOMP_RET_ERRNO || act == SECCOMP_RET_TRACE)
        ins.k = SECCOMP_RET_USER_NOTIF;
    }
    out.push_back(ins);
  }
  return out;
}

bool seccomp_allows(const std::vector<sock_filter>& prog, const struct seccomp_data& data) {
  std::uint32_t act = seccomp_evaluate(prog, data) & SECCOMP_RET_ACTION_FULL;
  return act == SECCOMP_RET_ALLOW || act == SECCOMP_RET_LOG;
}

std::uint32_t seccomp_evaluate(const std::vector<sock_filter>& prog, const struct seccomp_data& data) {
  // The instruction set the kernel accepts for seccomp (seccomp_check_filter).
  std::uint32_t A = 0, X = 0, M[BPF_MEMWORDS] = {};
  const auto* bytes = reinterpret_cast<const unsigned char*>(&data);
  std::size_t pc = 0;
  for (std::size_t steps = 0; pc < prog.size() && steps <= prog.size(); ++steps) {
    const sock_filter& f = prog[pc++];
    std::uint32_t k = f.k;
    switch (f.code) {
      case BPF_LD | BPF_W | BPF_ABS:
        if (k > sizeof data - 4 || (k & 3)) return SECCOMP_RET_KILL_PROCESS;
        std::memcpy(&A, bytes + k, 4);
        break;
      case BPF_LD | BPF_W | BPF_LEN: A = sizeof data; break;
      case BPF_LDX | BPF_W | BPF_LEN: X = sizeof data; break;
      case BPF_LD | BPF_IMM: A = k; break;
      case BPF_LDX | BPF_IMM: X = k; break;
      case BPF_LD | BPF_MEM:
        if (k >= BPF_MEMWORDS) return SECCOMP_RET_KILL_PROCESS;
        A = M[k];
        break;
      case BPF_LDX | BPF_MEM:
        if (k >= BPF_MEMWORDS) return SECCOMP_RET_KILL_PROCESS;
        X = M[k];
        break;
      case BPF_ST:
        if (k >= BPF_MEMWORDS) return SECCOMP_RET_KILL_PROCESS;
        M[k] = A;
        break;
      case BPF_STX:
        if (k >= BPF_MEMWORDS) return SECCOMP_RET_KILL_PROCESS;
        M[k] = X;
        break;
      case BPF_MISC | BPF_TAX: X = A; break;
      case BPF_MISC | BPF_TXA: A = X; break;
      case BPF_ALU | BPF_ADD | BPF_K: A += k; break;
      case BPF_ALU | BPF_ADD | BPF_X: A += X; break;
      case BPF_ALU | BPF_SUB | BPF_K: A -= k; break;
      case BPF_ALU | BPF_SUB | BPF_X: A -= X; break;
      case BPF_ALU | BPF_MUL | BPF_K: A *= k; break;
      case BPF_ALU | BPF_MUL | BPF_X: A *= X; break;
      case BPF_ALU | BPF_DIV | BPF_K:
        if (!k) return SECCOMP_RET_KILL_PROCESS;
        A /= k;
        break;
      case BPF_ALU | BPF_DIV | BPF_X:
        if (!X) return 0;
        A /= X;
        break;
      case BPF_ALU | BPF_AND | BPF_K: A &= k; break;
      case BPF_ALU | BPF_AND | BPF_X: A &= X; break;
      case BPF_ALU | BPF_OR | BPF_K: A |= k; break;
      case BPF_ALU | BPF_OR | BPF_X: A |= X; break;
      case BPF_ALU | BPF_XOR | BPF_K: A ^= k; break;
      case BPF_ALU | BPF_XOR | BPF_X: A ^= X; break;
      case BPF_ALU | BPF_LSH | BPF_K: A = k < 32 ? A << k : 0; break;
      case BPF_ALU | BPF_LSH | BPF_X: A = X < 32 ? A << X : 0; break;
      case BPF_ALU | BPF_RSH | BPF_K: A = k < 32 ? A >> k : 0; break;
      case BPF_ALU | BPF_RSH | BPF_X: A = X < 32 ? A >> X : 0; break;
      case BPF_ALU | BPF_NEG: A = 0u - A; break;
      case BPF_JMP | BPF_JA: pc += k; break;
      case BPF_JMP | BPF_JEQ | BPF_K: pc += A == k ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JEQ | BPF_X: pc += A == X ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JGE | BPF_K: pc += A >= k ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JGE | BPF_X: pc += A >= X ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JGT | BPF_K: pc += A > k ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JGT | BPF_X: pc += A > X ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JSET | BPF_K: pc += (A & k) ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JSET | BPF_X: pc += (A & X) ? f.jt : f.jf; break;
      case BPF_RET | BPF_K: return k;
      case BPF_RET | BPF_A: return A;
      default: return SECCOMP_RET_KILL_PROCESS;
    }
  }
  return SECCOMP_RET_KILL_PROCESS;  // ran off the end (the kernel's checker forbids it)
}

std::string seccomp_arch_name(std::uint32_t arch) {
  switch (arch) {
    case AUDIT_ARCH_X86_64: return "x86_64";
    case AUDIT_ARCH_I386: return "x86";
    default: {
      char buf[16];
      std::snprintf(buf, sizeof buf, "0x%08x", arch);
      return buf;
    }
  }
}

std::string seccomp_syscall_name(std::uint32_t arch, int nr) {
  std::uint32_t token = arch;
  int n = nr;
  if (is_x32_syscall(arch, nr)) { token = SCMP_ARCH_X32; }
  char* name = seccomp_syscall_resolve_num_arch(token, n);
  std::string out = name ? std::string(name) : "#" + std::to_string(nr);
  std::free(name);
  return out;
}

SeccompAnswer seccomp_answer(std::uint32_t ret) {
  std::uint32_t act = ret & SECCOMP_RET_ACTION_FULL;
  std::uint32_t data = ret & SECCOMP_RET_DATA;
  switch (act) {
    case SECCOMP_RET_ALLOW:
    case SECCOMP_RET_LOG: return {SeccompAnswer::kAllow, 0};
    case SECCOMP_RET_ERRNO: return {SeccompAnswer::kErrno, static_cast<int>(data > 4095 ? 4095 : data)};
    case SECCOMP_RET_TRACE:  // no tracer: the kernel answers ENOSYS
      return {SeccompAnswer::kErrno, (data & kErrnoTag) ? static_cast<int>(data & 0xfff) : ENOSYS};
    default:  // KILL_PROCESS, KILL_THREAD, TRAP, and anything unknown
      return {SeccompAnswer::kKill, 0};
  }
}

std::string seccomp_action_text(std::uint32_t action) {
  std::uint32_t act = action & SECCOMP_RET_ACTION_FULL;
  std::uint32_t data = action & SECCOMP_RET_DATA;
  if (act == SECCOMP_RET_TRACE && (data & kErrnoTag)) {
    act = SECCOMP_RET_ERRNO;
    data &= 0xfff;
  }
  switch (act) {
    case SECCOMP_RET_KILL_PROCESS: return "SCMP_ACT_KILL_PROCESS";
    case SECCOMP_RET_KILL_THREAD: return "SCMP_ACT_KILL_THREAD";
    case SECCOMP_RET_TRAP: return "SCMP_ACT_TRAP";
    case SECCOMP_RET_ERRNO: return "SCMP_ACT_ERRNO(" + errno_text(static_cast<int>(data)) + ")";
    case SECCOMP_RET_TRACE: return "SCMP_ACT_TRACE";
    case SECCOMP_RET_LOG: return "SCMP_ACT_LOG";
    case SECCOMP_RET_ALLOW: return "SCMP_ACT_ALLOW";
    case SECCOMP_RET_USER_NOTIF: return "SCMP_ACT_NOTIFY";
  }
  return "unknown";
}

json seccomp_enforcement_json(const PreparedSeccomp& p) {
  if (!p.enabled)
    return trace_object({{"enforcement/seccomp/profile", "unconfined"},
                         {"enforcement/seccomp/sha256", nullptr},
                         {"enforcement/seccomp/unresolved", json::array()},
                         {"enforcement/seccomp/mode", "unconfined"},
                         {"enforcement/seccomp/default_action", "SCMP_ACT_ALLOW"},
                         {"enforcement/seccomp/cached", false},
                         {"enforcement/seccomp/setup_us", 0},
                         {"enforcement/seccomp/notes", json::array()},
                         {"enforcement/seccomp/note",
                          "UNCONFINED: no seccomp filter; the program may use every system call the kernel offers"}});
  return trace_object(
      {{"enforcement/seccomp/profile", p.profile},
       {"enforcement/seccomp/sha256", p.sha256},
       {"enforcement/seccomp/unresolved", p.unresolved},
       {"enforcement/seccomp/mode", "filter"},
       {"enforcement/seccomp/default_action", p.default_action},
       {"enforcement/seccomp/cached", p.cached},
       {"enforcement/seccomp/program_sha256", p.program_sha256},
       {"enforcement/seccomp/setup_us", p.setup_us},
       {"enforcement/seccomp/notes", p.notes},
       {"enforcement/seccomp/note",
        "installed last before execve; refused calls answered by the supervisor (SECCOMP_RET_USER_NOTIF) and listed in "
        "violations; foreign ABIs (i386, x32) kill the sandbox unless the policy lists them"}});
}

}  // namespace sbx
