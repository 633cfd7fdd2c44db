// model/vocab/op_rules.hpp: the generator draws only what the rules allow and
// what validation accepts, and the rules refuse what they should.
#include <gtest/gtest.h>

#include "model/vocab/op_rules.hpp"
#include "properties/test_util.hpp"
#include "sim/core/generator.hpp"

using namespace fsdpsim;

namespace {

SeqFile seq(const std::string& text) { return parse_seq(text, "<test>"); }

// The generator's draws, walked through the rules: each op possible, its names and `@R` legal,
// and the file valid and holding only what any file may hold.
TEST(OpRules, EveryGeneratedOpIsLegalAndEveryFileValidates) {
  GenOptions heavy;
  ASSERT_EQ(apply_draws("checkpoint=30,gradient_sync=30,per_rank_data=30,modules_to_save=30,grouped=30", &heavy), "");
  int checked = 0;
  for (int world = 1; world <= 4; ++world)
    for (uint64_t seed = 0; seed < 300; ++seed) {
      GenOptions opt = seed % 2 ? heavy : GenOptions{};
      opt.world = world;
      Prng rng(seed * 13 + static_cast<uint64_t>(world));
      const SeqFile f = generate_seq(rng, opt);
      ASSERT_NO_THROW(validate(f, "<generated>")) << print_seq(f);
      OpRules rules(f.scenario);
      const int prepare_at = prepare_index(f);
      for (size_t i = 0; i < f.ops.size(); ++i) {
        const Op& op = f.ops[i];
        SCOPED_TRACE(print_seq(f) + "op " + std::to_string(i) + ": " + op_text(op));
        if (static_cast<int>(i) < prepare_at) EXPECT_TRUE(OpRules::allowed_before_prepare(op));
        EXPECT_TRUE(OpRules::file_may_hold(f.scenario, op));
        if (op.kind != OpKind::GradientSync && op.kind != OpKind::NewOptimizer && op.kind != OpKind::Prepare) {
          EXPECT_TRUE(rules.possible(op.kind));
          EXPECT_TRUE(rules.names_legal(f.scenario, op));
          EXPECT_TRUE(OpRules::rank_legal(f.scenario, op, world > 1));
        }
        rules.apply(f.scenario, op);
        ++checked;
      }
    }
  EXPECT_GT(checked, 10000);
}

// The same rules refuse: each check can fail.
TEST(OpRules, RefuseWhatTheyShould) {
  const SeqFile f = seq(test::seed000_header(2) + "forward\n");
  const Scenario& s = f.scenario;
  OpRules rules(s);
  EXPECT_FALSE(rules.possible(OpKind::Backward)) << "no graph yet";
  EXPECT_FALSE(rules.possible(OpKind::DisableExit));
  EXPECT_FALSE(rules.possible(OpKind::LoadOptimizer)) << "nothing saved";
  EXPECT_FALSE(rules.possible(OpKind::AddAdapter)) << "no deferred adapter";
  rules.apply(s, f.ops[0]);
  EXPECT_TRUE(rules.possible(OpKind::Backward));
  Op save, fresh;
  save.kind = OpKind::SaveOptimizer;
  fresh.kind = OpKind::NewOptimizer;
  rules.apply(s, save);
  EXPECT_TRUE(rules.possible(OpKind::LoadOptimizer));
  rules.apply(s, fresh);
  EXPECT_FALSE(rules.possible(OpKind::LoadOptimizer)) << "the checkpoint was the old optimizer's";

  Op set;
  set.kind = OpKind::SetAdapter;
  EXPECT_FALSE(rules.names_legal(s, set)) << "set_adapter names an adapter";
  set.names = {"nobody"};
  EXPECT_FALSE(rules.names_legal(s, set));
  EXPECT_FALSE(OpRules::file_may_hold(s, set));
  set.names = {"other"};
  EXPECT_TRUE(rules.names_legal(s, set));
  set.rank = 2;
  EXPECT_FALSE(OpRules::rank_legal(s, set, true)) << "@2 at world 2";
  EXPECT_FALSE(OpRules::file_may_hold(s, set));
  set.rank = 1;
  EXPECT_TRUE(OpRules::rank_legal(s, set, true));
  EXPECT_FALSE(OpRules::rank_legal(s, set, false));
  EXPECT_FALSE(OpRules::has_known_fix(set)) << "an @R op";
  Op merge;
  merge.kind = OpKind::Merge;
  merge.rank = 1;
  EXPECT_TRUE(OpRules::rank_safe(OpKind::Merge));
  EXPECT_FALSE(OpRules::rank_safe(OpKind::Forward));
  EXPECT_FALSE(OpRules::has_known_fix(OpKind::Merge));

  Op add;
  add.kind = OpKind::AddAdapter;
  add.names = {"other"};
  EXPECT_FALSE(OpRules::file_may_hold(s, add)) << "other is in the model already";
  EXPECT_THROW(seq(test::seed000_header(2) + "add_adapter other\n"), SourceError);
  Op reshard;
  reshard.kind = OpKind::Reshard;
  reshard.names = {"lin1"};  // a layer, but without its own fully_shard
  EXPECT_TRUE(OpRules::file_may_hold(s, reshard));
  EXPECT_FALSE(rules.names_legal(s, reshard));
  reshard.names = {"lin0"};
  EXPECT_TRUE(rules.names_legal(s, reshard));
}

// Before an explicit prepare only adapter bookkeeping on every rank: validation refuses the rest.
TEST(OpRules, OnlyAdapterBookkeepingBeforePrepare) {
  Op fwd;
  fwd.kind = OpKind::Forward;
  EXPECT_FALSE(OpRules::allowed_before_prepare(fwd));
  Op set;
  set.kind = OpKind::SetAdapter;
  set.names = {"other"};
  EXPECT_TRUE(OpRules::allowed_before_prepare(set));
  set.rank = 0;
  EXPECT_FALSE(OpRules::allowed_before_prepare(set));
  EXPECT_THROW(seq(test::seed000_header(2) + "forward\nprepare\n"), SourceError);
  EXPECT_THROW(seq(test::seed000_header(2) + "@0 set_adapter other\nprepare\n"), SourceError);
  EXPECT_NO_THROW(seq(test::seed000_header(2) + "set_adapter other\nprepare\nforward\n"));
}

}  // namespace

