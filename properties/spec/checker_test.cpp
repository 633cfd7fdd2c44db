// The checkers' one shape (model/spec/checker.hpp): the key words a checker
// writes, and which checkers see a stuck rank.
#include "model/spec/checker.hpp"

#include <gtest/gtest.h>

#include "model/spec/s5_agreement_checker.hpp"
#include "properties/spec/checker_inputs.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(KeyWriter, FlagsPackOneBitEachTheFirstInBitZero) {
  std::vector<uint32_t> words;
  spec::KeyWriter key(words);
  key.flags({true, false, true});
  key.flags({});
  key.word(7);
  EXPECT_EQ(words, (std::vector<uint32_t>{5u, 0u, 7u}));
}

TEST(Checker, OnlyAHangOrMismatchIsAStuckRankAndOnlyS5SeesOne) {
  Observation o;
  EXPECT_FALSE(spec::rank_stuck(o));
  o.status = Status::KeyError;
  EXPECT_FALSE(spec::rank_stuck(o));
  o.status = Status::Hang;
  EXPECT_TRUE(spec::rank_stuck(o));
  o.status = Status::Mismatch;
  EXPECT_TRUE(spec::rank_stuck(o));
  EXPECT_FALSE(spec::Checker::kSeesStuckRanks);
  EXPECT_TRUE(spec::S5AgreementChecker::kSeesStuckRanks);
}

// Through the driver: a rank stuck in a hang is reported by S5 and judged by no other checker,
// so the bad weight it shows is no S2 finding until a rank that is not stuck shows it.
TEST(Checker, AStuckRankIsJudgedByS5Alone) {
  CheckerInputs in(seed000_header(1, "patched") + "train_step\n");
  Observation o = in.obs(1);
  o.status = Status::Hang;
  o.message = "rank 0 in all_gather(root, 8) at step 1; rank 1 issues no matching collective";
  o.layers[1].registered = WeightClass::MissingDelta;
  SpecChecker checker(in.file.scenario);
  std::vector<Finding> out;
  checker.step(in.op(1), &o, 1, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].spec, "S5");
  o.status = Status::Ok;
  checker.step(in.op(1), &o, 1, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].spec, "S2");
}
