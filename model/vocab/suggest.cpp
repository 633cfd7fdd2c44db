#include "model/vocab/suggest.hpp"

#include <algorithm>

namespace fsdpsim {

int edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::vector<std::string> nearest(const std::string& word, const std::vector<std::string>& candidates) {
  // Words of hundreds of characters are not typos, and the table would be large.
  if (word.empty() || word.size() > 64) return {};
  const int limit = std::max<int>(1, static_cast<int>(word.size()) / 3);
  int best = limit + 1;
  std::vector<std::string> out;
  for (const auto& c : candidates) {
    if (c == word) continue;
    // A word of four or more letters that starts a candidate (`inference` for
    // inference_mode) is as near as one typo.
    const int d = word.size() >= 4 && c.compare(0, word.size(), word) == 0 ? 1 : edit_distance(word, c);
    if (d < best) {
      best = d;
      out.clear();
    }
    if (d == best && out.size() < 3 && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::vector<std::string> near = nearest(word, candidates);
  if (near.empty()) return "";
  std::string out = "; did you mean ";
  for (size_t i = 0; i < near.size(); ++i) out += (i == 0 ? "" : i + 1 == near.size() ? " or " : ", ") + ("'" + near[i] + "'");
  return out + "?";
}

std::string suggest_or_list(const std::string& word, const std::vector<std::string>& candidates) {
  std::string hint = did_you_mean(word, candidates);
  if (!hint.empty()) return hint;
  std::string all;
  for (const auto& c : candidates) all += (all.empty() ? "" : ", ") + c;
  return " (expected one of: " + all + ")";
}

}  // namespace fsdpsim
