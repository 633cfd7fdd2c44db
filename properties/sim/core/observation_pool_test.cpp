// Observations written over earlier ones (Observer::observe_into, the
// simulator's pool, model/vocab/refill.hpp) must read exactly as fresh ones.
#include <gtest/gtest.h>

#include "model/vocab/observation_binary.hpp"
#include "model/vocab/refill.hpp"
#include "properties/test_util.hpp"
#include "sim/core/generator.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {

// Every field away from its default, every list longer than a small scenario's.
Observation junk() {
  Observation o;
  o.step = 99, o.rank = 7, o.op = "a long op text that no op prints", o.status = Status::Exception;
  o.message = "an earlier observation's long message";
  o.grads = std::vector<Name>(9, "an.adapter.name.longer.than.sso");
  o.index = 42, o.disabled = true, o.opt_missing = 5, o.opt_total = 6;
  o.active = o.opt_unregistered = o.reload_diff = o.reload_coincident = o.replica_diff =
      std::vector<Name>(9, "lin9.lora_A.junk_adapter_name");
  o.groups.assign(9, {"junk_group_name_long", ShardedState::Unsharded});
  o.params.assign(20, {"lin9.lora_B.junk_adapter_name", "junk_group", true, 1, Device::Meta, DType::BF16});
  LayerObs l{"junk_layer_name_long", "junk_group", {"a", "b", "c"}, WeightClass::Corrupt, WeightClass::ExtraDelta, 3, 5};
  o.layers.assign(9, l);
  Collective c{CollOp::Broadcast, "junk.collective.group", 77, DType::BF16, {{"lin9.lora_A.junk_adapter_name", 3}}};
  c.parts.resize(12, c.parts[0]);
  o.collectives.assign(9, c);
  o.deltas.assign(9, {"junk_adapter", WeightClass::Corrupt});
  o.saved.assign(9, {"lin9.lora_A.junk_adapter_name", 3, 4, DType::BF16});
  o.sharded_bytes = o.peak_unsharded = std::vector<OwnerBytes>(9, {"junk_owner", 11});
  return o;
}

// Refill's spares hold elements of earlier lists: cleared, a fresh observation is made of new ones.
void clear_spares() {
  refill_spares<std::string>().clear(), refill_spares<GroupObs>().clear(), refill_spares<ParamObs>().clear();
  refill_spares<LayerObs>().clear(), refill_spares<CollPart>().clear(), refill_spares<Collective>().clear();
  refill_spares<DeltaObs>().clear(), refill_spares<SavedObs>().clear(), refill_spares<OwnerBytes>().clear();
}

// Equal in every field, the ones equality skips too (the binary codec writes them all).
void expect_same(const Observation& fresh, const Observation& reused, const std::string& where) {
  EXPECT_TRUE(fresh == reused) << where;
  EXPECT_EQ(observations_hash({fresh}), observations_hash({reused})) << where;
}

std::vector<SeqFile> generated(int n) {
  std::vector<SeqFile> out;
  for (int s = 1; s <= n; ++s) {
    Prng rng(static_cast<uint64_t>(s));
    GenOptions opt;
    opt.world = 1 + s % 4;
    opt.rank_op_percent = 30;
    opt.checkpoint_percent = s % 5 == 0 ? 30 : 0;
    opt.modules_to_save_percent = s % 7 == 0 ? 50 : 0;
    out.push_back(generate_seq(rng, opt));
  }
  return out;
}

}  // namespace

// One rank's model observed after every op, fresh and into a junk-filled observation.
TEST(ObservationPool, ObserveIntoAnEarlierObservationWritesEveryField) {
  for (const SeqFile& f : generated(200)) {
    Topology topo = compile_topology(f);
    RankModel m(topo, 0);
    for (size_t i = 0; i < f.ops.size(); ++i) {
      if (!f.ops[i].runs_on(0)) continue;
      const OpResult& r = m.apply(f.ops[i]);
      clear_spares();
      const Observation fresh = m.observer().observe(static_cast<int>(i) + 1, f.ops[i], r);
      Observation reused = junk();
      m.observer().observe_into(reused, static_cast<int>(i) + 1, f.ops[i], r);
      expect_same(fresh, reused, print_seq(f) + "step " + std::to_string(i + 1));
    }
  }
}

