#pragma once
// "Did you mean" for a mistyped word (a subcommand, a profile key): the closest of the known
// words by edit distance, when it is close enough to be a typo rather than another word.
#include <string>
#include <vector>

namespace sbx {

// The known word closest to `word` (Damerau-Levenshtein: a swap of two neighbours is one edit),
// if at most 2 edits away and fewer edits than `word` has characters; "" otherwise.
std::string closest_word(const std::string& word, const std::vector<std::string>& known);

// " (did you mean 'run'?)", or "" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& known);

}  // namespace sbx
