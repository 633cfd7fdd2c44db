// The optimizer's object list and DCP checkpoints (model/machine/optimizer.cpp).
#include <gtest/gtest.h>

#include "model/vocab/seq.hpp"
#include "properties/machine/bare_state.hpp"
#include "properties/test_util.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {
const char* kSeed004 =
    "world 2\nprofile upstream\nlayer vis 8 8\nlayer lin0 8 16\nlayer lin1 16 2\n"
    "adapter default r=4 alpha=8 targets=vis,lin0,lin1\nadapter spare r=4 alpha=8 targets=lin1\n"
    "fully_shard lin0 reshard_after_forward=true\nfully_shard lin1 reshard_after_forward=true\nfully_shard root\n";
}

TEST(Optimizer, HoldsTheTrainableShardsInParameterOrder) {
  OneRank t(std::string(kSeed004) + "---\n");
  const auto& opt = t.model->state().optimizer.objects;
  ASSERT_EQ(opt.size(), 6u);
  EXPECT_EQ(t.topo->params[opt[0]].name, "vis.lora_A.default");
  EXPECT_EQ(t.topo->params[opt[5]].name, "lin1.lora_B.default");
}

TEST(Optimizer, AllLoraHoldsEveryAdapterParameter) {
  OneRank t(std::string(kSeed004) + "optimizer all\n---\n");
  EXPECT_EQ(t.model->state().optimizer.objects.size(), 8u);
}

TEST(Optimizer, SaveAfterNoGradEvalRaisesKeyErrorWithTheFirstMissingIndex) {
  OneRank t(std::string(kSeed004) + "---\n");
  t.op("train_step");
  t.op("eval");
  const OpResult& r = t.op_may_raise("save_optimizer");
  EXPECT_EQ(r.status, Status::KeyError);
  EXPECT_EQ(r.message, "KeyError: 0");
  EXPECT_EQ(r.index, 0);
  EXPECT_EQ(r.opt_missing, 2);
}

TEST(Optimizer, PatchedReshardsBeforeTheCheckpoint) {
  std::string h = kSeed004;
  h.replace(h.find("profile upstream"), 16, "profile patched");
  OneRank t(h + "---\n");
  t.op("eval");
  EXPECT_EQ(t.op("save_optimizer").status, Status::Ok);
  EXPECT_EQ(t.state("root"), ShardedState::Sharded);
  EXPECT_EQ(t.op("load_optimizer").status, Status::Ok);
}

TEST(Optimizer, LoadAfterEvalNamesTheUnregisteredParameter) {
  OneRank t(std::string(kSeed004) + "---\n");
  t.op("save_optimizer");
  t.op("eval");
  const OpResult& r = t.op_may_raise("load_optimizer");
  EXPECT_EQ(r.status, Status::KeyError);
  EXPECT_EQ(r.message, "KeyError: <sharded parameter vis.lora_A.default>");
}

TEST(Optimizer, LoadWithoutASavedCheckpointIsAValueError) {
  OneRank t(std::string(kSeed004) + "---\n");
  EXPECT_EQ(t.op_may_raise("load_optimizer").status, Status::ValueError);
}

TEST(Optimizer, StepUpdatesOnlyHeldShardsWithAGradient) {
  OneRank t(std::string(kSeed004) + "---\n");
  t.op("train_step");
  EXPECT_EQ(t.ps("vis.lora_A.default").ver_s, 1u);
  EXPECT_EQ(t.ps("lin1.lora_A.spare").ver_s, 0u);
  t.op("step");  // grads are still there: a second update
  EXPECT_EQ(t.ps("vis.lora_A.default").ver_s, 2u);
  t.op("zero_grad");
  t.op("step");
  EXPECT_EQ(t.ps("vis.lora_A.default").ver_s, 2u);
}

// The class alone, on a state the test builds (properties/machine/bare_state.hpp), no RankModel:
// prepare holds the trainable S objects in parameter order; load before any save refuses; once
// a group is unsharded its objects are not registered, so save misses them and its KeyError names
// the first of them that has AdamW state (the state init the first save ran gave each one).
TEST(Optimizer, DrivenAloneSaveMissesTheObjectsOfAnUnshardedGroup) {
  const Topology t = compile_topology(parse_seq(seed000_header(2), "<test>"));
  RankState st = bare_state(t);
  for (size_t p = 0; p < t.params.size(); ++p) st.params[p].rg_s = t.params[p].adapter == 0;
  CollectiveLog log;
  const FsdpState fsdp(t, 0, st, st.params, log, ScopeSite{});
  const OptimizerPort port{t, 0, st.params, fsdp, nullptr};
  Optimizer& opt = st.optimizer;
  opt.prepare(port);
  ASSERT_EQ(opt.objects.size(), 4u);  // default's lora_A and lora_B on lin0 and lin1
  EXPECT_EQ(t.params[opt.objects[0]].name, "lin0.lora_A.default");
  int64_t index = -1;
  int missing = 0;
  const Raise before = opt.load(port, &index, &missing);
  ASSERT_TRUE(before);
  EXPECT_EQ(before->status, Status::ValueError);
  ASSERT_FALSE(opt.save(port, &index, &missing));
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(opt.saved_state.size(), 4u);
  ASSERT_FALSE(fsdp.lazy_init());
  ASSERT_FALSE(fsdp.module_unshard(t.group_index("lin0")));
  const Raise r = opt.save(port, &index, &missing);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, Status::KeyError);
  EXPECT_EQ(missing, 2);  // lin0's lora_A and lora_B
  EXPECT_EQ(index, 0);
  EXPECT_EQ(r->message, "KeyError: 0");
  // zero_grad drops the grad of a held S object.
  st.params[opt.objects[2]].grad_s = true;
  opt.zero_grad(port);
  EXPECT_FALSE(st.params[opt.objects[2]].grad_s);
}
