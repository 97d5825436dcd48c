#include "runtime/base/sanitizer_stack.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SBX_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SBX_ASAN 1
#endif

#ifdef SBX_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace sbx {

void SanitizerExtraStack::begin(const void* bottom, std::size_t size) {
#ifdef SBX_ASAN
  __sanitizer_start_switch_fiber(&fake_stack_, bottom, size);
  bottom_ = bottom;
  size_ = size;
  active_ = true;
#else
  (void)bottom;
  (void)size;
#endif
}

void SanitizerExtraStack::end() {
  if (!active_) return;
  active_ = false;
#ifdef SBX_ASAN
  // The interface has no "cancel": finishing the switch makes the declared stack the thread's
  // own (and hands back the real one), and a second switch, started and finished right away,
  // makes the real one the thread's own again. Only this thread runs meanwhile.
  const void* own_bottom = nullptr;
  std::size_t own_size = 0;
  __sanitizer_finish_switch_fiber(fake_stack_, &own_bottom, &own_size);
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, own_bottom, own_size);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
  // The child's frames left their redzones poisoned in the stack's shadow; the memory is freed
  // or reused next, and stale poison there would be reported as an error in whatever comes.
  __asan_unpoison_memory_region(bottom_, size_);
#endif
}

}  // namespace sbx
