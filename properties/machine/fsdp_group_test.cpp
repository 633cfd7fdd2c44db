// FSDP2 param-group transitions (model/machine/fsdp_param_group.cpp, and fsdp_group.cpp over every group).
#include <gtest/gtest.h>

#include "model/vocab/model_lowering.hpp"
#include "properties/test_util.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(FsdpGroup, ShardNumelPadsDim0ToTheWorld) {
  OneRank t(seed000_header(3));
  // lin0.weight is (20, 10): ceil(20/3) = 7 rows of 10 per rank.
  EXPECT_EQ(t.topo->params[t.param("lin0.weight")].shard_numel, 70);
  EXPECT_EQ(t.topo->params[t.param("lin0.bias")].shard_numel, 7);
  // lora_A.other is (4, 10): ceil(4/3) = 2 rows.
  EXPECT_EQ(t.topo->params[t.param("lin0.lora_A.other")].shard_numel, 20);
  int64_t sum = 0;
  for (int p : t.topo->groups[t.group("lin0")].params) sum += t.topo->params[p].shard_numel;
  EXPECT_EQ(t.topo->groups[t.group("lin0")].numel, sum);
}

TEST(FsdpGroup, ParametersNotClaimedByAChildBelongToTheRoot) {
  OneRank t(seed000_header());
  EXPECT_EQ(t.topo->groups[0].name, "root");  // all_states order: root first
  EXPECT_EQ(t.topo->params[t.param("lin1.weight")].group, t.group("root"));
  EXPECT_EQ(t.topo->params[t.param("lin0.lora_B.other")].group, t.group("lin0"));
}

TEST(FsdpGroup, AGroupPacksItsModulesInTheOrderFullyShardWasGivenThem) {
  // torch _fsdp_init.py::_get_managed_modules walks fully_shard([lin2, lin0]) from lin2
  OneRank t("world 2\nlayer lin0 4 8\nlayer lin1 8 8\nlayer lin2 8 4\nadapter a r=2 alpha=4 targets=lin0,lin2\n"
            "fully_shard lin2,lin0 reshard_after_forward=true\nfully_shard root reshard_after_forward=true\n---\n");
  std::vector<std::string> names;
  for (int p : t.topo->groups[t.group("lin2")].params) names.push_back(t.topo->params[p].name.str());
  EXPECT_EQ(names, (std::vector<std::string>{"lin2.weight", "lin2.bias", "lin2.lora_A.a", "lin2.lora_B.a", "lin0.weight",
                                              "lin0.bias", "lin0.lora_A.a", "lin0.lora_B.a"}));
}

TEST(FsdpGroup, UnshardCreatesUOnceAndCopiesRequiresGradFromS) {
  OneRank t(seed000_header(2));
  EXPECT_FALSE(t.model->state().groups[t.group("lin0")].has_u);
  t.op("unshard lin0");
  ASSERT_EQ(t.model->log().records().size(), 1u);
  EXPECT_EQ(t.model->log().records()[0].op, CollOp::AllGather);
  EXPECT_EQ(t.model->log().records()[0].count, t.topo->groups[t.group("lin0")].numel);
  EXPECT_TRUE(t.model->state().groups[t.group("lin0")].has_u);
  EXPECT_EQ(t.state("lin0"), ShardedState::Unsharded);
  EXPECT_TRUE(t.ps("lin0.lora_A.default").rg_u);
  EXPECT_FALSE(t.ps("lin0.lora_A.other").rg_u);
  EXPECT_EQ(t.state("root"), ShardedState::Sharded);  // unshard is not recursive
}

TEST(FsdpGroup, UnshardOfAnUnshardedGroupIsANoOpWithoutResync) {
  OneRank t(seed000_header());
  t.op("unshard lin0");
  t.op("set_adapter [other]");  // base_model.set_adapter: flips land on U
  EXPECT_TRUE(t.ps("lin0.lora_A.other").rg_u);
  EXPECT_FALSE(t.ps("lin0.lora_A.other").rg_s);
  t.op("unshard lin0");
  EXPECT_TRUE(t.model->log().records().empty());
  EXPECT_TRUE(t.ps("lin0.lora_A.other").rg_u);  // not re-synced from S
}

