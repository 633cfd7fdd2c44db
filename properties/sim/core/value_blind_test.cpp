// reconcile_value_blind: a value backend's reading takes the model's only where
// the values fit the model's reading as well; elsewhere a difference stays.
#include "sim/core/value_blind.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include "model/vocab/observation_json.hpp"

namespace fsdpsim {
namespace {

uint8_t bit(WeightClass c) { return static_cast<uint8_t>(1u << static_cast<int>(c)); }

Observation with_layer(WeightClass stored, WeightClass registered, uint8_t stored_alt = 0, uint8_t registered_alt = 0) {
  Observation o;
  o.step = 9;
  o.rank = 0;
  o.op = "set_adapter default";
  LayerObs l;
  l.name = "lin1";
  l.group = "root";
  l.stored = stored, l.registered = registered, l.stored_alt = stored_alt, l.registered_alt = registered_alt;
  o.layers.push_back(l);
  return o;
}

TEST(ValueBlind, TakesTheModelsClassWhereTheValuesFitIt) {
  // seed 21350: a B row no step moved (a dead ReLU unit) makes S - W0 zero on rank 0's rows.
  Observation model = with_layer(WeightClass::ExtraDelta, WeightClass::Exact);
  Observation real = with_layer(WeightClass::Exact, WeightClass::Exact, bit(WeightClass::ExtraDelta));
  auto seen = reconcile_value_blind({model}, {real});
  EXPECT_EQ(seen.at(0).layers.at(0).stored, WeightClass::ExtraDelta);
  EXPECT_EQ(seen.at(0).layers.at(0).stored_alt, 0u) << "the reading is settled: S5 judges it alone";
  EXPECT_TRUE(observation_diff(model, seen.at(0)).empty());
  // a reading that already is the model's is settled too
  Observation same = with_layer(WeightClass::Exact, WeightClass::Exact, bit(WeightClass::ExtraDelta));
  EXPECT_EQ(reconcile_value_blind({with_layer(WeightClass::Exact, WeightClass::Exact)}, {same}).at(0).layers.at(0).stored_alt, 0u);
}

TEST(ValueBlind, KeepsADifferenceTheValuesShow) {
  Observation model = with_layer(WeightClass::Corrupt, WeightClass::MissingDelta);
  Observation real = with_layer(WeightClass::Exact, WeightClass::Exact, bit(WeightClass::ExtraDelta));
  auto seen = reconcile_value_blind({model}, {real});
  EXPECT_EQ(seen.at(0).layers.at(0).stored, WeightClass::Exact);
  EXPECT_EQ(seen.at(0).layers.at(0).stored_alt, bit(WeightClass::ExtraDelta)) << "unsettled: kept";
  EXPECT_EQ(seen.at(0).layers.at(0).registered, WeightClass::Exact);  // no registered_alt: values tell
  EXPECT_EQ(observation_diff(model, seen.at(0)).size(), 1u);
  // an observation of another rank is not matched
  Observation other = real;
  other.rank = 1;
  seen = reconcile_value_blind({with_layer(WeightClass::ExtraDelta, WeightClass::Exact)}, {other});
  EXPECT_EQ(seen.at(0).layers.at(0).stored, WeightClass::Exact);
}

TEST(ValueBlind, AnUnjudgedClassIsNotedAndTakesTheModels) {
  Observation model = with_layer(WeightClass::Corrupt, WeightClass::Corrupt);
  model.deltas = {{"a", WeightClass::Corrupt}};
  Observation up = with_layer(WeightClass::Unjudged, WeightClass::Exact);
  up.deltas = {{"a", WeightClass::Unjudged}};
  std::vector<Observation> seen = {up};
  auto notes = settle_unjudged({model}, &seen);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0], "step 9 rank 0 (set_adapter default): lin1 stored unjudged (model: corrupt)");
  EXPECT_EQ(notes[1], "step 9 rank 0 (set_adapter default): delta of a unjudged (model: corrupt)");
  EXPECT_EQ(seen[0].layers[0].stored, WeightClass::Corrupt);
  EXPECT_EQ(seen[0].deltas[0].value, WeightClass::Corrupt);
  EXPECT_EQ(seen[0].layers[0].registered, WeightClass::Exact) << "a judged class stays: a difference to report";
  std::vector<Observation> judged = {with_layer(WeightClass::Exact, WeightClass::Exact)};
  EXPECT_TRUE(settle_unjudged({model}, &judged).empty());
}

