#include "runtime/base/shell_quote.hpp"

#include <algorithm>
#include <string_view>

#include "runtime/base/text_escape.hpp"

namespace sbx {
namespace {
// Characters no POSIX shell treats specially in a word (not at the start of one either: '=' only
// matters before the command name, '%' and ':' and ',' and '@' never).
bool is_safe(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::string_view("_./=:,@%+-").find(static_cast<char>(c)) != std::string_view::npos;
}
}  // namespace

std::string shell_quote(const std::string& arg) {
  if (!arg.empty() && std::all_of(arg.begin(), arg.end(), [](unsigned char c) { return is_safe(c); })) return arg;
  // A control byte, invalid UTF-8 or a format character inside '...' would reach the terminal as
  // it is: such an argument is written in ANSI-C quoting ($'...', bash/zsh/ksh and POSIX 2024),
  // whose escapes are printable()'s, with ' escaped too.
  if (printable(arg) != arg) {
    std::string doubled;
    for (char c : arg) doubled += c == '\\' ? std::string("\\\\") : std::string(1, c);
    std::string out = "$'";
    for (char c : printable(doubled)) {
      if (c == '\'') out += "\\'";
      else out += c;
    }
    return out + "'";
  }
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') out += "'\\''";  // close the quote, an escaped quote, reopen
    else out += c;
  }
  return out + "'";
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += shell_quote(a);
  }
  return out;
}

}  // namespace sbx
