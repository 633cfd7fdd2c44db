// describe_pending (model/vocab/observation.cpp): how the simulator and the
// real backend word collectives that fail to pair up.
#include <gtest/gtest.h>

#include "model/vocab/observation.hpp"

using namespace fsdpsim;

namespace {
PendingCollective waiting(CollOp op, const std::string& group, int64_t count, int step, std::vector<std::string> members,
                          DType dtype = DType::F32) {
  PendingCollective p;
  p.waiting = true;
  p.coll.op = op;
  p.coll.group = group;
  p.coll.count = count;
  p.coll.dtype = dtype;
  p.step = step;
  p.members = std::move(members);
  return p;
}
}  // namespace

TEST(DescribePending, ARankIssuingNothingIsNamedAndNoMembersAreListed) {
  EXPECT_EQ(describe_pending({waiting(CollOp::AllGather, "lin0", 112, 5, {"lin0.lora_A.a"}), PendingCollective{}}),
            "rank 0 in all_gather(lin0, 112) at step 5; rank 1 issues no matching collective");
}

TEST(DescribePending, SameCollectiveWithDifferentPackingListsEachRanksParameters) {
  EXPECT_EQ(describe_pending({waiting(CollOp::AllGather, "lin0", 112, 5, {"lin0.lora_A.a", "lin0.lora_B.a"}),
                              waiting(CollOp::AllGather, "lin0", 112, 4, {})}),
            "rank 0 in all_gather(lin0, 112) of lin0.lora_A.a,lin0.lora_B.a at step 5; "
            "rank 1 in all_gather(lin0, 112) of nothing at step 4");
}

TEST(DescribePending, DifferentCollectivesListNoParameters) {
  // Any of op, group, count or dtype differing makes it a plain mismatch.
  const auto a = waiting(CollOp::AllGather, "lin0", 112, 5, {"x"});
  for (const auto& b : {waiting(CollOp::ReduceScatter, "lin0", 112, 5, {"x"}), waiting(CollOp::AllGather, "root", 112, 5, {"x"}),
                        waiting(CollOp::AllGather, "lin0", 113, 5, {"x"}),
                        waiting(CollOp::AllGather, "lin0", 112, 5, {"x"}, DType::BF16)}) {
    std::string text = describe_pending({a, b});
    EXPECT_EQ(text.find(" of "), std::string::npos) << text;
    EXPECT_EQ(text.rfind("rank 0 in all_gather(lin0, 112) at step 5; rank 1 in ", 0), 0u) << text;
  }
}

TEST(DescribePending, ThreeRanksNameEveryOneInRankOrder) {
  EXPECT_EQ(describe_pending({PendingCollective{}, waiting(CollOp::ReduceScatter, "root", 8, 2, {"p"}), PendingCollective{}}),
            "rank 0 issues no matching collective; rank 1 in reduce_scatter(root, 8) at step 2; "
            "rank 2 issues no matching collective");
}
