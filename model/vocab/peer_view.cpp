#include "model/vocab/peer_view.hpp"

namespace fsdpsim {
namespace {

int known_at_or_before(const std::vector<ReportMark>& m, int idx) {
  for (int x = idx; x >= 0; --x)
    if (m[x].state_known) return x;
  return -1;
}

}  // namespace

int peer_view(const std::vector<std::vector<ReportMark>>& marks, int j, int r, size_t i) {
  const ReportMark& mine = marks[r][i];
  const auto& theirs = marks[j];
  for (size_t m = 0; m < theirs.size(); ++m)
    if (theirs[m].step == mine.step) return known_at_or_before(theirs, static_cast<int>(m));
  if (mine.issued > 0)
    for (size_t m = 0; m < theirs.size(); ++m)
      if (theirs[m].issued >= mine.issued)
        return known_at_or_before(theirs, theirs[m].step <= mine.step ? static_cast<int>(m) : static_cast<int>(m) - 1);
  int best = -1;
  for (size_t m = 0; m < theirs.size(); ++m)
    if (theirs[m].step <= mine.step) best = static_cast<int>(m);
  return known_at_or_before(theirs, best);
}

}  // namespace fsdpsim
