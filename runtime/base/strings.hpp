// Small string helpers that messages and reports share.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sbx {

// Words joined with `sep` between each two ("memory pids", "cpu/io"), as messages list names.
inline std::string join_words(const std::vector<std::string>& words, std::string_view sep = " ") {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += sep;
    out += words[i];
  }
  return out;
}

}  // namespace sbx
