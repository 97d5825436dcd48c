#include "runtime/base/json_scan.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

namespace sbx {
namespace {

// Bytes a string runs on without a closer look: printable ASCII but '"' and '\\' (0x7f included,
// as nlohmann's lexer takes it).
constexpr std::array<bool, 256> kPlain = [] {
  std::array<bool, 256> t{};
  for (int c = 0x20; c < 0x80; ++c) t[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
  return t;
}();

bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

int hex_value(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// One document, scanned by recursive descent (the depth is bounded by JsonBounds::max_depth).
class Scanner {
 public:
  Scanner(std::string_view text, const JsonBounds& b, std::size_t member_depth,
          const std::function<void(const ScannedMember&)>& on_member)
      : begin_(reinterpret_cast<const unsigned char*>(text.data())),
        p_(begin_),
        end_(begin_ + text.size()),
        b_(b),
        member_depth_(member_depth),
        on_member_(on_member) {}

  JsonScan run() {
    JsonScan r;
    if (static_cast<std::size_t>(end_ - begin_) > b_.max_bytes) {
      fail("larger than " + std::to_string(b_.max_bytes) + " bytes");
    } else if (skip_bom()) {
      skip_ws();
      if (p_ < end_) r.root = static_cast<char>(*p_);
      if (value(true)) {
        skip_ws();
        // nlohmann's lexer takes a NUL byte for the end of its input (for C strings): what follows
        // one is not read, by it or here.
        if (p_ < end_ && *p_ != '\0') fail("text after the document");
      }
    }
    r.ok = problem_.empty();
    if (!r.ok) {
      r.at = at_;
      r.problem = problem_;
      r.root = 0;
    }
    return r;
  }

 private:
  bool fail(std::string why) {
    if (problem_.empty()) {
      problem_ = std::move(why);
      at_ = static_cast<std::size_t>(p_ - begin_);
    }
    return false;
  }
  bool invalid() { return fail(p_ == end_ ? "unexpected end of input" : "not valid JSON"); }

  bool skip_bom() {
    if (p_ == end_ || *p_ != 0xef) return true;
    if (end_ - p_ < 3 || p_[1] != 0xbb || p_[2] != 0xbf) return fail("an incomplete UTF-8 byte order mark");
    p_ += 3;
    return true;
  }
  void skip_ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  // A value starts (a scalar, or a container before its depth is checked): counted.
  bool count() {
    if (++values_ > b_.max_values) return fail("more than " + std::to_string(b_.max_values) + " values");
    return true;
  }
  bool open() {
    if (!count()) return false;
    if (depth_ >= b_.max_depth) return fail("nested deeper than " + std::to_string(b_.max_depth) + " levels");
    ++depth_;
    ++p_;
    return true;
  }

  // `report`: this value's members (when it is an object) are reported while the path allows.
  bool value(bool report) {
    if (p_ == end_ || *p_ == '\0') return invalid();  // a NUL ends nlohmann's input
    switch (*p_) {
      case '{': return object(report);
      case '[': return array();
      case '"': return count() && string(nullptr);
      case 't': return count() && literal("true");
      case 'f': return count() && literal("false");
      case 'n': return count() && literal("null");
      default: return count() && number();
    }
  }

  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() || std::memcmp(p_, word.data(), word.size()) != 0)
      return invalid();
    p_ += word.size();
    return true;
  }

  // The grammar of RFC 8259, then what nlohmann's lexer does with the token: an integer that fits
  // neither 64-bit type, and every number with a fraction or an exponent, is read by strtod, and
  // its parser refuses one that is not finite ("number overflow").
  bool number() {
    const unsigned char* start = p_;
    if (*p_ == '-') ++p_;
    if (p_ == end_ || !is_digit(*p_)) return invalid();
    if (*p_++ != '0')
      while (p_ < end_ && is_digit(*p_)) ++p_;
    bool is_float = false;
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (p_ == end_ || !is_digit(*p_)) return invalid();
      while (p_ < end_ && is_digit(*p_)) ++p_;
      is_float = true;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !is_digit(*p_)) return invalid();
      while (p_ < end_ && is_digit(*p_)) ++p_;
      is_float = true;
    }
    // Up to 18 digits always fit a signed 64-bit integer: only longer ones need the conversion.
    if (!is_float && p_ - start < 19) return true;
    const std::string token(start, p_);
    if (!is_float) {
      errno = 0;
      if (*start == '-') (void)std::strtoll(token.c_str(), nullptr, 10);
      else (void)std::strtoull(token.c_str(), nullptr, 10);
      if (errno == 0) return true;
    }
    if (!std::isfinite(std::strtod(token.c_str(), nullptr))) return fail("number overflow");
    return true;
  }

