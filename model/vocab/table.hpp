// Aligned text tables: every column padded to its widest cell.
#pragma once
#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

namespace fsdpsim {

inline void print_aligned(std::ostream& os, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w;
  for (const auto& r : rows) {
    if (r.size() > w.size()) w.resize(r.size(), 0);
    for (size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
  }
  for (const auto& r : rows) {
    std::string s;
    for (size_t c = 0; c < r.size(); ++c) {
      std::string cell = r[c];
      if (c + 1 < r.size()) cell.resize(w[c], ' ');
      s += cell + (c + 1 < r.size() ? "  " : "");
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    os << s << "\n";
  }
}

}  // namespace fsdpsim
