#include "runtime/caps.hpp"

#include <linux/securebits.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace sbx {

Status lock_securebits() {
  unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                       SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                       SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) return sys_error("capabilities", "lock securebits");
  return {};
}

// Direct system calls rather than libcap-ng: this runs in the program child, which shares init's
// memory — with a shared init, the supervisor's (clone.hpp) — and libcap-ng keeps its state in
// a process-wide structure that the child would rewrite for the supervisor too.
Status drop_all_capabilities() {
  // The bounding set first: dropping from it needs CAP_SETPCAP, which the capset below removes.
  // EINVAL marks the first number past the kernel's last capability.
  for (int cap = 0;; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0) continue;
    if (errno == EINVAL && cap > 0) break;
    return sys_error("capabilities", "drop capability " + std::to_string(cap) + " from the bounding set");
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
    return sys_error("capabilities", "clear ambient capabilities");
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct none[2] = {};
  if (::syscall(SYS_capset, &hdr, none) != 0)
    return sys_error("capabilities", "clear effective, permitted and inheritable capabilities");
  // Verify rather than trust: the program must start with nothing.
  struct __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &hdr, data) != 0) return sys_error("capabilities", "capget");
  for (auto& d : data)
    if (d.effective || d.permitted || d.inheritable)
      return make_error("capabilities", "capabilities still present after drop", EPERM);
  if (::prctl(PR_CAPBSET_READ, 0, 0, 0, 0) != 0)
    return make_error("capabilities", "the bounding set still holds capabilities after drop", EPERM);
  return {};
}

std::vector<std::string> kept_capabilities() { return {}; }

}  // namespace sbx
