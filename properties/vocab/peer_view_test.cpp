// Which peer state goes with one rank's report (model/vocab/peer_view.cpp):
// the rule the simulator and the real backend's observer both apply when
// ranks run out of step.
#include <gtest/gtest.h>

#include "model/vocab/peer_view.hpp"

using namespace fsdpsim;

namespace {
// marks[0] is rank r (the observer), marks[1] the peer j.
int view(const std::vector<ReportMark>& mine, const std::vector<ReportMark>& theirs, size_t i) {
  return peer_view({mine, theirs}, 1, 0, i);
}
}  // namespace

TEST(PeerView, APeerThatRanTheSameStepIsSeenAfterIt) {
  EXPECT_EQ(view({{1, 1, true}, {2, 2, true}}, {{1, 1, true}, {2, 2, true}}, 1), 1);
  EXPECT_EQ(view({{1, 1, true}, {2, 2, true}}, {{1, 1, true}, {2, 2, true}}, 0), 0);
}

TEST(PeerView, APeerStuckInTheSameStepIsSeenAtItsLastKnownState) {
  // The peer hangs in step 2: its state there is not observable, step 1's stands.
  EXPECT_EQ(view({{1, 1, true}, {2, 2, true}}, {{1, 1, true}, {2, 2, false}}, 1), 0);
  EXPECT_EQ(view({{1, 1, true}}, {{1, 1, false}}, 0), -1);  // nothing known: the initial state
}

TEST(PeerView, APartnerCollectiveInAnEarlierStepShowsThePeerAfterThatOp) {
  // r runs `@0` step 2 alone; its 1 collective paired with the peer's step 1.
  EXPECT_EQ(view({{2, 1, true}}, {{1, 1, true}, {3, 2, true}}, 0), 0);
}

TEST(PeerView, APeerPastThePartnerOpHasRunItsLaterOpsWithoutCollectives) {
  // fsdpsim random --seed 5700071 --world 2, shrunk: r's step 6 report (4 collectives) after
  // the peer's step-3 op paired its 4th; the peer then ran steps 4 (a reload) and hung in
  // step 5. It holds step 4's state: r saw it at step 5 and must not see step 3's again.
  EXPECT_EQ(view({{2, 2, true}, {5, 4, true}, {6, 4, true}}, {{1, 0, true}, {2, 2, true}, {3, 4, true}, {4, 4, true}, {5, 5, false}}, 2), 3);
  // an op past r's step, or one that issues a collective r has not yet paired, is not run
  EXPECT_EQ(view({{2, 1, true}, {3, 1, true}}, {{1, 1, true}, {3, 1, true}, {4, 1, true}}, 0), 0);
  EXPECT_EQ(view({{3, 1, true}}, {{1, 1, true}, {2, 2, true}}, 0), 0);
}

TEST(PeerView, APartnerCollectiveInALaterStepShowsThePeerBeforeThatOp) {
  // r's collective of step 2 pairs with the one the peer issues in step 3:
  // the peer is seen as it was before step 3, i.e. after step 1.
  EXPECT_EQ(view({{2, 1, true}}, {{1, 0, true}, {3, 1, true}}, 0), 0);
  // ... or in its initial state when step 3 was its first op.
  EXPECT_EQ(view({{2, 1, true}}, {{3, 1, true}}, 0), -1);
  // Before that op an unknown state steps back to the last known one.
  EXPECT_EQ(view({{4, 1, true}}, {{1, 0, true}, {2, 0, false}, {5, 1, true}}, 0), 0);
}

TEST(PeerView, WithNoCollectiveYetThePeersLatestReportUpToThatStepCounts) {
  EXPECT_EQ(view({{2, 0, true}}, {{1, 0, true}, {3, 0, true}}, 0), 0);
  EXPECT_EQ(view({{2, 0, true}}, {{3, 0, true}}, 0), -1);
  EXPECT_EQ(view({{5, 0, true}}, {{1, 0, true}, {3, 0, true}, {4, 0, true}}, 0), 2);
}

TEST(PeerView, APeerWhoseSameStepNeedsAnUnissuedCollectiveIsSeenAtThePairing) {
  // corpus merged_experts_peer_stepped_then_hung.seq: r's step 6 report (3 collectives) after
  // both merged at step 3; the peer's extra step-4 eval issues its 4th, which waits for r's
  // step 7, so the peer's steps 5 (a step) and 6 ran only after r's report: it is seen after 3.
  EXPECT_EQ(view({{3, 3, true}, {6, 3, true}, {7, 4, true}},
                 {{3, 3, true}, {4, 4, true}, {5, 4, true}, {6, 4, true}, {7, 5, false}}, 1), 0);
  // at r's step 7 the 4th paired with the peer's step 4: after it and its step 5 and 6
  EXPECT_EQ(view({{3, 3, true}, {6, 3, true}, {7, 4, true}},
                 {{3, 3, true}, {4, 4, true}, {5, 4, true}, {6, 4, true}, {7, 5, false}}, 2), 3);
}
