// The D-Bus message parser of runtime/base/dbus_wire.cpp, which reads what a user manager (or
// anything listening on its socket) sends back. Input: a byte stream; messages are parsed off
// its front until one is incomplete or malformed. Checked besides "no crash": a parsed message
// never claims more bytes than it was given, nor more than the bound, and a reply's first string
// is within its body.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "runtime/base/dbus_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i < 64 && !in.empty(); ++i) {
    sbx::dbus::Message m;
    auto used = sbx::dbus::parse_message(in, m);
    if (!used || *used == 0) break;
    if (*used > in.size() || *used > sbx::dbus::kMaxMessage || m.body.size() > *used) std::abort();
    if (sbx::dbus::first_string(m).size() > m.body.size()) std::abort();
    in.remove_prefix(*used);
  }
  return 0;
}
