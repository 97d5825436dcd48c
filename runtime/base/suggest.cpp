#include "runtime/base/suggest.hpp"

#include <algorithm>

namespace sbx {
namespace {

// Optimal string alignment distance; words are short (names and keys), and longer ones are cut
// off at 64 characters so that a hostile key cannot make this quadratic in its size.
std::size_t distance(std::string a, std::string b) {
  a.resize(std::min<std::size_t>(a.size(), 64));
  b.resize(std::min<std::size_t>(b.size(), 64));
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

}  // namespace

std::string closest_word(const std::string& word, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_d = 3;
  for (auto& k : known) {
    std::size_t d = distance(word, k);
    if (d < best_d && d < word.size()) best_d = d, best = k;
  }
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& known) {
  std::string c = closest_word(word, known);
  return c.empty() ? std::string() : " (did you mean '" + c + "'?)";
}

}  // namespace sbx
