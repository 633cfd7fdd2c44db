// Root-cause attribution (sim/findings/root_cause.cpp) over the model's provenance
// (model/machine/provenance.hpp), and the catalogue it names (sim/findings/root_cause_table.cpp).
#include <gtest/gtest.h>

#include <set>

#include "properties/sim/findings/triage_util.hpp"
#include "properties/test_util.hpp"
#include "sim/core/generator.hpp"
#include "sim/core/prng.hpp"
#include "sim/findings/root_cause_catalogue.hpp"
#include "sim/findings/triage.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {

// Seed 000's scenario at world 2, reshard_after_forward=false, with `ops` after it.
SeqFile seed000_with(const std::string& ops, const std::string& profile = "upstream") {
  return parse_seq(seed000_header(2, profile) + ops, "<test>");
}

}  // namespace

TEST(RootCause, Seed000IsSetAdapterFlagsDroppedAtReshard) {
  TriageResult t = triaged(corpus("seed000_merged_set_adapter_w2.seq"));
  EXPECT_EQ(t.root_cause.id, "flag-on-copy/set_adapter");
  EXPECT_NE(t.root_cause.how.find("written on the unsharded copy by set_adapter"), std::string::npos) << t.root_cause.how;
  ASSERT_FALSE(t.root_cause.transitions.empty());
  EXPECT_EQ(t.root_cause.transitions[0], Tr::SetAdapter);
  EXPECT_NE(blamed_functions(t.root_cause).find("PeftModel.set_adapter"), std::string::npos);
}

// The id names the mechanism, not the ops before it: seen as S1 (the wrong adapter's step)
// or as S3 (the reshard dropping it), after an eval or an explicit unshard, with unrelated
// ops in front, it is one root cause.
TEST(RootCause, OneMechanismOneIdWhateverThePrefix) {
  std::set<std::string> ids;
  for (const char* ops : {"eval\nset_adapter other\ntrain_step\n", "unshard\nset_adapter other\ntrain_step\ntrain_step\n",
                          "zero_grad\nstate_dict\neval\nmerge\nset_adapter other\ntrain_step\n",
                          "train_step\nforward\nset_adapter other\nbackward\ntrain_step\n"}) {
    TriageResult t = triaged(seed000_with(ops));
    ids.insert(t.root_cause.id);
  }
  EXPECT_EQ(ids, std::set<std::string>{"flag-on-copy/set_adapter"});
}

// A weight edit on U is one mechanism whichever call made it; a disabled forward's unmerge, which
// no caller can reshard before, is another.
TEST(RootCause, WeightEditsOnTheUnshardedCopy) {
  const std::pair<const char*, const char*> cases[] = {
      {"unshard\nmerge\nreshard\n", "weight-on-copy/merge-unmerge"},
      {"merge\nunshard\nunmerge\nreshard\n", "weight-on-copy/merge-unmerge"},
      {"merge\ndisable_enter\neval\nreshard\n", "weight-on-copy/disabled-forward"},
  };
  for (const auto& [ops, id] : cases) {
    TriageResult t = triaged(seed000_with(ops));
    EXPECT_EQ(t.root_cause.id, id) << ops << t.root_cause.how;
  }
}

// DoRA's merge assigns `weight.data` on the sharded DTensor, which keeps its shard
// (corpus/dora/merge_on_the_shard_is_lost.seq): its own id, not a weight edit on the copy.
TEST(RootCause, DoraMergeOnTheShardIsADataAssignment) {
  TriageResult t = triaged(parse_seq_file(std::string(FSDPSIM_SOURCE_DIR) + "/corpus/dora/merge_on_the_shard_is_lost.seq"));
  EXPECT_EQ(t.root_cause.id, "dora-data-assign-on-shard") << t.root_cause.how;
  EXPECT_NE(t.root_cause.how.find("DoRA edit by merge_adapter"), std::string::npos) << t.root_cause.how;
  EXPECT_NE(blamed_functions(t.root_cause).find("DoraLinearVariant.merge_unsafe"), std::string::npos);
  EXPECT_EQ(root_cause_entry(t.root_cause.id).verdict, RootVerdict::Unreported);
}

TEST(RootCause, Seed004IsAnOptimizerCheckpointWhileUnsharded) {
  TriageResult t = triaged(corpus("seed004_eval_then_save_optimizer.seq"));
  EXPECT_EQ(t.root_cause.id, "optimizer-checkpoint-while-unsharded");
  EXPECT_NE(t.root_cause.how.find("left unsharded by"), std::string::npos) << t.root_cause.how;
}

TEST(RootCause, RankDivergentOpsAreMisuse) {
  TriageResult t = triaged(corpus("seed003_rank_divergent_switch.seq"));
  EXPECT_EQ(t.root_cause.id, "rank-divergent-op");
  EXPECT_EQ(root_cause_entry(t.root_cause.id).verdict, RootVerdict::Misuse);
}

// Provenance is recorded beside the model, never in it: the same sequences give the same
// observations, findings and trace hash with and without it.
TEST(RootCause, ProvenanceChangesNoObservation) {
  GenOptions opt;
  opt.world = 2;
  for (uint64_t s = 1; s <= 300; ++s) {
    Prng rng(s);
    SeqFile f = generate_seq(rng, opt);
    Topology topo = compile_topology(f);
    Simulator plain(topo), traced(topo);
    std::vector<Provenance> pv;
    traced.set_provenance(&pv);
    RunResult a = plain.run(f.ops), b = traced.run(f.ops);
    ASSERT_EQ(a.trace_hash, b.trace_hash) << print_seq(f);
    ASSERT_EQ(a.observations.size(), b.observations.size());
    traced.set_provenance(nullptr);
  }
}

TEST(RootCauseCatalogue, EveryEntryIsComplete) {
  std::set<std::string> ids;
  for (const auto& e : root_cause_catalogue()) {
    EXPECT_TRUE(ids.insert(e.id).second) << "duplicate " << e.id;
    EXPECT_NE(e.verdict, RootVerdict::Unreviewed) << e.id;
    EXPECT_FALSE(e.title.empty() || e.mechanism.empty() || e.workaround.empty() || e.fix.empty() || e.affected.empty()) << e.id;
    EXPECT_FALSE(e.verdict_detail.empty()) << e.id;
    const bool needs_citation = e.verdict == RootVerdict::FixedIn || e.verdict == RootVerdict::FixProposed || e.verdict == RootVerdict::Reported;
    if (needs_citation) EXPECT_FALSE(e.citations.empty()) << e.id;
    EXPECT_EQ(e.id.find(' '), std::string::npos) << e.id;
  }
  EXPECT_EQ(root_cause_entry("no-such-mechanism").verdict, RootVerdict::Unreviewed);
  EXPECT_TRUE(is_unreported(RootVerdict::Unreviewed));
  EXPECT_FALSE(is_unreported(RootVerdict::Documented));
  EXPECT_EQ(finding_stem("flag-on-copy/set_adapter"), "flag-on-copy.set_adapter");
}