TEST(FsdpGroup, ToShardedDropsFlipsMadeOnU) {
  OneRank t(seed000_header());
  t.op("unshard lin0");
  t.op("set_adapter [other]");
  t.op("reshard lin0");
  EXPECT_EQ(t.state("lin0"), ShardedState::Sharded);
  EXPECT_FALSE(t.ps("lin0.lora_A.other").rg_s);
  EXPECT_TRUE(t.ps("lin0.lora_A.other").rg_u);  // U keeps the flip, unregistered
  t.op("unshard lin0");
  EXPECT_FALSE(t.ps("lin0.lora_A.other").rg_u);  // the next real unshard reverts it
}

TEST(FsdpGroup, ReshardAfterForwardFalseKeepsGroupsUnshardedAfterForward) {
  OneRank f(seed000_header(1, "upstream", "false"));
  f.op("eval");
  EXPECT_EQ(f.state("lin0"), ShardedState::Unsharded);
  EXPECT_EQ(f.state("root"), ShardedState::Unsharded);
  OneRank t(seed000_header(1, "upstream", "true"));
  t.op("eval");
  EXPECT_EQ(t.state("lin0"), ShardedState::Sharded);
  EXPECT_EQ(t.state("root"), ShardedState::Sharded);  // explicit true on the root is kept
}

TEST(FsdpGroup, RootGivenNoneDoesNotReshardButChildrenDo) {
  OneRank t(seed000_header(1, "upstream", "none"));
  t.op("eval");
  EXPECT_EQ(t.state("lin0"), ShardedState::Sharded);
  EXPECT_EQ(t.state("root"), ShardedState::Unsharded);
}

TEST(FsdpGroup, ForceFalseRootRuleIgnoresAnExplicitTrue) {
  OneRank t(seed000_header(1, "upstream", "true"));
  t.op("eval");
  EXPECT_EQ(t.state("root"), ShardedState::Sharded);
  std::string h = seed000_header(1, "upstream", "true");
  h.insert(h.find("layer"), "set root_reshard_rule=force_false\n");
  OneRank f(h);
  f.op("eval");
  EXPECT_EQ(f.state("root"), ShardedState::Unsharded);
  EXPECT_EQ(f.state("lin0"), ShardedState::Sharded);
}

TEST(FsdpGroup, BackwardReduceScattersOnlyParametersWithAGradient) {
  OneRank t(seed000_header(2, "upstream", "false"));
  const OpResult& r = t.op("train_step");
  ASSERT_EQ(r.status, Status::Ok);
  int64_t want = t.topo->params[t.param("lin1.lora_A.default")].shard_numel + t.topo->params[t.param("lin1.lora_B.default")].shard_numel;
  bool found = false;
  for (const auto& c : t.model->log().records())
    if (c.op == CollOp::ReduceScatter && c.group == t.group("root")) {
      EXPECT_EQ(c.count, want);  // frozen base and frozen `other` are gathered, not reduced
      found = true;
    }
  EXPECT_TRUE(found);
  EXPECT_TRUE(t.ps("lin1.lora_A.default").grad_s);
  EXPECT_FALSE(t.ps("lin1.lora_A.other").grad_s);
  EXPECT_EQ(t.state("root"), ShardedState::Sharded);  // reshard_after_backward
  EXPECT_EQ(t.state("lin0"), ShardedState::Sharded);
}

// torch _fsdp_collectives.py::_get_all_gather_input_metadatas / foreach_reduce: gloo pairs by
// count * dtype bytes, so every record names the dtype it travels in.
TEST(FsdpGroup, EveryCollectiveNamesItsWireDtype) {
  const std::string text =
      "world 2\nlayer lin0 12 4\nlayer lin1 4 4\nadapter a r=2 alpha=4 targets=lin1\n"
      "adapter b r=4 alpha=8 targets=lin1 autocast=false\nfully_shard lin0\nfully_shard lin1\nfully_shard root\n"
      "dtype bf16\n---\n";
  OneRank t(text);
  t.op("unshard lin0");  // bf16 weight and bias only: bf16 elements
  ASSERT_EQ(t.model->log().records().size(), 1u);
  EXPECT_EQ(t.model->log().records()[0].dtype, DType::BF16);
  EXPECT_EQ(t.model->log().records()[0].count, t.topo->groups[t.group("lin0")].numel);
  t.op("unshard lin1");  // bf16 base and b, fp32 a: uint8 bytes
  ASSERT_EQ(t.model->log().records().size(), 1u);
  EXPECT_EQ(t.model->log().records()[0].dtype, DType::U8);
  EXPECT_EQ(t.model->log().records()[0].count, 2 * (8 + 2) + 4 * (4 + 4) + 2 * (8 + 8));

  auto reduce_dtypes = [](OneRank& r) {
    std::vector<DType> out;
    for (const auto& c : r.model->log().records())
      if (c.op == CollOp::ReduceScatter) out.push_back(c.dtype);
    return out;
  };
  OneRank fp32(text);  // a trains: fp32 gradients
  ASSERT_EQ(fp32.op("train_step").status, Status::Ok);
  EXPECT_EQ(reduce_dtypes(fp32), std::vector<DType>{DType::F32});
  OneRank bf16(text);  // b trains: bf16 gradients
  bf16.op("set_adapter b");
  ASSERT_EQ(bf16.op("train_step").status, Status::Ok);
  EXPECT_EQ(reduce_dtypes(bf16), std::vector<DType>{DType::BF16});
}

