#pragma once
// AddressSanitizer and stacks it did not allocate.
//
// ASan keeps one stack range per thread, and before every call of a noreturn function (exit,
// _exit, a [[noreturn]] helper, a throw) it clears the shadow from the current stack pointer to
// that range's top. sbx runs code on stacks ASan never saw: a shared init (clone.hpp) and the
// program child (child.cpp, spawn_program) are clone(2) children with CLONE_VM on a stack of
// their own. Without CLONE_SETTLS they also share the supervisor's (or init's) thread pointer, so
// ASan takes them for the very same thread and finds the stack pointer far outside its stack:
// "WARNING: ASan is ignoring requested __asan_handle_no_return" on stderr (three lines, once per
// process), or, were the two ranges closer, a wrong range cleared.
//
// The fix uses ASan's fiber interface (sanitizer/common_interface_defs.h): between
// __sanitizer_start_switch_fiber(bottom, size) and __sanitizer_finish_switch_fiber, ASan takes a
// stack pointer inside [bottom, bottom + size) as running on that stack and any other as running
// on the thread's own. A clone child that shares our memory only reads this state, so declaring
// its stack before clone and withdrawing the declaration once the child is gone is exact for
// both, without the child writing anything the parent reads. In builds without ASan all of this
// compiles to nothing.
#include <cstddef>

namespace sbx {

class SanitizerExtraStack {
 public:
  SanitizerExtraStack() = default;
  SanitizerExtraStack(const SanitizerExtraStack&) = delete;
  SanitizerExtraStack& operator=(const SanitizerExtraStack&) = delete;
  ~SanitizerExtraStack() { end(); }
  // Declares [bottom, bottom + size) a second stack of the calling thread. One at a time per
  // thread; call from the thread (and process) that will clone the child.
  void begin(const void* bottom, std::size_t size);
  // Withdraws it, and clears what the child's frames left in its shadow: only once no code runs
  // on that stack any more (the child exec'd, exited or was never created). Makes no system
  // call and leaves errno alone.
  void end();

 private:
  void* fake_stack_ = nullptr;
  const void* bottom_ = nullptr;
  std::size_t size_ = 0;
  bool active_ = false;
};

}  // namespace sbx
