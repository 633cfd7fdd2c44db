// rank_report.cpp built with UBSan (-fno-sanitize-recover): a report with empty
// value vectors (every parameter not registered, every run) round-trips
// without a memcpy from a null pointer (issue 11: reported on every real run).
#include <gtest/gtest.h>

#include "real_backend/rank_report.hpp"

using namespace fsdpsim;

TEST(RankReportUbsan, EmptyValueVectorsRoundTrip) {
  real::RankReport r;
  r.step = 3;
  r.op = "train_step";
  r.present = {1, 0};
  r.u_registered = {0, 1};
  r.whole = {0, 0};
  r.s_values = {{}, {1.5f, 2.5f}};
  r.u_values = {{}, {}};
  std::string bytes;
  real::write_report(bytes, r);
  size_t pos = 0;
  real::RankReport back;
  ASSERT_TRUE(real::read_report(bytes, &pos, &back));
  EXPECT_EQ(pos, bytes.size());
  EXPECT_EQ(back.step, 3);
  EXPECT_EQ(back.op, "train_step");
  EXPECT_EQ(back.s_values, r.s_values);
  EXPECT_TRUE(back.u_values[0].empty() && back.u_values[1].empty());
}
