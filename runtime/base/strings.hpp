// Small string helpers that messages and reports share.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sbx {

// Bytes as lower-case hex, two digits each (a digest, a random token, a BPF program in a job).
inline std::string hex_lower(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) {
    auto c = static_cast<unsigned char>(ch);
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// ASCII letters lowered, every other byte kept: protocol tokens (HTTP header names, host names,
// digests, architecture names) compared without case, whatever the locale.
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

// Words joined with `sep` between each two ("memory pids", "cpu/io"), as messages list names.
inline std::string join_words(const std::vector<std::string>& words, std::string_view sep = " ") {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += sep;
    out += words[i];
  }
  return out;
}

// The fields of the first line of a colon-separated database (/etc/passwd, /etc/group) that has
// at least `min_fields` fields and whose field `key_field` is `key`; empty when none has. One
// reader for the host's passwd (workspace.cpp, never glibc's NSS in the static binary) and an
// image's (image_defaults.cpp).
inline std::vector<std::string_view> colon_db_entry(std::string_view db, std::size_t key_field, std::string_view key,
                                                    std::size_t min_fields) {
  while (!db.empty()) {
    std::string_view line = db.substr(0, db.find('\n'));
    db.remove_prefix(line.size() < db.size() ? line.size() + 1 : db.size());
    std::vector<std::string_view> f;
    for (std::string_view rest = line;;) {
      auto colon = rest.find(':');
      f.push_back(rest.substr(0, colon));
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
    if (f.size() >= min_fields && key_field < f.size() && f[key_field] == key) return f;
  }
  return {};
}

}  // namespace sbx