TEST(FsdpGroup, AGroupWithNoGradientIssuesNoReduceScatter) {
  // World 2: at world 1 no collective is issued at all, and the check below would hold vacuously.
  OneRank t(
      "world 2\nlayer lin0 10 20\nlayer lin1 20 2\nadapter default r=8 alpha=8 targets=lin1\n"
      "fully_shard lin0\nfully_shard root\n---\n");
  t.op("set_adapter default");
  ASSERT_EQ(t.op("train_step").status, Status::Ok);
  int lin0_gathers = 0, root_reduces = 0;
  for (const auto& c : t.model->log().records()) {
    EXPECT_FALSE(c.op == CollOp::ReduceScatter && c.group == t.group("lin0")) << "lin0 holds only frozen params";
    lin0_gathers += c.op == CollOp::AllGather && c.group == t.group("lin0");
    root_reduces += c.op == CollOp::ReduceScatter && c.group == t.group("root");
  }
  EXPECT_GE(lin0_gathers, 1) << "lin0 took part in the step";
  EXPECT_EQ(root_reduces, 1) << "the root's trainable lin1 adapter got its gradient reduced";
}

TEST(FsdpGroup, ReshardAfterForwardTrueGroupsAreGatheredAgainInBackward) {
  OneRank t(seed000_header(2, "upstream", "true"));
  t.op("train_step");
  int ag = 0;
  for (const auto& c : t.model->log().records()) ag += c.op == CollOp::AllGather;
  EXPECT_EQ(ag, 4);  // forward: root, lin0; backward: root, lin0 again
}

// torch 2.13 at world 1: FSDPParamGroup.unshard takes the world_size == 1 path
// (U from the shards, no all-gather), foreach_reduce issues no reduce-scatter
// and DTensor redistribution on a 1-rank mesh none either; every other effect
// stays: U created at the first unshard with S's requires_grad, grads reach S.
TEST(FsdpGroup, WorldOneIssuesNoCollectiveAndKeepsEveryOtherEffect) {
  OneRank t(seed000_header(1));
  t.op("unshard lin0");
  EXPECT_TRUE(t.model->log().records().empty());
  EXPECT_TRUE(t.model->state().groups[t.group("lin0")].has_u);
  EXPECT_EQ(t.state("lin0"), ShardedState::Unsharded);
  EXPECT_TRUE(t.ps("lin0.lora_A.default").rg_u);
  EXPECT_FALSE(t.ps("lin0.lora_A.other").rg_u);
  t.op("reshard");
  const OpResult& r = t.op("train_step");
  EXPECT_EQ(r.status, Status::Ok);
  EXPECT_EQ(r.grads.bits(), 1);  // {default}, on the shards
  EXPECT_TRUE(t.ps("lin0.lora_A.default").grad_s);
  EXPECT_TRUE(t.model->log().records().empty());
  // Patched: merges, deltas and the gathered adapter save on sharded layers.
  OneRank p(seed000_header(1, "patched", "true"));
  for (const char* op : {"eval", "merge", "delta_weight lin0", "unmerge", "set_adapter other", "train_step",
                         "save_adapters", "load_adapters"}) {
    EXPECT_EQ(p.op(op).status, Status::Ok) << op;
    EXPECT_TRUE(p.model->log().records().empty()) << op;
  }
  EXPECT_EQ(p.model->observer().classify_stored(p.layer("lin0")), WeightClass::Exact);
}

namespace {
// "ag root; ag lin0; rs lin1; ..." for the collectives of the last op.
std::string coll_names(const OneRank& t) {
  std::string out;
  for (const auto& c : t.model->log().records())
    out += std::string(c.op == CollOp::AllGather ? "ag " : "rs ") + t.topo->groups[c.group].name + "; ";
  return out;
}
}  // namespace

