// Seed 001: where adapters live before prepare, and what prepare broadcasts.
#include <gtest/gtest.h>

#include "model/machine/loading.hpp"
#include "model/machine/observer.hpp"
#include "properties/machine/bare_state.hpp"
#include "properties/test_util.hpp"

namespace fsdpsim::test {
namespace {

std::string seed001(const std::string& profile, const std::string& loading = "ram_efficient",
                    const std::string& dtype = "dtype bf16 autocast_adapter_dtype=false") {
  return "world 2\nprofile " + profile +
         "\nlayer lin0 8 8\nlayer lin1 8 4\n"
         "adapter reference r=4 alpha=8 targets=lin0,lin1 inference_mode\n"
         "adapter policy r=4 alpha=8 targets=lin0,lin1 deferred\n"
         "fully_shard lin0 reshard_after_forward=true\nfully_shard root\n"
         "loading " + loading + "\n" + dtype + "\n---\n"
         "load_adapter policy frozen\nset_adapter [reference,policy]\nprepare\ntrain_step\n";
}

std::string placed(const Observation& o, const std::string& param) {
  for (const auto& p : o.params)
    if (p.name == param) return std::string(device_name(p.device)) + "/" + dtype_name(p.dtype);
  return "absent";
}

TEST(Loading, UpstreamContainerCheckLeavesTheSecondAdapterOnCpuInFp32) {
  RunResult r = simulate(seed001("upstream"));
  const Observation& r0 = obs_at(r, 1, 0);
  const Observation& r1 = obs_at(r, 1, 1);
  EXPECT_EQ(placed(r0, "lin0.lora_A.reference"), "cpu/bf16");
  EXPECT_EQ(placed(r0, "lin0.lora_A.policy"), "cpu/bf16");
  EXPECT_EQ(placed(r1, "lin0.lora_A.reference"), "meta/bf16");
  EXPECT_EQ(placed(r1, "lin0.lora_A.policy"), "cpu/fp32");  // the thread's printout on rank 1
  EXPECT_EQ(placed(r1, "lin1.lora_B.policy"), "cpu/fp32");
  // Before prepare every tensor is whole: bf16 on rank 0, nothing on meta, policy's fp32 on rank 1.
  EXPECT_EQ(owner_bytes_text(r0.sharded_bytes), "reference:224 policy:224 base:216");
  EXPECT_EQ(owner_bytes_text(r1.sharded_bytes), "policy:448");
}

// DoRA's magnitude is the norm of base weight + B @ A taken after their move (dora.py::
// DoraLinearLayer.update_layer): bf16 beside a bf16 base without autocast, on meta where A is.
TEST(Loading, DoraMagnitudeFollowsAAndB) {
  const std::string text =
      "world 2\nlayer lin0 8 4\nadapter default r=2 targets=lin0 use_dora\nfully_shard root\n"
      "loading ram_efficient\ndtype bf16 autocast_adapter_dtype=false\n---\nset_adapter default\nprepare\n";
  RunResult r = simulate(text);
  EXPECT_EQ(placed(obs_at(r, 1, 0), "lin0.lora_magnitude_vector.default"), "cpu/bf16");
  EXPECT_EQ(placed(obs_at(r, 1, 1), "lin0.lora_magnitude_vector.default"), "meta/bf16");
  EXPECT_EQ(placed(obs_at(r, 2, 1), "lin0.lora_magnitude_vector.default"), "cpu/bf16");
}

// gloo completes a broadcast whose root sends fewer bytes than a peer posted (measured on
// torch 2.13 CPU gloo): rank 1's fp32 policy tensors are part-filled, prepare goes on.
TEST(Loading, UpstreamPrepareCrossPairsThePolicyBroadcast) {
  RunResult r = simulate(seed001("upstream"));
  EXPECT_FALSE(r.mismatch);
  for (int rank : {0, 1}) {
    const Observation& o = obs_at(r, 3, rank);
    EXPECT_EQ(o.status, Status::Ok);
    EXPECT_EQ(o.message,
              "cross-paired: rank 0 in broadcast(lin0.lora_A.policy, 32 bf16) of lin0.lora_A.policy at step 3; "
              "rank 1 in broadcast(lin0.lora_A.policy, 32 fp32) of lin0.lora_A.policy at step 3");
    ASSERT_EQ(o.collectives.size(), 12u);  // every state-dict entry, the part-filled ones included
    EXPECT_EQ(o.collectives[0].group, "lin0.weight");
    EXPECT_EQ(o.collectives[0].op, CollOp::Broadcast);
  }
  ASSERT_GE(r.findings.size(), 2u);
  EXPECT_EQ(r.findings[0].text, "S5 step 1: ranks disagree on lin0.lora_A.policy dtype: rank 0 bf16, rank 1 fp32");
  EXPECT_EQ(r.findings[1].spec, "S5");
  EXPECT_EQ(r.findings[1].step, 3);
}

TEST(Loading, PatchedPerAdapterCheckPreparesAndTrainsBoth) {
  RunResult r = simulate(seed001("patched"));
  EXPECT_FALSE(r.mismatch);
  EXPECT_EQ(placed(obs_at(r, 1, 1), "lin0.lora_A.policy"), "meta/bf16");
  const Observation& p = obs_at(r, 3, 1);
  EXPECT_EQ(p.status, Status::Ok);
  EXPECT_EQ(p.collectives.size(), 12u);  // 2 layers x (weight, bias, 2 A, 2 B)
  EXPECT_EQ(placed(p, "lin0.lora_A.policy"), "cpu/bf16");
  EXPECT_EQ(*obs_at(r, 4, 0).grads, (std::vector<std::string>{"reference", "policy"}));
  EXPECT_TRUE(r.findings.empty());
}

TEST(Loading, AutocastOrFp32BaseHidesTheDtypeSplit) {
  // With PEFT's default autocast both adapters end fp32, so the broadcasts pair up.
  RunResult a = simulate(seed001("upstream", "ram_efficient", "dtype bf16"));
  EXPECT_FALSE(a.mismatch);
  EXPECT_EQ(placed(obs_at(a, 1, 1), "lin0.lora_A.policy"), "cpu/fp32");
  EXPECT_EQ(placed(obs_at(a, 1, 1), "lin0.lora_A.reference"), "meta/fp32");
  RunResult b = simulate(seed001("upstream", "ram_efficient", "dtype fp32"));
  EXPECT_FALSE(b.mismatch);
}

TEST(Loading, FullLoadingNeedsNoBroadcast) {
  RunResult r = simulate(seed001("upstream", "full"));
  EXPECT_FALSE(r.mismatch);
  EXPECT_TRUE(obs_at(r, 3, 0).collectives.empty());
  EXPECT_EQ(placed(obs_at(r, 1, 1), "lin0.lora_A.policy"), "cpu/bf16");
}

// Without the list form only the first (frozen) adapter is active: no_grad_fn.
// Loading the second one trainable (PeftModel.load_adapter -> set_requires_grad)
// trains that inactive adapter only; inject_adapter restores the active one's
// frozen flag, so still no_grad_fn (seed001_full_loading_trainable.seq, measured upstream).
TEST(Loading, FrozenAdaptersGiveNoGradFnAndATrainableLoadStillDoes) {
  std::string head = "world 2\nlayer lin0 8 8\nadapter reference r=4 targets=lin0 inference_mode\n"
                     "adapter policy r=4 targets=lin0 deferred\nfully_shard root\n---\n";
  RunResult frozen = simulate(head + "load_adapter policy frozen\nprepare\ntrain_step\n");
  EXPECT_EQ(obs_at(frozen, 3, 0).status, Status::NoGradFn);
  EXPECT_EQ(obs_at(frozen, 3, 0).message, kNoGradFnMessage);
  EXPECT_TRUE(frozen.findings.empty());
  RunResult trainable = simulate(head + "load_adapter policy trainable\nprepare\ntrain_step\n");
  EXPECT_EQ(obs_at(trainable, 3, 1).status, Status::NoGradFn);
  EXPECT_EQ(obs_at(trainable, 3, 1).opt_total, 2);  // the optimizer holds policy's A and B
  EXPECT_TRUE(trainable.findings.empty());
}

TEST(Loading, AdaptersLoadedBeforePrepareAreShardedAfterAreNot) {
  std::string head = "world 2\nlayer lin0 8 8\nadapter a r=4 targets=lin0\nadapter b r=4 targets=lin0 deferred\n"
                     "fully_shard root\n---\n";
  OneRank before(head + "load_adapter b trainable\nprepare\n");
  EXPECT_EQ(before.topo->params[before.param("lin0.lora_A.b")].group, 0);
  OneRank after(head + "prepare\nload_adapter b trainable\n");
  EXPECT_EQ(after.topo->params[after.param("lin0.lora_A.b")].group, -1);
}

}  // namespace
}  // namespace fsdpsim::test

