// "Did you mean": the nearest of the known words to a misspelt one, by edit
// distance, so an error message can give the fix instead of a long list.
#pragma once
#include <string>
#include <vector>

namespace fsdpsim {

// Optimal string alignment distance: insertions, deletions, substitutions and
// swaps of two neighbours each cost 1 (`trian_step` is one swap from train_step).
int edit_distance(const std::string& a, const std::string& b);

// The candidates nearest to `word`, at most three, when the nearest is close
// enough to be a typo: distance at most max(1, |word| / 3), or a prefix of
// four or more letters. Empty otherwise.
std::vector<std::string> nearest(const std::string& word, const std::vector<std::string>& candidates);

// "; did you mean 'x'?" or "; did you mean 'x' or 'y'?"; "" when nothing is near.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// The fix for an unknown word: the suggestion when one is near, else
// " (expected one of: a, b, c)".
std::string suggest_or_list(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace fsdpsim
