#include "runtime/typed/ecma_regex.hpp"

#include <cctype>
#include <cstdio>

#include <re2/re2.h>

namespace sbx {
namespace {

// ECMA-262 \s: WhiteSpace and LineTerminator, wider than RE2's \s ([\t\n\f\r ]).
constexpr const char* kEcmaSpace =
    "\\t\\n\\x0B\\f\\r \\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}\\x{feff}";
// ECMA's "." excludes every LineTerminator; RE2's only excludes \n.
constexpr const char* kEcmaDot = "[^\\n\\r\\x{2028}\\x{2029}]";

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

std::string hex_escape(unsigned long cp) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "\\x{%lx}", cp);
  return buf;
}

struct Translator {
  const std::string& p;
  std::size_t i = 0;
  bool in_class = false;
  std::string out;

  Error fail(const std::string& what) const {
    return make_error("schema", what + " (at offset " + std::to_string(i) + ")");
  }

  // \uXXXX, joining a UTF-16 surrogate pair into one code point. `i` is just past the 'u'.
  bool unicode_escape() {
    auto hex4 = [&](std::size_t at, unsigned long& v) {
      if (at + 4 > p.size()) return false;
      for (std::size_t k = at; k < at + 4; ++k)
        if (!is_hex(p[k])) return false;
      v = std::stoul(p.substr(at, 4), nullptr, 16);
      return true;
    };
    unsigned long hi = 0, lo = 0;
    if (!hex4(i, hi)) return false;
    i += 4;
    if (hi >= 0xD800 && hi <= 0xDBFF && p.compare(i, 2, "\\u") == 0 && hex4(i + 2, lo) && lo >= 0xDC00 &&
        lo <= 0xDFFF) {
      i += 6;
      hi = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
    }
    out += hex_escape(hi);
    return true;
  }

  // One escape; `i` is at the character after the backslash.
  Status escape() {
    if (i >= p.size()) return fail("a trailing backslash");
    char c = p[i++];
    switch (c) {
      case 'd':
      case 'D':
      case 'w':
      case 'W':
      case 'f':
      case 'n':
      case 'r':
      case 't':
      case 'v':
        out += '\\';
        out += c;
        break;
      case 'b':
      case 'B':
        if (in_class && c == 'b') out += "\\x08";  // [\b] is a backspace in ECMA
        else if (in_class) return fail("\\B inside a character class");
        else out += std::string("\\") + c;
        break;
      case 's': out += in_class ? std::string(kEcmaSpace) : std::string("[") + kEcmaSpace + "]"; break;
      case 'S':
        if (in_class) return fail("\\S inside a character class is not supported");
        out += std::string("[^") + kEcmaSpace + "]";
        break;
      case 'u':
        if (!unicode_escape()) out += 'u';  // an identity escape outside unicode mode
        break;
      case 'x':
        if (i + 2 <= p.size() && is_hex(p[i]) && is_hex(p[i + 1])) {
          out += hex_escape(std::stoul(p.substr(i, 2), nullptr, 16));
          i += 2;
        } else {
          out += 'x';
        }
        break;
      case 'c':
        if (i < p.size() && std::isalpha(static_cast<unsigned char>(p[i])))
          out += hex_escape(static_cast<unsigned char>(p[i++]) % 32U);
        else out += "\\\\c";
        break;
      case '0':
        if (i < p.size() && std::isdigit(static_cast<unsigned char>(p[i])))
          return fail("octal escapes are not supported");
        out += "\\x00";
        break;
      case 'k': return fail("named backreferences are not supported");
      case 'p':
      case 'P':
        out += '\\';
        out += c;  // Unicode property escapes: RE2 knows the same \p{Name} syntax
        break;
      default:
        if (c >= '1' && c <= '9') return fail("backreferences are not supported");
        if (std::isalnum(static_cast<unsigned char>(c)) || static_cast<unsigned char>(c) >= 0x80) {
          out += c;  // ECMA identity escape (\e is "e"); RE2 would give some of them a meaning (\A, \z, \Q)
        } else {
          out += '\\';
          out += c;
        }
    }
    return {};
  }

  Status group() {
    // `i` is just past '('.
    if (p.compare(i, 2, "?=") == 0 || p.compare(i, 2, "?!") == 0 || p.compare(i, 3, "?<=") == 0 ||
        p.compare(i, 3, "?<!") == 0)
      return fail("lookahead and lookbehind assertions are not supported");
    if (p.compare(i, 2, "?<") == 0) {  // named group: RE2 of Debian 12 only knows (?P<name>
      out += "(?P<";
      i += 2;
    } else {
      out += '(';
    }
    return {};
  }

  Result<std::string> run() {
    while (i < p.size()) {
      char c = p[i++];
      if (c == '\\') {
        if (auto r = escape(); !r) return r.error();
      } else if (in_class) {
        if (c == ']') in_class = false;
        out += c == '[' ? std::string("\\[") : std::string(1, c);  // "[[:alpha:]]" is no POSIX class in ECMA
      } else if (c == '[') {
        if (p.compare(i, 1, "]") == 0) {  // [] matches nothing
          out += "[^\\x00-\\x{10ffff}]";
          ++i;
        } else if (p.compare(i, 2, "^]") == 0) {  // [^] matches anything
          out += "(?s:.)";
          i += 2;
        } else {
          in_class = true;
          out += '[';
          if (p.compare(i, 1, "^") == 0) out += p[i++];
        }
      } else if (c == '.') {
        out += kEcmaDot;
      } else if (c == '(') {
        if (auto r = group(); !r) return r.error();
      } else {
        out += c;
      }
    }
    if (in_class) return fail("an unterminated character class");
    return out;
  }
};

}  // namespace

Result<std::string> ecma_to_re2(const std::string& pattern) { return Translator{pattern}.run(); }

Result<EcmaRegex> EcmaRegex::compile(const std::string& pattern) {
  auto translated = ecma_to_re2(pattern);
  if (!translated) return translated.error();
  RE2::Options opt;
  opt.set_log_errors(false);  // RE2 would log to stderr; the error is returned instead
  opt.set_encoding(RE2::Options::EncodingUTF8);
  auto re = std::make_shared<const RE2>(*translated, opt);
  if (!re->ok()) return make_error("schema", "not supported by RE2: " + re->error());
  EcmaRegex r;
  r.re_ = std::move(re);
  return r;
}

bool EcmaRegex::search(const std::string& text) const { return RE2::PartialMatch(text, *re_); }

}  // namespace sbx