// torch 2.13 FSDPParamGroup.pre_backward -> _backward_prefetch: the group whose
// post_forward ran just before this one's is all-gathered before this one
// reduce-scatters (measured on upstream for seed 004's topology).
TEST(FsdpGroup, BackwardPrefetchGathersThePreviousGroupBeforeTheReduceScatter) {
  OneRank t(
      "world 2\nlayer vis 8 8\nlayer lin0 8 16\nlayer lin1 16 2\nadapter default r=4 alpha=8 targets=vis,lin0,lin1\n"
      "fully_shard lin0 reshard_after_forward=true\nfully_shard lin1 reshard_after_forward=true\n"
      "fully_shard root reshard_after_forward=none\n---\n");
  t.op("train_step");
  EXPECT_EQ(coll_names(t), "ag root; ag lin0; ag lin1; ag lin1; ag lin0; rs lin1; rs lin0; rs root; ");
  EXPECT_TRUE(t.model->state().post_forward_order.empty());  // cleared by the final callback
  for (const auto& g : t.model->state().groups) EXPECT_TRUE(g.post_forward_indices.empty());
}

// The post-forward order is only cleared by a backward, so an eval's entries
// are still there: with no root group, the first group's prefetch targets the
// eval's last group, which already ran post_backward. It is gathered again but
// never waited for: it stays SHARDED (finalize_backward drops the output).
TEST(FsdpGroup, PrefetchFromAnEarlierEvalsOrderIsGatheredButNotRegistered) {
  OneRank t(
      "world 2\nlayer lin0 8 8\nlayer lin1 8 4\nadapter default r=4 alpha=8 targets=lin0,lin1\n"
      "fully_shard lin0 reshard_after_forward=true\nfully_shard lin1 reshard_after_forward=true\n"
      "fully_shard root reshard_after_forward=true\n---\n");  // the root holds no parameter: no group
  ASSERT_EQ(t.topo->groups.size(), 2u);
  t.op("eval");
  EXPECT_EQ(t.model->state().post_forward_order.size(), 2u);
  EXPECT_EQ(t.op("train_step").status, Status::Ok);
  EXPECT_EQ(coll_names(t), "ag lin0; ag lin1; ag lin1; ag lin0; rs lin1; ag lin1; rs lin0; ");
  EXPECT_EQ(t.state("lin1"), ShardedState::Sharded);
  EXPECT_EQ(t.state("lin0"), ShardedState::Sharded);
  EXPECT_EQ(t.op("train_step").grads.bits(), 1);
  EXPECT_EQ(coll_names(t), "ag lin0; ag lin1; ag lin1; ag lin0; rs lin1; rs lin0; ");  // no stale entry now
}

// torch 2.13 _fsdp_state.py::FSDPState._post_forward -> _register_pre_backward_hook:
// a child group whose module produces the model's output registered its hook on
// that tensor before the root did, so its pre_backward fires first; both fire
// before autograd enters the child (seed 002's topology, measured upstream).
// With the last layer in the root the root fires first.
TEST(FsdpGroup, PreBackwardHooksFireInTensorThenRegistrationOrder) {
  OneRank last_child(
      "world 2\nlayer lin0 8 8\nlayer moe 8 4\nadapter default r=3 alpha=6 targets=lin0,moe\n"
      "fully_shard moe reshard_after_forward=true\nfully_shard root reshard_after_forward=true\n---\n");
  last_child.op("train_step");
  EXPECT_EQ(coll_names(last_child), "ag root; ag moe; ag moe; ag root; rs moe; rs root; ");
  OneRank last_root(
      "world 2\nlayer lin0 8 8\nlayer lin1 8 4\nadapter default r=3 alpha=6 targets=lin0,lin1\n"
      "fully_shard lin0 reshard_after_forward=true\nfully_shard root reshard_after_forward=true\n---\n");
  last_root.op("train_step");
  EXPECT_EQ(coll_names(last_root), "ag root; ag lin0; ag root; ag lin0; rs root; rs lin0; ");  // lin0: input needs no grad
}

namespace {
// "ag root; ag model.layers.0; ..." for rank 0's collectives at `step` of a `model` file's run.
std::string model_coll_names(const std::string& text, int step) {
  const RunResult r = run_checked(lowered_file(parse_seq(text, "<test>")));
  std::string out;
  for (const auto& o : r.observations)
    if (o.step == step && o.rank == 0)
      for (const auto& c : o.collectives) out += std::string(c.op == CollOp::AllGather ? "ag " : "rs ") + c.group.str() + "; ";
  return out;
}
}  // namespace

