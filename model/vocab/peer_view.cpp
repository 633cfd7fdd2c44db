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
  // The pairing of r's latest collective decides first: j's report of the same step may have
  // needed a collective r had not issued yet (j then ran it only after r's report was taken).
  if (mine.issued > 0)
    for (size_t m = 0; m < theirs.size(); ++m)
      if (theirs[m].issued >= mine.issued) {
        if (theirs[m].step > mine.step) return known_at_or_before(theirs, static_cast<int>(m) - 1);
        // Past that op j waits for no one until its next collective: its later ops up to this
        // step that issue none have run too (a rank blocks only in a collective's wait,
        // torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py::foreach_all_gather). Else a
        // report after a peer's hang saw the peer back before ops it had already run.
        size_t x = m;
        while (theirs[x].issued == mine.issued && x + 1 < theirs.size() && theirs[x + 1].step <= mine.step &&
               theirs[x + 1].issued == mine.issued)
          ++x;
        return known_at_or_before(theirs, static_cast<int>(x));
      }
  for (size_t m = 0; m < theirs.size(); ++m)
    if (theirs[m].step == mine.step) return known_at_or_before(theirs, static_cast<int>(m));
  int best = -1;
  for (size_t m = 0; m < theirs.size(); ++m)
    if (theirs[m].step <= mine.step) best = static_cast<int>(m);
  return known_at_or_before(theirs, best);
}

}  // namespace fsdpsim
