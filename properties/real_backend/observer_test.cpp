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

// Rank 0's report after `merge` at step 1: every parameter present on its shard at its initial
// values, groups and merged adapters as given.
RankReport merge_report(const Layout& layout, ShardedState state, std::vector<std::string> merged) {
  RankReport rep;
  rep.step = 1;
  rep.op = "merge";
  rep.groups = {{"root", state}};
  rep.merged = {std::move(merged)};
  const size_t n = layout.params.size();
  rep.present.assign(n, 1);
  rep.u_registered.assign(n, 0);
  rep.whole.assign(n, 0);
  rep.u_values.assign(n, {});
  for (size_t p = 0; p < n; ++p) rep.s_values.push_back(initial_values(layout, kSeed, static_cast<int>(p)));
  return rep;
}

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
    RankReport rep = merge_report(layout, ShardedState::Sharded, merged ? std::vector<std::string>{"a"} : std::vector<std::string>{});
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
  rep.delta_values = {DeltaValue{form, {t.layout.layers[0].out, t.layout.layers[0].in}, d}};
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
}

// delta_weight on an experts layer (lora/layer.py::ParamWrapper.get_delta_weight): the observer
// judges every value too, against its own per-expert B @ A * scaling of the ranks' shards, on
// the part the value holds; the rank gives values, never a class. World 3, two experts: W's
// Shard(0) leaves rank 2 without an expert, and B's three out rows give each rank one column.
namespace {
struct Experts {
  Layout layout = make_layout(parse_seq(
      "world 3\nlayer lin0 4 3 experts=2\nadapter a r=2 alpha=4 targets=lin0 init=random\nfully_shard root\n---\n"
      "delta_weight lin0\n",
      "<test>"));
  static constexpr int64_t E = 2, in = 4, out = 3, r = 2;
  std::vector<float> delta;  // (E, in, out) row-major: delta[e, i, o] = sum_k B[o, k*E + e] * A[e*r + k, i] * scaling

  Experts() {
    const LayerSpec& ls = layout.layers[0];
    auto a = initial_values(layout, kSeed, ls.lora_a[0]);
    auto b = initial_values(layout, kSeed, ls.lora_b[0]);
    const double scaling = lora_scaling(layout, 0);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < out; ++o) {
          double d = 0;
          for (int64_t k = 0; k < r; ++k) d += double{b[o * r * E + k * E + e]} * a[(e * r + k) * in + i];
          delta.push_back(static_cast<float>(d * scaling));
        }
  }
  // Expert e's (in, out) block, and column o of every expert ((E, in, 1)).
  std::vector<float> expert(int64_t e) const { return {delta.begin() + e * in * out, delta.begin() + (e + 1) * in * out}; }
  std::vector<float> column(int64_t o) const {
    std::vector<float> c;
    for (int64_t x = 0; x < E * in; ++x) c.push_back(delta[x * out + o]);
    return c;
  }

  // Rank `rank`'s report of delta_weight (its shards as initialised; the other ranks have
  // reported nothing, so the observer reads their initial chunks), the rank claiming `claim`.
  WeightClass judge(int rank, DeltaValue value, WeightClass claim = WeightClass::Exact) const {
    RankReport rep;
    rep.step = 1;
    rep.rank = rank;
    rep.op = "delta_weight lin0";
    rep.groups = {{"root", ShardedState::Sharded}};
    rep.merged = {{}};
    const size_t n = layout.params.size();
    rep.present.assign(n, 1);
    rep.u_registered.assign(n, 0);
    rep.whole.assign(n, 0);
    rep.u_values.assign(n, {});
    for (size_t p = 0; p < n; ++p) {
      const ParamSpec& ps = layout.params[p];
      std::vector<float> full = initial_values(layout, kSeed, static_cast<int>(p)), chunk(ps.chunk_numel(), 0.0f);
      std::copy_n(full.begin() + rank * ps.chunk_numel(), ps.local_rows(rank) * ps.cols, chunk.begin());
      rep.s_values.push_back(ps.group >= 0 ? chunk : full);
    }
    rep.deltas = {{"a", claim}};
    rep.delta_layer = 0;
    rep.delta_values = {std::move(value)};
    std::vector<std::vector<RankReport>> per_rank(3);
    per_rank[rank] = {rep};
    return observe(layout, kSeed, per_rank).at(0).deltas.at(0).value;
  }
};
}  // namespace

