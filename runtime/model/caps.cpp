#include "runtime/model/caps.hpp"

#include <cap-ng.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/base/raw_syscall.hpp"
#include "runtime/base/trace_field.hpp"
#include "runtime/base/suggest.hpp"

namespace sbx {

namespace {

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The capabilities libcap-ng knows, canonical names (for did-you-mean).
std::vector<std::string> known_names() {
  std::vector<std::string> out;
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) out.push_back(capability_name(cap));
  return out;
}

}  // namespace

std::optional<int> capability_number(const std::string& name) {
  std::string bare = name;
  if (bare.size() > 4 && upper(bare.substr(0, 4)) == "CAP_") bare = bare.substr(4);
  // libcap-ng's table holds the bare lower-case names and compares without case; a name of
  // anything but letters, digits and '_' is not one of them (and is not shown to it).
  if (bare.empty() || bare.size() > 64 || !std::all_of(bare.begin(), bare.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      }))
    return std::nullopt;
  int n = capng_name_to_capability(bare.c_str());
  if (n < 0 || n > 63) return std::nullopt;
  return n;
}

std::string capability_name(int cap) {
  const char* n = cap >= 0 && cap <= CAP_LAST_CAP ? capng_capability_to_name(static_cast<unsigned>(cap)) : nullptr;
  return n ? "CAP_" + upper(n) : "CAP_" + std::to_string(cap);
}

Result<std::string> canonical_capability(const std::string& name) {
  if (auto n = capability_number(name)) return capability_name(*n);
  std::string guess = upper(name);
  if (!guess.starts_with("CAP_")) guess = "CAP_" + guess;
  std::string hint = closest_word(guess, known_names());
  return make_error("capabilities", "'" + name + "' is not a capability" +
                                        (hint.empty() ? " (names like CAP_CHOWN or chown; see capabilities(7))"
                                                      : " (did you mean '" + hint + "'?)"));
}

CapMask capability_mask(const std::vector<std::string>& canonical) {
  CapMask m = 0;
  for (auto& n : canonical)
    if (auto c = capability_number(n)) m |= CapMask{1} << *c;
  return m;
}

std::vector<std::string> capability_names(CapMask mask) {
  std::vector<std::string> out;
  for (int cap = 0; cap < 64; ++cap)
    if (mask & (CapMask{1} << cap)) out.push_back(capability_name(cap));
  return out;
}

Status lock_securebits() {
  // SECBIT_NO_CAP_AMBIENT_RAISE comes later (restrict_capabilities): the kept set is raised into
  // the ambient set first, which that bit forbids.
  unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
                       SECBIT_KEEP_CAPS_LOCKED;
  if (::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) return sys_error("capabilities", "lock securebits");
  return {};
}

namespace {

bool kept(CapMask keep, int cap) { return cap < 64 && (keep & (CapMask{1} << cap)); }

Status set_caps(CapMask effective, CapMask permitted, CapMask inheritable) {
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2] = {};
  for (int i = 0; i < 2; ++i) {
    d[i].effective = static_cast<std::uint32_t>(effective >> (32 * i));
    d[i].permitted = static_cast<std::uint32_t>(permitted >> (32 * i));
    d[i].inheritable = static_cast<std::uint32_t>(inheritable >> (32 * i));
  }
  if (::syscall(SYS_capset, &hdr, d) != 0) return sys_error("capabilities", "set the capability sets");
  return {};
}

// Verify rather than trust: the program must start with exactly `keep`, in every set.
Status verify(CapMask keep, int last) {
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2] = {};
  if (::syscall(SYS_capget, &hdr, d) != 0) return sys_error("capabilities", "capget");
  for (int i = 0; i < 2; ++i) {
    auto want = static_cast<std::uint32_t>(keep >> (32 * i));
    if (d[i].effective != want || d[i].permitted != want || d[i].inheritable != want)
      return make_error("capabilities", "capability sets differ from the kept set after the drop", EPERM);
  }
  for (int cap = 0; cap <= last; ++cap) {
    bool want = kept(keep, cap);
    if ((::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1) != want ||
        (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) == 1) != want)
      return make_error("capabilities", "the bounding or ambient set differs from the kept set after the drop", EPERM);
  }
  return {};
}

}  // namespace

