// check --near's neighbourhood (sim/findings/neighbourhood.hpp): which sequences one edit makes, how
// they are deduplicated, and the classes the recorded examples reach, with their shortest edits.
#include "sim/findings/neighbourhood.hpp"

#include <gtest/gtest.h>

#include "model/vocab/seq.hpp"

namespace fsdpsim {
namespace {

const char* kTwoOps =
    "world 1\nlayer lin0 4 4\nadapter default r=2 alpha=2 targets=lin0\nfully_shard root\n---\nforward\nbackward\n";

std::string op_place(int origin) { return "train.py:" + std::to_string(10 + origin); }

std::vector<std::string> edit_texts(const NearClass& c, const SeqFile& f) {
  std::vector<std::string> out;
  for (const NearEdit& e : c.edits)
    out.push_back(near_edit_text(e, [&](int o) { return op_text(f.ops[o]); }, op_place));
  return out;
}

TEST(Neighbourhood, OneEditMakesEachDistinctSequenceOnce) {
  // forward, backward at world 1: inserts give ffb bfb fbb fbf (two more are repeats), deletes b and
  // f, the swap bf, and @0 on either op: 9 sequences.
  const SeqFile f = parse_seq(kTwoOps);
  const NearResult r = explore_near(f, 1);
  EXPECT_EQ(r.sequences, 9);
  EXPECT_EQ(r.refused, 0);
  // Two edits reach more, the file and the one-edit ones not counted twice.
  EXPECT_GT(explore_near(f, 2).sequences, r.sequences);
}

TEST(Neighbourhood, EditTextsNameTheOpsAndTheirScriptLines) {
  const SeqFile f = parse_seq(kTwoOps);
  auto text = [&](int o) { return op_text(f.ops[o]); };
  NearEdit e;
  e.kind = NearEdit::Kind::Insert, e.op = 1, e.other = 0;
  EXPECT_EQ(near_edit_text(e, text, op_place), "add `backward` (as at train.py:11) after `forward` at train.py:10 (op 1)");
  e.other = -1;
  EXPECT_EQ(near_edit_text(e, text, op_place), "add `backward` (as at train.py:11) before the first op");
  e.kind = NearEdit::Kind::Delete, e.op = 1;
  EXPECT_EQ(near_edit_text(e, text, op_place), "remove `backward` at train.py:11 (op 2)");
  e.kind = NearEdit::Kind::Swap, e.op = 0, e.other = 1, e.other_inserted = true;
  EXPECT_EQ(near_edit_text(e, text, op_place), "swap `forward` at train.py:10 (op 1) and the added `backward`");
  e.kind = NearEdit::Kind::Diverge, e.op = 0, e.rank = 1;
  EXPECT_EQ(near_edit_text(e, text, op_place), "run `forward` at train.py:10 (op 1) on rank 1 only");
}

// The recorded DPO example hits S3 now; one edit away an added backward (the script's own, line 52)
// after the policy's first forward makes the original backward train nothing: S1, flag-on-copy.
TEST(Neighbourhood, DpoExampleOneEditAway) {
  const SeqFile f = parse_seq_file(std::string(FSDPSIM_SOURCE_DIR) + "/examples/dpo_policy_reference.seq");
  const NearResult r = explore_near(f, 1);
  EXPECT_EQ(r.sequences, 264);
  std::vector<std::string> ids;
  for (const auto& c : r.classes) ids.push_back(c.id + (c.now ? " now" : " " + std::to_string(c.distance)));
  EXPECT_EQ(ids, (std::vector<std::string>{"S3 flag-on-copy/set_adapter now", "S1 flag-on-copy/set_adapter 1",
                                           "S5 rank-divergent-op 1", "S3 rank-divergent-op 1"}));
  ASSERT_EQ(r.classes.size(), 4u);
  EXPECT_EQ(r.classes[0].finding.step, 8);
  EXPECT_EQ(edit_texts(r.classes[1], f),
            std::vector<std::string>{"add `backward` (as at train.py:17) after `forward` at train.py:15 (op 6)"});
  EXPECT_EQ(r.classes[1].finding.step, 9);
  EXPECT_EQ(edit_texts(r.classes[2], f), std::vector<std::string>{"run `set_adapter reference` at train.py:10 (op 1) on rank 0 only"});
}

TEST(Neighbourhood, SftExampleOneEditAway) {
  const SeqFile f = parse_seq_file(std::string(FSDPSIM_SOURCE_DIR) + "/examples/sft_two_adapters.seq");
  const NearResult r = explore_near(f, 1);
  EXPECT_EQ(r.sequences, 93);
  ASSERT_EQ(r.classes.size(), 3u);
  EXPECT_EQ(r.classes[0].id, "S3 flag-on-copy/set_adapter");
  EXPECT_TRUE(r.classes[0].now);
  EXPECT_EQ(r.classes[0].finding.step, 9);
  EXPECT_EQ(edit_texts(r.classes[1], f), std::vector<std::string>{"run `set_adapter task_a` at train.py:10 (op 1) on rank 0 only"});
  EXPECT_EQ(r.classes[1].id, "S3 rank-divergent-op");
  EXPECT_EQ(edit_texts(r.classes[2], f), std::vector<std::string>{"run `train_step` at train.py:11 (op 2) on rank 0 only"});
  EXPECT_EQ(r.classes[2].id, "S5 rank-divergent-op");
  // Without the eval after the second step (the one that leaves the root unsharded before
  // set_adapter task_b) nothing is found: of the 12 clean sequences, the removal is named.
  EXPECT_EQ(r.clean, 12);
  NearClass clean;
  clean.edits = r.first_clean;
  EXPECT_EQ(edit_texts(clean, f), std::vector<std::string>{"remove `eval` at train.py:16 (op 7)"});
}

}  // namespace
}  // namespace fsdpsim