  // A string; `out` (a member name) gets its decoded bytes: a slice of the text when it has no
  // escape, else a copy kept in decoded_.
  bool string(std::string_view* out) {
    const unsigned char* start = ++p_;
    bool escaped = false;
    for (;;) {
      while (p_ < end_ && kPlain[*p_]) ++p_;
      if (p_ == end_) return fail("a string without its closing quote");
      if (*p_ == '"') break;
      if (*p_ == '\\') {
        escaped = true;
        if (!escape()) return false;
      } else if (*p_ < 0x20) {
        return fail("a control character in a string (it must be escaped)");
      } else if (!utf8()) {
        return false;
      }
    }
    std::string_view raw(reinterpret_cast<const char*>(start), static_cast<std::size_t>(p_ - start));
    ++p_;
    if (out) *out = escaped ? decode(raw) : raw;
    return true;
  }

  bool hex4(std::uint32_t& cp) {
    if (end_ - p_ < 4) return invalid_escape();
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      int h = hex_value(p_[i]);
      if (h < 0) return invalid_escape();
      cp = cp << 4 | static_cast<std::uint32_t>(h);
    }
    p_ += 4;
    return true;
  }
  bool invalid_escape() { return fail("an invalid escape in a string"); }

  // p_ on the backslash. \uD800-\uDBFF must be followed by \uDC00-\uDFFF; a lone low surrogate is
  // refused, as nlohmann refuses both.
  bool escape() {
    ++p_;
    if (p_ == end_) return invalid_escape();
    switch (*p_) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't': ++p_; return true;
      case 'u': {
        ++p_;
        std::uint32_t cp;
        if (!hex4(cp)) return false;
        if (cp >= 0xdc00 && cp <= 0xdfff) return invalid_escape();
        if (cp < 0xd800 || cp > 0xdbff) return true;
        if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return invalid_escape();
        p_ += 2;
        std::uint32_t low;
        if (!hex4(low)) return false;
        return low >= 0xdc00 && low <= 0xdfff ? true : invalid_escape();
      }
      default: return invalid_escape();
    }
  }

  // p_ on a byte >= 0x80: one well-formed UTF-8 sequence (RFC 3629: no overlong form, no
  // surrogate, nothing past U+10FFFF).
  bool utf8() {
    unsigned char c = *p_;
    std::size_t n;
    unsigned char lo = 0x80, hi = 0xbf;  // the range of the first continuation byte
    if (c >= 0xc2 && c <= 0xdf) n = 1;
    else if (c == 0xe0) n = 2, lo = 0xa0;
    else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) n = 2;
    else if (c == 0xed) n = 2, hi = 0x9f;
    else if (c == 0xf0) n = 3, lo = 0x90;
    else if (c >= 0xf1 && c <= 0xf3) n = 3;
    else if (c == 0xf4) n = 3, hi = 0x8f;
    else return fail("invalid UTF-8 in a string");
    if (static_cast<std::size_t>(end_ - p_) <= n) return fail("invalid UTF-8 in a string");
    for (std::size_t i = 1; i <= n; ++i) {
      unsigned char min = i == 1 ? lo : 0x80, max = i == 1 ? hi : 0xbf;
      if (p_[i] < min || p_[i] > max) return fail("invalid UTF-8 in a string");
    }
    p_ += n + 1;
    return true;
  }

  // The text of a string already checked by string().
  std::string_view decode(std::string_view raw) {
    std::string& s = decoded_.emplace_back();
    s.reserve(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '\\') {
        s += raw[i];
        continue;
      }
      char e = raw[++i];
      switch (e) {
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'n': s += '\n'; break;
        case 'r': s += '\r'; break;
        case 't': s += '\t'; break;
        case 'u': {
          auto hex = [&](std::size_t at) {
            std::uint32_t v = 0;
            for (std::size_t k = 0; k < 4; ++k)
              v = v << 4 | static_cast<std::uint32_t>(hex_value(static_cast<unsigned char>(raw[at + k])));
            return v;
          };
          std::uint32_t cp = hex(i + 1);
          i += 4;
          if (cp >= 0xd800 && cp <= 0xdbff) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (hex(i + 3) - 0xdc00);
            i += 6;
          }
          append_utf8(s, cp);
          break;
        }
        default: s += e;  // '"', '\\', '/'
      }
    }
    return s;
  }

  bool expect(unsigned char c) {
    skip_ws();
    if (p_ == end_ || *p_ != c) return invalid();
    ++p_;
    return true;
  }

  bool object(bool report) {
    if (!open()) return false;
    const std::size_t names_from = names_.size(), decoded_from = decoded_.size();
    skip_ws();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
      --depth_;
      return true;
    }
    for (;;) {
      skip_ws();
      if (p_ == end_ || *p_ != '"') return invalid();
      std::string_view name;
      if (!string(&name)) return false;
      names_.push_back(name);
      if (!expect(':')) return false;
      skip_ws();
      const bool here = report && path_.size() < member_depth_;
      if (here) path_.push_back(name);
      const unsigned char* start = p_;
      if (!value(here)) return false;
      if (here) {
        if (on_member_)
          on_member_(
              {path_, std::string_view(reinterpret_cast<const char*>(start), static_cast<std::size_t>(p_ - start))});
        path_.pop_back();
      }
      skip_ws();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == '}') break;
      return invalid();
    }
    ++p_;
    // A repeated member name (parse_json refuses one: json_io.cpp, BoundedSax::key): this
    // object's names, sorted in place, then dropped.
    auto first = names_.begin() + static_cast<std::ptrdiff_t>(names_from);
    if (names_.end() - first > 1) {
      std::sort(first, names_.end());
      if (auto d = std::adjacent_find(first, names_.end()); d != names_.end())
        return fail("duplicate member name " + json_excerpt(nlohmann::json(escape_utf8(*d))));
    }
    names_.resize(names_from);
    decoded_.resize(decoded_from);  // the names of members above stay (path_ may hold them)
    --depth_;
    return true;
  }

  bool array() {
    if (!open()) return false;
    skip_ws();
    if (p_ < end_ && *p_ == ']') {
      ++p_;
      --depth_;
      return true;
    }
    for (;;) {
      skip_ws();
      if (!value(false)) return false;
      skip_ws();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == ']') break;
      return invalid();
    }
    ++p_;
    --depth_;
    return true;
  }

  const unsigned char* const begin_;
  const unsigned char* p_;
  const unsigned char* const end_;
  const JsonBounds& b_;
  const std::size_t member_depth_;
  const std::function<void(const ScannedMember&)>& on_member_;
  std::size_t values_ = 0, depth_ = 0;
  std::vector<std::string_view> names_;  // the member names of every open object, innermost last
  std::deque<std::string> decoded_;      // names that had escapes, decoded (stable: a deque)
  std::vector<std::string_view> path_;   // to the member being read, while it is reported
  std::string problem_;
  std::size_t at_ = 0;
};

}  // namespace

JsonScan scan_json(std::string_view text, const JsonBounds& bounds, std::size_t member_depth,
                   const std::function<void(const ScannedMember&)>& on_member) {
  return Scanner(text, bounds, member_depth, on_member).run();
}

}  // namespace sbx