namespace fsdpsim::test {

// The class alone on rank 1 of a state the test builds (properties/machine/bare_state.hpp), no
// RankModel: ram-efficient loading leaves rank 1's base weights on meta, the first adapter follows
// its base layer there and the second, whose container then holds a meta tensor, stays on cpu in
// fp32; prepare broadcasts every parameter from rank 0, puts everything on cpu and hands every
// optimizer entry that was on meta the one object the data_ptr() map keeps for key 0.
TEST(Accelerator, DrivenAlonePlacesOnMetaThenPrepareBroadcastsAndMapsTheMetaEntries) {
  BareRank r(seed001("upstream"));
  r.st.prepared = false;
  Accelerator acc(r.topo, 1, r.st.params, r.st.prepared, r.log);
  acc.place_base_params();
  EXPECT_EQ(r.st.params[r.param("lin0.weight")].device, Device::Meta);
  EXPECT_EQ(r.st.params[r.param("lin0.weight")].dtype, DType::BF16);
  acc.place_new_adapter(0);
  acc.place_new_adapter(1);
  const FsdpParam& ref_a = r.st.params[r.param("lin0.lora_A.reference")];
  const FsdpParam& pol_a = r.st.params[r.param("lin0.lora_A.policy")];
  EXPECT_EQ(ref_a.device, Device::Meta);
  EXPECT_EQ(ref_a.dtype, DType::BF16);
  EXPECT_EQ(pol_a.device, Device::Cpu);
  EXPECT_EQ(pol_a.dtype, DType::F32);
  std::vector<OwnerBytes> bytes;
  Observer(r.topo, 1, r.st, r.log).sharded_bytes_into(bytes);
  EXPECT_EQ(owner_bytes_text(bytes), "policy:448");  // nothing on meta counts

  for (const char* p : {"lin0.lora_A.reference", "lin1.lora_B.reference"}) r.st.params[r.param(p)].rg_s = true;
  const OptimizerPort port{r.topo, 1, r.st.params, r.fsdp(), nullptr};
  acc.prepare(r.st.optimizer, port);
  EXPECT_TRUE(r.st.prepared);
  ASSERT_EQ(r.log.records().size(), r.topo.params.size());
  for (const CollRecord& c : r.log.records()) EXPECT_EQ(c.op, CollOp::Broadcast);
  for (const FsdpParam& ps : r.st.params) EXPECT_EQ(ps.device, Device::Cpu);
  ASSERT_EQ(r.st.optimizer.objects.size(), 2u);
  EXPECT_EQ(r.st.optimizer.objects[0], r.st.optimizer.objects[1]);
}

}  // namespace fsdpsim::test
