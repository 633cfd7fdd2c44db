#include "model/vocab/table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace fsdpsim {

void print_aligned(std::ostream& os, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w;
  for (const auto& r : rows) {
    if (r.size() > w.size()) w.resize(r.size(), 0);
    for (size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
  }
  std::string s;
  for (const auto& r : rows) {
    s.clear();
    // Cells are bytes, padded by their byte length (fmt's own width counts code points).
    for (size_t c = 0; c + 1 < r.size(); ++c) fmt::format_to(std::back_inserter(s), "{}{:{}}  ", r[c], "", w[c] - r[c].size());
    if (!r.empty()) s += r.back();
    while (!s.empty() && s.back() == ' ') s.pop_back();
    os << s << '\n';
  }
}

namespace {

// A cell's words packed into lines of at most `w` characters. A word longer than that is
// broken, after a '/', ',', ':' or '=' where one falls in the line's second half: nothing of
// the cell is lost.
std::vector<std::string> wrap(const std::string& cell, size_t w) {
  std::vector<std::string> lines;
  std::string line, word;
  auto flush = [&] {
    if (!line.empty()) lines.push_back(line);
    line.clear();
  };
  auto place = [&] {
    while (word.size() > w) {
      flush();
      size_t at = word.find_last_of("/,:=", w - 1);
      if (at == std::string::npos || at < w / 2) at = w - 1;
      lines.push_back(word.substr(0, at + 1));
      word.erase(0, at + 1);
    }
    if (word.empty()) return;
    if (line.empty()) line = word;
    else if (line.size() + 1 + word.size() <= w) line += " " + word;
    else {
      flush();
      line = word;
    }
    word.clear();
  };
  for (char c : cell) {
    if (c == ' ') place();
    else word += c;
  }
  place();
  flush();
  if (lines.empty()) lines.push_back("");
  return lines;
}

}  // namespace

bool print_fitted(std::ostream& os, const std::vector<std::vector<std::string>>& rows, size_t width, size_t keep) {
  std::vector<size_t> w;
  for (const auto& r : rows) {
    if (r.size() > w.size()) w.resize(r.size(), 0);
    for (size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
  }
  size_t total = w.empty() ? 0 : 2 * (w.size() - 1);
  for (size_t x : w) total += x;
  if (width == 0 || total <= width) {
    print_aligned(os, rows);
    return false;
  }
  constexpr size_t kNarrowest = 12;  // a short name or list on one line
  while (total > width) {
    size_t widest = w.size();
    for (size_t c = keep; c < w.size(); ++c)
      if (w[c] > kNarrowest && (widest == w.size() || w[c] > w[widest])) widest = c;
    if (widest == w.size()) break;  // every column as narrow as it goes: the line stays long
    --w[widest];
    --total;
  }
  // Each row becomes as many lines as its tallest wrapped cell.
  std::vector<std::vector<std::string>> lines;
  for (const auto& r : rows) {
    std::vector<std::vector<std::string>> cells;
    size_t height = 1;
    for (size_t c = 0; c < r.size(); ++c) {
      cells.push_back(r[c].size() <= w[c] ? std::vector<std::string>{r[c]} : wrap(r[c], w[c]));
      height = std::max(height, cells.back().size());
    }
    for (size_t k = 0; k < height; ++k) {
      lines.emplace_back();
      for (const auto& cell : cells) lines.back().push_back(k < cell.size() ? cell[k] : "");
    }
  }
  print_aligned(os, lines);
  return true;
}

}  // namespace fsdpsim
