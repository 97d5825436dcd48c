// The bytes of a string as unsigned values. `char` is signed on the machines sbx builds for, and
// code that looks at each byte's value (escaping, hex, name checks) reads them through this view
// instead of converting one char at a time (which -Wsign-conversion, CMakeLists.txt, flags).
#pragma once

#include <span>
#include <string_view>

namespace sbx {

inline std::span<const unsigned char> bytes_of(std::string_view s) noexcept {
  return {reinterpret_cast<const unsigned char*>(s.data()), s.size()};
}

}  // namespace sbx