TEST(Observer, AnExpertsDeltaIsJudgedByItsValues) {
  Experts t;
  const std::vector<int64_t> shape{Experts::E, Experts::in, Experts::out};
  EXPECT_EQ(t.judge(0, {kDeltaFull, shape, t.delta}, WeightClass::Corrupt), WeightClass::Exact)
      << "the observer's class, not the rank's";
  std::vector<float> off = t.delta;
  off[7] += 0.5f;
  EXPECT_EQ(t.judge(0, {kDeltaFull, shape, off}), WeightClass::Corrupt) << "one element off";
  std::vector<float> twice = t.delta;
  for (auto& v : twice) v *= 2;
  EXPECT_EQ(t.judge(1, {kDeltaFull, shape, twice}), WeightClass::Corrupt);
  // this rank's experts (W's Shard(0)): rank 0 holds expert 0, rank 1 expert 1
  EXPECT_EQ(t.judge(0, {kDeltaRows, shape, t.expert(0)}), WeightClass::Exact);
  EXPECT_EQ(t.judge(1, {kDeltaRows, shape, t.expert(1)}), WeightClass::Exact);
  EXPECT_EQ(t.judge(1, {kDeltaRows, shape, t.expert(0)}), WeightClass::Corrupt) << "another rank's expert";
  // this rank's out columns of every expert (B's Shard(0) on out)
  EXPECT_EQ(t.judge(2, {kDeltaColumns, shape, t.column(2)}), WeightClass::Exact);
  EXPECT_EQ(t.judge(2, {kDeltaColumns, shape, t.column(1)}), WeightClass::Corrupt) << "another rank's column";
  // W's padded chunk: one expert per rank here
  EXPECT_EQ(t.judge(1, {kDeltaChunk, shape, t.expert(1)}), WeightClass::Exact);
  // E == 1's get_delta_weight returns Linear's (out, in) B @ A: not the layer's delta, whatever its values
  EXPECT_EQ(t.judge(0, {kDeltaFull, {Experts::out, Experts::in * Experts::E}, t.delta}), WeightClass::Corrupt);
}

TEST(Observer, ARankHoldingNoExpertsIsJudgedNotDefaulted) {
  Experts t;
  const std::vector<int64_t> shape{Experts::E, Experts::in, Experts::out};
  EXPECT_EQ(t.judge(2, {kDeltaRows, shape, {}}, WeightClass::Corrupt), WeightClass::Exact)
      << "rank 2 holds no expert: its empty value is the empty slice";
  EXPECT_EQ(t.judge(2, {kDeltaRows, shape, t.expert(0)}, WeightClass::Exact), WeightClass::Corrupt)
      << "values where the slice is empty";
  EXPECT_EQ(t.judge(0, {kDeltaRows, shape, {}}), WeightClass::Corrupt) << "rank 0 holds expert 0";
}

// A DoRA adapter's merge on a plain weight writes (m / ||W0 + delta||) (W0 + delta) row by row
// (variants.py::DoraLinearVariant.merge_unsafe): the observer replays it from the magnitude's
// values, so the rescaled weight is exact, W0 + delta (the rescaling left out) is not, and W0
// alone is the delta missing.
TEST(Observer, ADoraMergeIsJudgedByItsRescaledValues) {
  const Layout layout = make_layout(parse_seq(
      "world 1\nlayer lin0 4 3\nadapter a r=2 alpha=4 targets=lin0 init=random use_dora\nfully_shard root\n---\nmerge\n", "<test>"));
  const LayerSpec& ls = layout.layers[0];
  ASSERT_GE(ls.lora_m[0], 0);
  const auto w0 = initial_values(layout, kSeed, ls.weight);
  const auto a = initial_values(layout, kSeed, ls.lora_a[0]);
  const auto b = initial_values(layout, kSeed, ls.lora_b[0]);
  const double scaling = lora_scaling(layout, 0);
  std::vector<float> merged_plain(w0.size()), rescaled(w0.size()), mag(static_cast<size_t>(ls.out));
  for (int64_t o = 0; o < ls.out; ++o) {
    double norm = 0;
    for (int64_t i = 0; i < ls.in; ++i) {
      double d = 0;
      for (int k = 0; k < 2; ++k) d += double{b[o * 2 + k]} * a[k * ls.in + i];
      merged_plain[o * ls.in + i] = static_cast<float>(w0[o * ls.in + i] + d * scaling);
      norm += double{merged_plain[o * ls.in + i]} * merged_plain[o * ls.in + i];
    }
    mag[o] = static_cast<float>(1.5 * std::sqrt(norm));  // a step moved the magnitude: 1.5 x the norm
    for (int64_t i = 0; i < ls.in; ++i) rescaled[o * ls.in + i] = 1.5f * merged_plain[o * ls.in + i];
  }
  auto classify = [&](const std::vector<float>& w) {
    RankReport rep = merge_report(layout, ShardedState::Unsharded, {"a"});
    rep.s_values[ls.lora_m[0]] = mag;
    rep.s_values[ls.weight] = w;
    return observe(layout, kSeed, {{rep}}).at(0).layers.at(0).stored;
  };
  EXPECT_EQ(classify(rescaled), WeightClass::Exact);
  EXPECT_EQ(classify(merged_plain), WeightClass::Corrupt);
  EXPECT_EQ(classify(w0), WeightClass::MissingDelta);
}