// Direct system calls rather than libcap-ng: this runs in the program child, which shares init's
// memory — with a shared init, the supervisor's (clone.hpp) — and libcap-ng keeps its state in
// a per-thread structure that, with CLONE_VM and no TLS of its own, is the supervisor's too.
//
// Why every set, ambient included: execve recomputes the sets. Under SECBIT_NOROOT uid 0 is no
// special case, and for a file without capabilities P' = E' = ambient, I' = I (capabilities(7),
// security/commoncap.c cap_bprm_creds_from_file). So `keep` survives execve for any uid exactly
// when it is the ambient set, which needs it in permitted and inheritable; the bounding set caps
// what a file-capability binary could add (no_new_privs caps it at the old permitted set anyway).
Status restrict_capabilities(CapMask keep) {
  // The bounding set first: dropping from it needs CAP_SETPCAP, which the capset below removes.
  // EINVAL marks the first number past the kernel's last capability.
  int last = -1;
  for (int cap = 0;; ++cap) {
    if (kept(keep, cap)) {
      if (::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0) {
        last = cap;
        continue;
      }
    } else if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0) {
      last = cap;
      continue;
    }
    if (errno == EINVAL && cap > 0) break;
    return sys_error("capabilities", "drop capability " + std::to_string(cap) + " from the bounding set");
  }
  if (last < 63 && keep >> (last + 1))
    return make_error("capabilities",
                      "the kernel has no capability " + capability_names(keep >> (last + 1) << (last + 1))[0], EINVAL);
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
    return sys_error("capabilities", "clear ambient capabilities");
  if (keep) {
    // Inheritable first (permitted still holds everything), then raise each into ambient.
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2] = {};
    if (::syscall(SYS_capget, &hdr, d) != 0) return sys_error("capabilities", "capget");
    CapMask eff = d[0].effective | (CapMask{d[1].effective} << 32);
    CapMask prm = d[0].permitted | (CapMask{d[1].permitted} << 32);
    SBX_TRY(set_caps(eff, prm, keep & prm));
    for (int cap = 0; cap <= last; ++cap)
      if (kept(keep, cap) && ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0)
        return sys_error("capabilities", "keep " + capability_name(cap) + " (ambient set)");
  }
  // Now that the ambient set holds what it should, the program may raise nothing more into it.
  int bits = ::prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
  if (bits < 0 ||
      ::prctl(PR_SET_SECUREBITS,
              static_cast<unsigned long>(bits) | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED, 0, 0,
              0) != 0)
    return sys_error("capabilities", "lock ambient raising");
  SBX_TRY(set_caps(keep, keep, keep));
  return verify(keep, last);
}

namespace {

// "CapEff:\t0000003fffffffff": at most 16 hex digits after the tab.
bool parse_hex(const char* p, const char* end, CapMask& out) {
  while (p < end && (*p == '\t' || *p == ' ')) ++p;
  if (p == end || end - p > 16) return false;
  CapMask m = 0;
  for (; p < end; ++p) {
    int d = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : -1;
    if (d < 0) return false;
    m = (m << 4) | static_cast<CapMask>(d);
  }
  out = m;
  return true;
}

}  // namespace

bool parse_status_caps(const char* text, std::size_t len, ProcessCaps& pc) {
  struct Field {
    const char* key;
    CapMask* out;
    bool seen;
  } fields[] = {{"CapInh:", &pc.inheritable, false},
                {"CapPrm:", &pc.permitted, false},
                {"CapEff:", &pc.effective, false},
                {"CapBnd:", &pc.bounding, false},
                {"CapAmb:", &pc.ambient, false}};
  const char* end = text + len;
  for (const char* line = text; line < end;) {
    const char* eol = line;
    while (eol < end && *eol != '\n') ++eol;
    for (auto& f : fields) {
      std::size_t k = std::char_traits<char>::length(f.key);
      if (static_cast<std::size_t>(eol - line) < k || std::char_traits<char>::compare(line, f.key, k) != 0) continue;
      if (f.seen || !parse_hex(line + k, eol, *f.out)) return false;
      f.seen = true;
    }
    line = eol + 1;
  }
  for (auto& f : fields)
    if (!f.seen) return false;
  return true;
}

bool read_process_caps_raw(pid_t pid, ProcessCaps& out) {
  // "/proc/<pid>/status" built by hand: snprintf may allocate (locale), std::to_string does.
  char path[40] = "/proc/";
  char digits[12];
  int n = 0;
  for (unsigned v = static_cast<unsigned>(pid); n == 0 || v; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  std::size_t at = 6;
  while (n) path[at++] = digits[--n];
  for (const char* s = "/status"; *s;) path[at++] = *s++;
  path[at] = '\0';
  long fd = raw::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // A status file is 1-2 KiB; its Cap lines come well within 8 KiB whatever the kernel adds.
  char buf[8192];
  std::size_t got = 0;
  for (;;) {
    long k = raw::read(static_cast<int>(fd), buf + got, sizeof buf - got);
    if (k == -EINTR) continue;
    if (k <= 0) break;
    got += static_cast<std::size_t>(k);
    if (got == sizeof buf) break;
  }
  raw::close(static_cast<int>(fd));
  return parse_status_caps(buf, got, out);
}

nlohmann::json process_caps_json(const ProcessCaps& pc) {
  return trace_object({{"enforcement/capabilities/program/inheritable", capability_names(pc.inheritable)},
                       {"enforcement/capabilities/program/permitted", capability_names(pc.permitted)},
                       {"enforcement/capabilities/program/effective", capability_names(pc.effective)},
                       {"enforcement/capabilities/program/bounding", capability_names(pc.bounding)},
                       {"enforcement/capabilities/program/ambient", capability_names(pc.ambient)}});
}

}  // namespace sbx
