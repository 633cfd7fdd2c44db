// Which state of a peer rank goes with one rank's observation. A base weight's
// class needs every rank's rows of A; when ranks run out of step (`@R` ops),
// "the peers' shards at that moment" is fixed by the collectives, which pair
// in issue order. The model and the real backend's observer both use this rule.
#pragma once
#include <cstddef>
#include <vector>

namespace fsdpsim {

struct ReportMark {
  int step;             // the op's 1-based index
  size_t issued;        // collectives this rank issued up to and including this op
  bool state_known;     // false for an op the rank is stuck in (hang/mismatch)
};

// Index into marks[j] whose state rank j had when rank r's report i was taken,
// or -1 for j's initial state: where j issued the partner of r's latest
// collective, j's state just before that op (or, when it came no later than
// r's, after it and after j's later ops up to r's step that issue no
// collective); with no collective yet (or none of j's paired it), j's report of
// the same step when j ran it, else j's latest report up to that step. The
// upstream judge reads the same from the pairings gloo made. Unknown states
// step back.
int peer_view(const std::vector<std::vector<ReportMark>>& marks, int j, int r, size_t i);

}  // namespace fsdpsim
