#include "runtime/caps.hpp"

#include <cap-ng.h>
#include <linux/securebits.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sbx {

Status lock_securebits() {
  unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                       SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                       SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) return sys_error("capabilities", "lock securebits");
  return {};
}

Status drop_all_capabilities() {
  capng_clear(CAPNG_SELECT_ALL);
  if (capng_apply(CAPNG_SELECT_ALL) != 0)
    return make_error("capabilities", "drop all capabilities (bounding, ambient, effective, permitted, inheritable)", EPERM);
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
    return sys_error("capabilities", "clear ambient capabilities");
  // Verify rather than trust: the program must start with nothing. capget(2) directly, because
  // libcap-ng's capng_get_caps_process() parses /proc/self/status (several reads per run).
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &hdr, data) != 0) return sys_error("capabilities", "capget");
  for (auto& d : data)
    if (d.effective || d.permitted || d.inheritable)
      return make_error("capabilities", "capabilities still present after drop", EPERM);
  return {};
}

std::vector<std::string> kept_capabilities() { return {}; }

}  // namespace sbx
