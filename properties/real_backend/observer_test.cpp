// The observer's classification of a stored base weight (real_backend/observer.cpp):
// W - W0 against the sum of merged deltas B @ A * scaling, within 1e-4 of the
// largest delta in play plus 2e-6. These tests sit on both sides of that line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "real_backend/observer.hpp"
#include "real_backend/values.hpp"

using namespace fsdpsim;
using namespace fsdpsim::real;

namespace {
constexpr uint64_t kSeed = 5;

struct OneLayer {
  Layout layout = make_layout(parse_seq(
      "world 1\nlayer lin0 4 3\nadapter a r=2 alpha=4 targets=lin0 init=random\nfully_shard root\n---\nmerge\n", "<test>"));
  std::vector<float> delta;  // B @ A * scaling, (out, in) row-major, in double then rounded
  float tolerance = 0;

  OneLayer() {
    const LayerSpec& ls = layout.layers[0];
    auto a = initial_values(layout, kSeed, ls.lora_a[0]);
    auto b = initial_values(layout, kSeed, ls.lora_b[0]);
    const double scaling = lora_scaling(layout, 0);
    float largest = 0;
    for (int64_t o = 0; o < ls.out; ++o)
      for (int64_t i = 0; i < ls.in; ++i) {
        double d = 0;
        for (int k = 0; k < 2; ++k) d += double{b[o * 2 + k]} * a[k * ls.in + i];
        delta.push_back(static_cast<float>(d * scaling));
        largest = std::max(largest, std::fabs(delta.back()));
      }
    tolerance = 1e-4f * largest + 2e-6f;
  }

  // The report of rank 0 after `merge`, its stored weight W0 + factor * delta
  // with `offset` added to one element.
  WeightClass classify(float factor, float offset, bool zero_b = false, uint8_t* alt = nullptr, bool merged = true) const {
    RankReport rep;
    rep.step = 1;
    rep.op = "merge";
    rep.groups = {{"root", ShardedState::Sharded}};
    rep.merged = {merged ? std::vector<std::string>{"a"} : std::vector<std::string>{}};
    const size_t n = layout.params.size();
    rep.present.assign(n, 1);
    rep.u_registered.assign(n, 0);
    rep.whole.assign(n, 0);
    rep.u_values.assign(n, {});
    for (size_t p = 0; p < n; ++p) rep.s_values.push_back(initial_values(layout, kSeed, static_cast<int>(p)));
    if (zero_b) std::fill(rep.s_values[layout.layers[0].lora_b[0]].begin(), rep.s_values[layout.layers[0].lora_b[0]].end(), 0.0f);
    auto& w = rep.s_values[layout.layers[0].weight];
    for (size_t i = 0; i < w.size(); ++i) w[i] += factor * delta[i];
    w[5] += offset;
    auto obs = observe(layout, kSeed, {{rep}});
    if (alt) *alt = obs.at(0).layers.at(0).stored_alt;
    return obs.at(0).layers.at(0).stored;
  }
};
}  // namespace

TEST(Observer, AMergedDeltaWithinTheToleranceIsExact) {
  OneLayer t;
  ASSERT_GT(t.tolerance, 2e-6f) << "a random-init B gives a delta to scale by";
  EXPECT_EQ(t.classify(1, 0), WeightClass::Exact);
  EXPECT_EQ(t.classify(1, 0.8f * t.tolerance), WeightClass::Exact);
  EXPECT_EQ(t.classify(1, -0.8f * t.tolerance), WeightClass::Exact);
}

TEST(Observer, OneElementJustPastTheToleranceIsCorrupt) {
  OneLayer t;
  EXPECT_EQ(t.classify(1, 1.25f * t.tolerance), WeightClass::Corrupt);
  EXPECT_EQ(t.classify(1, -1.25f * t.tolerance), WeightClass::Corrupt);
}

TEST(Observer, TheDeltaMissingOrTwiceIsNamedAsSuch) {
  OneLayer t;
  EXPECT_EQ(t.classify(0, 0), WeightClass::MissingDelta);
  EXPECT_EQ(t.classify(0, 0.8f * t.tolerance), WeightClass::MissingDelta);
  EXPECT_EQ(t.classify(2, 0), WeightClass::Corrupt) << "twice one adapter's delta is no subset of the adapters";
}

