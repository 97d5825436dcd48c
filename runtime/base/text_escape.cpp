#include "runtime/base/text_escape.hpp"

#include <cstdint>
#include <cstdio>

namespace sbx {
namespace {

std::uint32_t decode(std::string_view s, std::size_t i, std::size_t n) {
  auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  if (n == 1) return b(i);
  std::uint32_t cp = b(i) & (0xff >> (n + 1));
  for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (b(i + k) & 0x3f);
  return cp;
}

bool is_format_control(std::uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x61c || (cp >= 0x200b && cp <= 0x200f) ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2069) || cp == 0xfeff;
}

}  // namespace

std::size_t utf8_len(std::string_view s, std::size_t i) {
  auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c < 0xf0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xc0) != 0x80) return 0;
  std::uint32_t cp = decode(s, i, n);
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

bool format_control_at(std::string_view s, std::size_t i, std::size_t n, std::uint32_t* cp) {
  if (n < 2 || i + n > s.size()) return false;
  std::uint32_t c = decode(s, i, n);
  if (cp) *cp = c;
  return is_format_control(c);
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  char buf[12];
  for (std::size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    std::size_t n = utf8_len(s, i);
    if (c == '\n' || c == '\r' || c == '\t') {
      out += '\\';
      out += c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
    } else if (n == 0 || c < 0x20 || c == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
      n = 1;
    } else if (n > 1 && is_format_control(decode(s, i, n))) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(decode(s, i, n)));
      out += buf;
    } else {
      out.append(s, i, n);
    }
    i += n == 0 ? 1 : n;
  }
  return out;
}

}  // namespace sbx
