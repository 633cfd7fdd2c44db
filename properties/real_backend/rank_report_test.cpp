// The rank report's byte format (real_backend/rank_report.cpp): a report
// crosses a pipe, so a rank that dies mid-write leaves a truncated record,
// which must read as "incomplete", never as a report or a crash.
#include <gtest/gtest.h>

#include "properties/every_field_observation.hpp"
#include "real_backend/rank_report.hpp"

using namespace fsdpsim;
using namespace fsdpsim::real;

namespace {
RankReport sample(int step) {
  RankReport r;
  static_cast<Observation&>(r) = test::every_field_observation();
  r.step = step;
  r.layers[0].stored_alt = 1u << 2;  // a rank sends none, but the codec carries them
  r.merged = {{"default"}, {}};
  r.present = {1, 0};
  r.u_registered = {1, 0};
  r.whole = {0, 1};
  r.adam_steps = {0, 3};
  r.s_values = {{1.5f, -2.0f}, {}};
  r.u_values = {{1.5f, -2.0f, 3.0f}, {}};
  r.delta_layer = 1;
  r.delta_values = {{kDeltaColumns, {2, 4, 3}, {0.5f, -1.0f}}, {kDeltaRows, {2, 4, 3}, {}}};  // an empty part too
  return r;
}
}  // namespace

TEST(RankReport, RoundTripsEveryField) {
  std::string bytes;
  write_report(bytes, sample(7));
  write_report(bytes, sample(8));
  size_t pos = 0;
  RankReport a, b;
  ASSERT_TRUE(read_report(bytes, &pos, &a));
  ASSERT_TRUE(read_report(bytes, &pos, &b));
  EXPECT_EQ(pos, bytes.size());
  RankReport want = sample(7);
  // Every observation field (the one field list), then the report's own.
  EXPECT_TRUE(observation_diff(a, want).empty()) << observation_diff(a, want).at(0);
  EXPECT_EQ(a.reload_coincident, want.reload_coincident);  // not compared by observation_diff
  Observation fresh;
  for_each_field_pair(a, fresh, [&](const FieldInfo& f, const auto& x, const auto& d) {
    EXPECT_FALSE(x == d) << f.key << ": the sample leaves it at its default, so nothing checks it round-trips";
  });
  EXPECT_EQ(a.merged, want.merged);
  EXPECT_EQ(a.present, want.present);
  EXPECT_EQ(a.u_registered, want.u_registered);
  EXPECT_EQ(a.whole, want.whole);
  EXPECT_EQ(a.adam_steps, want.adam_steps);
  EXPECT_EQ(a.s_values, want.s_values);
  EXPECT_EQ(a.u_values, want.u_values);
  EXPECT_EQ(a.delta_layer, want.delta_layer);
  ASSERT_EQ(a.delta_values.size(), want.delta_values.size());
  for (size_t i = 0; i < a.delta_values.size(); ++i) {
    EXPECT_EQ(a.delta_values[i].form, want.delta_values[i].form);
    EXPECT_EQ(a.delta_values[i].shape, want.delta_values[i].shape);
    EXPECT_EQ(a.delta_values[i].values, want.delta_values[i].values);
  }
}

// Every prefix of a record is incomplete: a cut string or count stops the
// reader (ByteReader clears ok) instead of reading a count from the middle of
// a string and resizing to it.
TEST(RankReport, EveryTruncationReadsAsIncomplete) {
  std::string full;
  write_report(full, sample(3));
  for (size_t n = 0; n < full.size(); ++n) {
    size_t pos = 0;
    RankReport r;
    EXPECT_FALSE(read_report(full.substr(0, n), &pos, &r)) << "a record cut to " << n << " of " << full.size() << " bytes";
  }
}

TEST(RankReport, ATruncatedSecondRecordLeavesTheFirstReadable) {
  std::string bytes;
  write_report(bytes, sample(1));
  const size_t first = bytes.size();
  write_report(bytes, sample(2));
  bytes.resize(bytes.size() - 5);
  size_t pos = 0;
  RankReport r;
  ASSERT_TRUE(read_report(bytes, &pos, &r));
  EXPECT_EQ(pos, first);
  EXPECT_FALSE(read_report(bytes, &pos, &r));
  EXPECT_EQ(pos, first) << "a failed read leaves the position where the record starts";
}