namespace {

// generate on a `model` file skips the root unit's hooks (model/machine/rank_model.cpp::op_generate);
// one before the file's first forward would start FSDP's lazy init from a child unit, which the
// model does not follow: refused at its line, and not drawn there.
TEST(OpRules, GenerateOnAModelFileWaitsForAForward) {
  const std::string head =
      "world 2\nmodel llama hidden=16 intermediate=32 layers=1 heads=4 kv_heads=2 vocab=64 seq_len=8\n"
      "adapter default r=4 alpha=8 targets=q_proj\nfully_shard model.layers.0\nfully_shard root\n---\n";
  SourcePos at;
  const SeqFile early = seq(head + "merge\ngenerate 2\n");
  EXPECT_NE(OpRules::generate_unmodelled(early.scenario, early.ops, &at).find("before its first forward"), std::string::npos);
  EXPECT_EQ(at.line, 8);
  for (const char* first : {"eval\n", "forward\n", "train_step\n"}) {
    const SeqFile later = seq(head + first + "generate 2\n");
    EXPECT_EQ(OpRules::generate_unmodelled(later.scenario, later.ops, &at), "") << first;
  }
  OpRules rules(early.scenario);
  EXPECT_FALSE(rules.possible(OpKind::Generate));
  rules.apply(early.scenario, early.ops[0]);  // merge
  EXPECT_FALSE(rules.possible(OpKind::Generate));
  Op eval;
  eval.kind = OpKind::Eval;
  rules.apply(early.scenario, eval);
  EXPECT_TRUE(rules.possible(OpKind::Generate));
  // a layer stack's generate is N forwards through the root: possible from the start
  const SeqFile stack = seq("world 2\nlayer lin0 4 4\nadapter default r=2 alpha=4 targets=lin0\nfully_shard root\n---\ngenerate 1\n");
  EXPECT_TRUE(OpRules(stack.scenario).possible(OpKind::Generate));
  EXPECT_EQ(OpRules::generate_unmodelled(stack.scenario, stack.ops, &at), "");
}

}  // namespace
