// `expect` checking (sim/findings/expectations.cpp): failures name file:line:column.
#include <gtest/gtest.h>

#include "properties/test_util.hpp"
#include "sim/findings/expectations.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {
std::vector<ExpectFailure> check(const std::string& text) {
  SeqFile f;
  RunResult r = simulate(text, &f);
  return check_expectations(f, r.observations, r.findings, "t.seq");
}
}  // namespace

TEST(Expectations, PassingExpectationsGiveNoFailure) {
  auto fails = check(seed000_header(1) + "eval\nmerge\nset_adapter other\ntrain_step expect grads={other} finding=S3\n"
                                           "train_step expect error=no_grad_fn finding=S1\n");
  EXPECT_TRUE(fails.empty()) << fails[0].text;
}

TEST(Expectations, AWrongExpectationNamesLineColumnAndBothValues) {
  std::string h = seed000_header(1);
  int header_lines = static_cast<int>(std::count(h.begin(), h.end(), '\n'));
  auto fails = check(h + "train_step expect grads={other}\n");
  ASSERT_EQ(fails.size(), 1u);
  EXPECT_EQ(fails[0].text, "t.seq:" + std::to_string(header_lines + 1) + ":19: step 1 rank 0: expected grads={other}, got grads={default}");
}

TEST(Expectations, UnannouncedFindingsFail) {
  auto fails = check(seed000_header(1) + "eval\nmerge\nset_adapter other\ntrain_step\n");
  ASSERT_EQ(fails.size(), 1u);
  EXPECT_NE(fails[0].text.find("unexpected finding: S3 step 4 rank 0"), std::string::npos) << fails[0].text;
}

TEST(Expectations, RankSpecificExpectations) {
  auto fails = check(seed000_header(2) + "@1 unshard lin0 expect error=hang\n");
  EXPECT_EQ(fails.size(), 1u);  // the S5 hang finding is not announced
  auto ok = check(seed000_header(2) + "@1 unshard lin0 expect error=hang finding=S5\n");
  EXPECT_TRUE(ok.empty()) << ok[0].text;
  auto wrong = check(seed000_header(2) + "train_step expect @1 error=no_grad_fn\n");
  ASSERT_EQ(wrong.size(), 1u);
  EXPECT_NE(wrong[0].text.find("step 1 rank 1: expected error=no_grad_fn, got ok"), std::string::npos) << wrong[0].text;
}

TEST(Expectations, OpsThatNeverRanAreReported) {
  auto fails = check(seed000_header(2, "patched") + "@1 set_adapter other\ntrain_step expect finding=S5\ntrain_step expect ok\n");
  ASSERT_FALSE(fails.empty());
  bool never = false;
  for (const auto& f : fails) never = never || f.text.find("the op never ran") != std::string::npos;
  EXPECT_TRUE(never);
}
