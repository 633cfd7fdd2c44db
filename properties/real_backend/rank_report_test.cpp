// The rank report's byte format (real_backend/rank_report.cpp): a report
// crosses a pipe, so a rank that dies mid-write leaves a truncated record,
// which must read as "incomplete", never as a report or a crash.
#include <gtest/gtest.h>

#include "real_backend/rank_report.hpp"

using namespace fsdpsim;
using namespace fsdpsim::real;

namespace {
RankReport sample(int step) {
  RankReport r;
  r.step = step;
  r.rank = 1;
  r.op = "set_adapter other";
  r.status = Status::KeyError;
  r.message = "KeyError: 3";
  r.index = 3;
  r.has_grads = true;
  r.grads = {"other"};
  r.active = {"default", "other"};
  r.opt_missing = 1;
  r.opt_total = 4;
  r.opt_unregistered = {"lin0.lora_A.default"};
  r.groups = {{"root", ShardedState::Unsharded}, {"lin0", ShardedState::Sharded}};
  r.params = {{"lin0.lora_A.default", "lin0", true, 1, Device::Meta, DType::BF16}};
  r.merged = {{"default"}, {}};
  r.collectives = {{CollOp::AllGather, "lin0", 112, DType::F32, {{"lin0.weight", 100}, {"lin0.bias", 12}}}};
  r.deltas = {{"other", WeightClass::Corrupt}};
  r.saved = {{"lin0.lora_B.other", 10, 20, DType::BF16}};
  r.reload_diff = {"lin1.lora_A.other"};
  r.reload_coincident = {"lin1.lora_B.other"};
  r.sharded_bytes = {{"other", 640}, {"base", 1680}};
  r.peak_unsharded = {{"base", 3360}};
  r.present = {1, 0};
  r.u_registered = {1, 0};
  r.whole = {0, 1};
  r.s_values = {{1.5f, -2.0f}, {}};
  r.u_values = {{1.5f, -2.0f, 3.0f}, {}};
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
  EXPECT_EQ(a.step, 7);
  EXPECT_EQ(b.step, 8);
  EXPECT_EQ(a.op, want.op);
  EXPECT_EQ(a.status, want.status);
  EXPECT_EQ(a.message, want.message);
  EXPECT_EQ(a.index, want.index);
  EXPECT_EQ(a.grads, want.grads);
  EXPECT_EQ(a.active, want.active);
  EXPECT_EQ(a.opt_unregistered, want.opt_unregistered);
  EXPECT_EQ(a.groups, want.groups);
  EXPECT_EQ(a.params, want.params);
  EXPECT_EQ(a.merged, want.merged);
  EXPECT_EQ(a.collectives, want.collectives);
  EXPECT_EQ(a.deltas, want.deltas);
  EXPECT_EQ(a.saved, want.saved);
  EXPECT_EQ(a.reload_diff, want.reload_diff);
  EXPECT_EQ(a.reload_coincident, want.reload_coincident);
  EXPECT_EQ(a.sharded_bytes, want.sharded_bytes);
  EXPECT_EQ(a.peak_unsharded, want.peak_unsharded);
  EXPECT_EQ(a.present, want.present);
  EXPECT_EQ(a.u_registered, want.u_registered);
  EXPECT_EQ(a.whole, want.whole);
  EXPECT_EQ(a.s_values, want.s_values);
  EXPECT_EQ(a.u_values, want.u_values);
}

// Disabled: red on rank_report.cpp as it stands. When a string's bytes are cut
// short, Reader::str() fails without advancing, the next count is read from
// the middle of that string, and resize() throws std::length_error (11 of this
// record's 774 prefixes). Enable with the Reader fix (stop reading once !ok).
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