TEST(ValueBlind, AnUnjudgedCrossPairingIsNotedAndTakesTheModels) {
  Observation model;
  model.step = 2, model.op = "unshard lin0";
  model.message = "cross-paired: rank 0 in all_gather(lin0, 52) of lin0.weight at step 2";
  Observation up = model;
  up.message = "unjudged: the bytes delivered are not the ranks' own: " + model.message;
  std::vector<Observation> seen = {up};
  auto notes = settle_unjudged({model}, &seen);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "step 2 rank 0 (unshard lin0): cross-pairing unjudged (unjudged: the bytes delivered are not the ranks' own: ...)");
  EXPECT_EQ(seen[0].message, model.message);
  std::vector<Observation> other = {up};
  other[0].message = "unjudged: x: cross-paired: rank 0 in all_gather(lin1, 52) of lin1.weight at step 2";
  EXPECT_TRUE(settle_unjudged({model}, &other).empty()) << "another cross-pairing is a difference";
}

Observation reload(std::vector<std::string> diff, std::vector<std::string> coincident = {}) {
  Observation o;
  o.step = 13, o.rank = 1, o.op = "load_adapters";
  o.reload_diff.assign(diff.begin(), diff.end());
  o.reload_coincident.assign(coincident.begin(), coincident.end());
  return o;
}

TEST(ValueBlind, ReloadTakesTheModelsSetOnlyOverCoincidentParameters) {
  const std::string a = "lin0.lora_A.default", b = "lin0.lora_B.default";
  // seed 23938: rank 1 took in rank 0's B rows, equal to its own by value.
  EXPECT_EQ(reconcile_value_blind({reload({a, b})}, {reload({a}, {b})}).at(0).reload_diff, (std::vector<std::string>{a, b}));
  EXPECT_EQ(reconcile_value_blind({reload({a, b})}, {reload({a})}).at(0).reload_diff, std::vector<std::string>{a});
  // B is coincident but A is not: the values show A unchanged
  EXPECT_EQ(reconcile_value_blind({reload({a, b})}, {reload({}, {b})}).at(0).reload_diff, std::vector<std::string>{});
  // the values say A differs: the model's "nothing differs" is not taken
  EXPECT_EQ(reconcile_value_blind({reload({b})}, {reload({a}, {b})}).at(0).reload_diff, std::vector<std::string>{a});
}

Observation replicas(std::vector<std::string> diff, std::vector<std::string> coincident = {}) {
  Observation o;
  o.step = 4, o.rank = 0, o.op = "train_step";
  o.replica_diff.assign(diff.begin(), diff.end());
  o.replica_coincident.assign(coincident.begin(), coincident.end());
  return o;
}

TEST(ValueBlind, ReplicasTakeTheModelsSetOnlyOverCoincidentOnes) {
  const std::string a = "lin0.lora_B.late", b = "lin1.lora_B.late";
  // AdamW's first step left lin1's one-row B equal on both ranks with per-rank data.
  EXPECT_EQ(reconcile_value_blind({replicas({a, b})}, {replicas({a}, {b})}).at(0).replica_diff, (std::vector<std::string>{a, b}));
  EXPECT_EQ(reconcile_value_blind({replicas({b})}, {replicas({}, {b})}).at(0).replica_diff, std::vector<std::string>{b});
  // not coincident: the values' "equal" stands against the model's "apart"
  EXPECT_EQ(reconcile_value_blind({replicas({a, b})}, {replicas({a})}).at(0).replica_diff, std::vector<std::string>{a});
  // the values say A is apart and the model does not: not taken
  EXPECT_EQ(reconcile_value_blind({replicas({b})}, {replicas({a}, {b})}).at(0).replica_diff, std::vector<std::string>{a});
}

TEST(ValueBlind, AlternativesRoundTripThroughJson) {
  Observation o = with_layer(WeightClass::Exact, WeightClass::MissingDelta, bit(WeightClass::ExtraDelta),
                             bit(WeightClass::Exact) | bit(WeightClass::ExtraDelta));
  o.reload_coincident = {"lin1.lora_B.default"};
  o.replica_coincident = {"lin1.lora_B.late"};
  std::ostringstream os;
  print_json(os, o);
  EXPECT_NE(os.str().find("\"stored_alt\":[\"extra_delta\"]"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("\"registered_alt\":[\"exact\",\"extra_delta\"]"), std::string::npos) << os.str();
  Observation back;
  std::string err;
  ASSERT_TRUE(parse_observation_json(os.str(), &back, &err)) << err;
  EXPECT_EQ(back.layers.at(0).stored_alt, o.layers.at(0).stored_alt);
  EXPECT_EQ(back.layers.at(0).registered_alt, o.layers.at(0).registered_alt);
  EXPECT_EQ(back.reload_coincident, o.reload_coincident);
  EXPECT_EQ(back.replica_coincident, o.replica_coincident);
}

}  // namespace
}  // namespace fsdpsim
