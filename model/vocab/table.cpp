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

}  // namespace fsdpsim
