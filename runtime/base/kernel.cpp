#include "runtime/base/kernel.hpp"

#include <sys/utsname.h>

#include <cstdio>

namespace sbx {

bool kernel_at_least(const std::string& want) {
  struct utsname u;
  if (::uname(&u) != 0) return true;
  int a = 0, b = 0, x = 0, y = 0;
  std::sscanf(want.c_str(), "%d.%d", &a, &b);
  std::sscanf(u.release, "%d.%d", &x, &y);
  return x > a || (x == a && y >= b);
}

}  // namespace sbx
