// Fix claims (sim/findings/fix_claim.cpp) come from re-runs on the model: a switch "removes" a root
// cause only when the file run again with it shows no finding of that root cause. The
// policy/reference regression is the case where the same corruption moves to an earlier op.
#include <gtest/gtest.h>

#include "properties/sim/findings/triage_util.hpp"
#include "sim/findings/finding_pages.hpp"
#include "sim/findings/fix_claim.hpp"
#include "sim/report/report_html.hpp"
#include "sim/findings/root_cause_catalogue.hpp"
#include "sim/core/simulator.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {

const char* const kPolicyReference = "policy_reference_unmerge_after_eval.seq";
const char* const kMergeUnmerge = "weight-on-copy/merge-unmerge";

// A model timeline of `f`, as `fsdpsim report` draws it.
Timeline model_timeline(const SeqFile& f) {
  Timeline t;
  t.title = "policy_reference.seq";
  t.file = f;
  RunResult r = run_checked(f);
  t.backends.push_back({"model", r.observations, r.findings});
  return t;
}

}  // namespace

TEST(FixClaim, UnmergeFirstMovesThePolicyReferenceCorruptionWithoutRemovingIt) {
  const SeqFile f = corpus(kPolicyReference);
  const FixRerun r = rerun_with_switch(f, "set_adapter_reshard=unmerge_first", kMergeUnmerge);
  ASSERT_TRUE(r.valid);
  EXPECT_FALSE(r.removes());
  ASSERT_FALSE(r.remaining.empty());
  EXPECT_EQ(r.remaining.front().spec, "S2");
  EXPECT_EQ(r.remaining.front().step, 4);  // set_adapter's reshard drops the unmerge made on U
  EXPECT_NE(r.remaining.front().text.find("extra_delta"), std::string::npos) << r.remaining.front().text;
  EXPECT_FALSE(rerun_patched(f, kMergeUnmerge).removes());
  EXPECT_EQ(fixing_switch(f, kMergeUnmerge), "");
  EXPECT_NE(remaining_text(r).find("S2 step 4 rank 0"), std::string::npos) << remaining_text(r);
}

TEST(FixClaim, ASwitchThatRemovesTheRootCauseIsFound) {
  const SeqFile g = corpus("seed004_eval_then_save_optimizer.seq");
  EXPECT_EQ(fixing_switch(g, "optimizer-checkpoint-while-unsharded"), "optimizer_ckpt_reshard=on");
  EXPECT_TRUE(rerun_with_switch(g, "optimizer_ckpt_reshard=on", "optimizer-checkpoint-while-unsharded").removes());
  // A root cause the file does not reach is "removed" by any switch: callers ask about one it reaches.
  EXPECT_EQ(fixing_switch(corpus("seed003_rank_divergent_switch.seq"), "rank-divergent-op"), "");
}

TEST(FixClaim, ASettingTheModelDoesNotKnowClaimsNothing) {
  const SeqFile g = corpus("seed004_eval_then_save_optimizer.seq");
  EXPECT_FALSE(rerun_with_switch(g, "nosuch=on", "optimizer-checkpoint-while-unsharded").removes());
  EXPECT_FALSE(rerun_with_switch(g, "optimizer_ckpt_reshard=maybe", "optimizer-checkpoint-while-unsharded").valid);
}

// Triage's verdict and `# fix:` line: the world-3 divergence was "known, removed by
// set_adapter_reshard=unmerge_first" while the switch only moved its S2 to set_adapter.
TEST(FixClaim, TriageCallsAMovedFindingNew) {
  const SeqFile f = parse_seq_file(std::string(FSDPSIM_SOURCE_DIR) + "/corpus/divergences/unmerged_zero_rows_stale_copy_world3.seq");
  const TriageResult t = triaged(f);
  EXPECT_EQ(t.root_cause.id, kMergeUnmerge);
  EXPECT_EQ(t.verdict, Verdict::New);
  EXPECT_EQ(fix_comment(t.minimal), "no single patched switch removes it");
  const TriageResult k = triaged(corpus("seed000_merged_set_adapter_w2.seq"));
  EXPECT_EQ(fix_comment(k.minimal).rfind("removed by set_adapter_reshard=unmerge_first (re-run on the model; ", 0), 0u) << fix_comment(k.minimal);
}

// The report's box on the policy/reference scenario: no "removes it", the findings that remain.
TEST(FixClaim, TheReportBoxSaysWhatRemainsInsteadOfAFix) {
  const std::string box = report_summary_box(model_timeline(corpus(kPolicyReference)), "policy_reference.seq", "model", "/tmp/p.html");
  EXPECT_NE(box.find(kMergeUnmerge), std::string::npos) << box;
  EXPECT_EQ(box.find("</code> removes it"), std::string::npos) << box;  // "The model's `S` removes it"
  EXPECT_NE(box.find("No modelled fix removes it"), std::string::npos) << box;
  EXPECT_NE(box.find("re-run on the model"), std::string::npos) << box;
  EXPECT_NE(box.find("S2 step 4 rank 0: layer lin0 merged=[] but its shard is extra_delta"), std::string::npos) << box;
  // Seed 000: the switch does remove it, said with the re-run behind it.
  const std::string seed000 = report_summary_box(model_timeline(corpus("seed000_merged_set_adapter_w2.seq")), "s.seq", "model", "/tmp/p.html");
  EXPECT_NE(seed000.find("set_adapter_reshard=unmerge_first</code> removes it: this file re-run on the model"), std::string::npos) << seed000;
}

// A finding page states the catalogue switch's effect on its minimal sequence as a re-run found
// it. A raised merge on a one-expert layer leaves the root unsharded, and save_optimizer raises
// KeyError under optimizer_ckpt_reshard=on too (the patched profile, its one-expert delta pinned to
// PEFT 0.21.2's Linear path): no "shows the finding gone".
TEST(FixClaim, AFindingPageClaimsOnlyWhatItsSequenceShows) {
  const std::string id = "optimizer-checkpoint-while-unsharded";
  ASSERT_EQ(root_cause_entry(id).fix_switch, "optimizer_ckpt_reshard=on");
  TriagedFile kept;
  kept.file = "kept.seq";
  kept.t.minimal = parse_seq(
      "world 1\nprofile patched\nset single_expert_delta=linear\nlayer lin0 20 2 experts=1\nadapter default r=4 alpha=4 targets=lin0\n"
      "fully_shard root reshard_after_forward=none\n---\nmerge\ntrain_step\nsave_optimizer\n",
      "<test>");
  kept.t.root_cause.id = id;
  kept.t.spec = "S4";
  const std::string bad = render_finding_pages({kept}, {}).files.at(finding_stem(id) + ".md");
  EXPECT_EQ(bad.find(kFixClaimShown), std::string::npos) << bad;
  EXPECT_NE(bad.find("it does not remove this sequence's finding"), std::string::npos) << bad;
  EXPECT_NE(bad.find("S4 step 3 rank 0: save_optimizer raised KeyError"), std::string::npos) << bad;
  kept.t.minimal = corpus("seed004_eval_then_save_optimizer.seq");
  const std::string good = render_finding_pages({kept}, {}).files.at(finding_stem(id) + ".md");
  EXPECT_NE(good.find(std::string("--set optimizer_ckpt_reshard=on` ") + kFixClaimShown + " (re-run on the model)"), std::string::npos) << good;
}