// torch 2.13 _fsdp_state.py::_register_group_forward_hooks: a tied tail fully_shard([embed_tokens,
// lm_head]) runs its post-forward once lm_head returns, after the decoder layer's, and the root's
// hook is on the loss transformers computes inside its forward, reached before the logits: the
// root prefetches the tail, the tail the layer (corpus/models/qwen2_tied_tail_backward_prefetch.seq).
TEST(FsdpGroup, ATiedTailRecordsItsPostForwardAfterTheLayersAndTheRootsLossHookFiresFirst) {
  const std::string file =
      "world 2\nmodel qwen2 hidden=16 intermediate=16 layers=1 heads=4 kv_heads=1 vocab=64 tie_embeddings=true seq_len=5\n"
      "adapter default r=4 alpha=8 targets=q_proj,v_proj init=random\nfully_shard_plan transformer_layers\n---\n"
      "forward\nsave_adapters\nbackward\n";
  EXPECT_EQ(model_coll_names(file, 3), "ag root; ag model.embed_tokens; ag model.layers.0; rs model.layers.0; ");
}

// A rollout's decode steps run the child units' hooks and raise at the root's model.norm: their
// post-forward records stay until the next backward's final callback, so the next step's
// prefetch from model.layers.0 gathers model.layers.1 again after its reduce-scatter
// (corpus/models/mistral_tied_generate_then_train.seq).
TEST(FsdpGroup, ARolloutsRecordsMakeTheNextBackwardGatherTheLastLayerAgain) {
  const std::string file =
      "world 2\nmodel mistral hidden=16 intermediate=16 layers=2 heads=4 kv_heads=1 vocab=48 tie_embeddings=true seq_len=8\n"
      "adapter default r=2 alpha=16 targets=q_proj,v_proj init=random\nfully_shard_plan transformer_layers\n---\n"
      "train_step\ngenerate 2\ntrain_step\n";
  EXPECT_EQ(model_coll_names(file, 3),
            "ag root; ag model.layers.0; ag model.layers.1; ag model.layers.1; ag model.layers.0; rs model.layers.1; "
            "ag model.layers.1; rs model.layers.0; ");
}

// FsdpParamGroup's transitions driven on their own, on a context a test builds: no RankModel.
TEST(FsdpGroup, AGroupRunsItsTransitionsOnTheContextItIsHanded) {
  OneRank t(seed000_header(2, "upstream", "false"));
  const Topology& topo = *t.topo;
  const int g = t.group("lin0");
  RankState st = t.model->state();  // right after prepare: every group SHARDED
  CollectiveLog log;
  AdapterSet grads;
  st.root_lazy_inited = true;  // the root's lazy init said done
  const GroupContext c{topo, 0, g, st.params, log, st, ScopeSite{}};
  FsdpParamGroup& gs = st.groups[g];
  // The root's lazy init said done but never reached this group: no param_dtype to gather with.
  EXPECT_TRUE(gs.pre_forward(c));
  EXPECT_TRUE(log.records().empty());
  ASSERT_FALSE(gs.init_mp_dtypes(c));  // the root's lazy init, this group's turn
  ASSERT_FALSE(gs.pre_forward(c));
  ASSERT_EQ(log.records().size(), 1u);  // one all-gather of the group's parameters into U
  EXPECT_EQ(log.records()[0].op, CollOp::AllGather);
  EXPECT_EQ(log.records()[0].member_count, static_cast<int>(topo.groups[g].params.size()));
  EXPECT_TRUE(gs.unsharded());
  EXPECT_EQ(st.memory.now, topo.groups[g].numel * topo.world * 4);
  gs.unshard(c);  // already UNSHARDED: returns at once
  EXPECT_EQ(log.records().size(), 1u);
  gs.post_forward(c);  // reshard_after_forward=false: stays UNSHARDED, its post-forward recorded
  EXPECT_TRUE(gs.unsharded());
  EXPECT_EQ(st.post_forward_order, std::vector<int>{g});
  ASSERT_FALSE(gs.post_backward(c, grads));  // no gradient on U: resharded, no reduce-scatter
  EXPECT_FALSE(gs.unsharded());
  EXPECT_EQ(log.records().size(), 1u);
  EXPECT_EQ(st.memory.now, 0);
  EXPECT_TRUE(grads.empty());
}