// Whole runs: the same sequence after the pool was filled with other sequences' observations
// (and junk) gives the same observations, findings and trace hash as the first time.
TEST(ObservationPool, RunsOverRecycledObservationsGiveTheSameResults) {
  const std::vector<SeqFile> files = generated(120);
  std::vector<RunResult> first;
  for (const SeqFile& f : files) first.push_back(run_checked(f));
  for (size_t k = 0; k < files.size(); ++k) {
    const SeqFile& other = files[(k * 7 + 3) % files.size()];
    recycle(run_checked(other));
    RunResult junk_run;
    junk_run.observations.assign(40, junk());
    recycle(std::move(junk_run));
    RunResult again = run_checked(files[k]);
    ASSERT_EQ(again.observations.size(), first[k].observations.size()) << print_seq(files[k]);
    for (size_t i = 0; i < again.observations.size(); ++i)
      expect_same(first[k].observations[i], again.observations[i], print_seq(files[k]) + "observation " + std::to_string(i));
    EXPECT_EQ(again.trace_hash, first[k].trace_hash) << print_seq(files[k]);
    EXPECT_EQ(again.findings, first[k].findings) << print_seq(files[k]);
  }
}

// A shorter list keeps its first elements' buffers; a dropped element's buffers go to the spares.
TEST(ObservationPool, RefillOverwritesInPlaceAndTrimsTheRest) {
  std::vector<std::string> v{"first element, longer than sso", "second", "third"};
  const char* buffer = v[0].data();
  {
    Refill<std::string> fill(v);
    fill.next() = "short";
  }
  ASSERT_EQ(v, std::vector<std::string>{"short"});
  EXPECT_EQ(v[0].data(), buffer);  // assigned in place, not reallocated
  {
    Refill<std::string> fill(v);
    fill.next() = "a";
    fill.next() = "b";
    fill.next() = "c";
  }
  EXPECT_EQ(v, (std::vector<std::string>{"a", "b", "c"}));
  {
    Refill<std::string> fill(v);  // nothing written: empty
  }
  EXPECT_TRUE(v.empty());
}

// Simulators take the ranks a finished one left (RankModel::rebind): a model that ran another
// sequence, on another topology and rank, must run each op as a new model does.
TEST(ObservationPool, ARankModelTakenFromAnotherSequenceRunsAsANewOne) {
  const std::vector<SeqFile> files = generated(200);
  for (size_t i = 0; i < files.size(); ++i) {
    const SeqFile& earlier = files[i];
    const SeqFile& f = files[(i * 7 + 3) % files.size()];
    Topology earlier_topo = compile_topology(earlier), topo = compile_topology(f);
    const int earlier_rank = earlier.scenario.world - 1;
    RankModel taken(earlier_topo, earlier_rank);
    for (const Op& op : earlier.ops)
      if (op.runs_on(earlier_rank)) taken.apply(op);
    taken.rebind(topo, 0);
    RankModel fresh(topo, 0);
    for (size_t k = 0; k < f.ops.size(); ++k) {
      if (!f.ops[k].runs_on(0)) continue;
      const int step = static_cast<int>(k) + 1;
      const OpResult& a = fresh.apply(f.ops[k]);
      const Observation want = fresh.observer().observe(step, f.ops[k], a);
      const OpResult& b = taken.apply(f.ops[k]);
      const Observation got = taken.observer().observe(step, f.ops[k], b);
      expect_same(want, got, print_seq(earlier) + "then\n" + print_seq(f) + "step " + std::to_string(step));
      if (!(want == got)) return;
    }
  }
}