// A B that is zero (a row no step moved) makes every delta zero: the weight W0 is
// exact for the merged layer and fits "the delta missing" just as well, and a stale
// merge (the adapter changed since, by zero on these rows) too.
TEST(Observer, AZeroDeltaNamesTheOtherClassesTheValuesFit) {
  OneLayer t;
  uint8_t alt = 0xff;
  EXPECT_EQ(t.classify(0, 0, /*zero_b=*/true, &alt), WeightClass::Exact);
  EXPECT_EQ(alt, (1u << static_cast<int>(WeightClass::MissingDelta)) | (1u << static_cast<int>(WeightClass::Corrupt)));
  // a nonzero delta tells them apart: no alternative
  EXPECT_EQ(t.classify(1, 0, false, &alt), WeightClass::Exact);
  EXPECT_EQ(alt, 0u);
  EXPECT_EQ(t.classify(0, 0, false, &alt), WeightClass::MissingDelta);
  EXPECT_EQ(alt, 0u);
  // no adapter merged, its delta zero on these rows: W0 is exact and fits the delta kept by
  // mistake (extra); never merged on this rank, it left no copy to be stale, so not corrupt
  // (a merged-then-dropped one does: corpus/divergences/unmerged_zero_rows_stale_copy_world3.seq)
  EXPECT_EQ(t.classify(0, 0, /*zero_b=*/true, &alt, /*merged=*/false), WeightClass::Exact);
  EXPECT_EQ(alt, 1u << static_cast<int>(WeightClass::ExtraDelta));
}

// delta_weight on a Linear layer: the observer judges what get_delta_weight returned
// against the full B @ A * scaling of the ranks' shards, on the rows it holds.
namespace {
WeightClass judge_delta(const OneLayer& t, DeltaForm form, float factor, int world_rows_rank = 0) {
  RankReport rep;
  rep.step = 1;
  rep.op = "delta_weight lin0";
  rep.groups = {{"root", ShardedState::Sharded}};
  rep.merged = {{}};
  const size_t n = t.layout.params.size();
  rep.present.assign(n, 1);
  rep.u_registered.assign(n, 0);
  rep.whole.assign(n, 0);
  rep.u_values.assign(n, {});
  for (size_t p = 0; p < n; ++p) rep.s_values.push_back(initial_values(t.layout, kSeed, static_cast<int>(p)));
  rep.deltas = {{"a", WeightClass::Exact}};
  rep.delta_layer = 0;
  std::vector<float> d = t.delta;
  for (auto& v : d) v *= factor;
  if (form == kDeltaChunk) d.resize(d.size() / 3 * (world_rows_rank + 1));  // world 1: the chunk is every row
  rep.delta_values = {d};
  rep.delta_form = {static_cast<uint8_t>(form)};
  return observe(t.layout, kSeed, {{rep}}).at(0).deltas.at(0).value;
}
}  // namespace

TEST(Observer, ALinearDeltaIsJudgedByItsValues) {
  OneLayer t;
  EXPECT_EQ(judge_delta(t, kDeltaFull, 1), WeightClass::Exact);
  EXPECT_EQ(judge_delta(t, kDeltaFull, 2), WeightClass::Corrupt) << "twice the delta is not B @ A * scaling";
  EXPECT_EQ(judge_delta(t, kDeltaFull, 0), WeightClass::Corrupt);
  EXPECT_EQ(judge_delta(t, kDeltaChunk, 1, 2), WeightClass::Exact) << "world 1: the rank's chunk is the whole delta";
  EXPECT_EQ(judge_delta(t, kDeltaPartial, 1), WeightClass::Exact) << "one rank's Partial value is the sum";
  EXPECT_EQ(judge_delta(t, kDeltaPartial, 0.5f), WeightClass::Corrupt);
  EXPECT_EQ(judge_delta(t, kDeltaJudged, 2), WeightClass::Exact) << "an experts delta keeps the rank's own judgement";
}
