// Placement, prepare, adapter checkpoints and the cost figures on the real
// backend (real_backend/loading.cpp, peft_model.cpp): seed 001's meta and
// bf16 tensors and the broadcast mismatch they cause (peft#2834), the per-rank
// rows of a saved adapter state dict (S6), and the bytes read off real tensors.
#include <gtest/gtest.h>

#include "model/spec/spec_checks.hpp"
#include "properties/test_util.hpp"
#include "real_backend/launcher.hpp"
#include "sim/core/crosscheck.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {

const std::chrono::milliseconds kTimeout(5000);

// Seed 001: rank 0 loads the bf16 base model, rank 1 holds meta tensors; two
// deferred adapters on lin0 are loaded before prepare, `reference` first.
std::string seed001(const std::string& profile, const std::string& ops = "") {
  return "world 2\nseed 1\nprofile " + profile +
         "\nlayer lin0 8 8\nlayer lin1 8 2\n"
         "adapter default r=4 alpha=4 targets=lin1\n"
         "adapter policy r=8 alpha=8 targets=lin0 deferred\n"
         "adapter reference r=8 alpha=8 targets=lin0 deferred\n"
         "fully_shard lin0\nfully_shard root\n"
         "loading ram_efficient\ndtype bf16 autocast_adapter_dtype=false\n---\n"
         "load_adapter reference frozen\nload_adapter policy trainable\nprepare\n" + ops;
}

real::RealResult run(const SeqFile& f) {
  real::RealResult r = real::run_real(f, real::RankMode::Threads, kTimeout);
  EXPECT_FALSE(r.infra_failure) << r.infra_message;
  return r;
}
real::RealResult run(const std::string& text) { return run(parse_seq(text, "<test>")); }

// "device/dtype" of one adapter parameter in an observation.
std::string placed(const Observation& o, const std::string& param) {
  for (const auto& p : o.params)
    if (p.name == param) return std::string(device_name(p.device)) + "/" + dtype_name(p.dtype);
  return "absent";
}

std::string colls_text(const Observation& o) {
  std::string s;
  for (const auto& c : o.collectives) {
    s += (s.empty() ? "" : " ") + collective_text(c) + "[";
    for (size_t i = 0; i < c.parts.size(); ++i) s += (i ? "," : "") + c.parts[i].param + ":" + std::to_string(c.parts[i].numel);
    s += "]";
  }
  return s;
}

}  // namespace

TEST(RealPrepare, Seed001UpstreamLeavesDtypesApartAndPrepareCrossPairs) {
  real::RealResult r = run(seed001("upstream"));
  ASSERT_EQ(r.observations.size(), 6u);
  // Rank 0: every parameter follows the base weight to cpu/bf16.
  const Observation& r0 = obs_at(r.observations, 2, 0);
  for (const char* p : {"lin0.lora_A.policy", "lin0.lora_B.policy", "lin0.lora_A.reference", "lin0.lora_B.reference",
                        "lin1.lora_A.default"})
    EXPECT_EQ(placed(r0, p), "cpu/bf16") << p;
  // Rank 1: reference went to the meta base weight; policy then found a meta
  // parameter in each container and stayed on cpu in fp32.
  const Observation& r1 = obs_at(r.observations, 2, 1);
  EXPECT_EQ(placed(r1, "lin0.lora_A.reference"), "meta/bf16");
  EXPECT_EQ(placed(r1, "lin0.lora_B.reference"), "meta/bf16");
  EXPECT_EQ(placed(r1, "lin0.lora_A.policy"), "cpu/fp32");
  EXPECT_EQ(placed(r1, "lin0.lora_B.policy"), "cpu/fp32");
  EXPECT_EQ(placed(r1, "lin1.lora_A.default"), "meta/bf16");
  EXPECT_EQ(placed(obs_at(r.observations, 1, 1), "lin0.lora_A.reference"), "meta/bf16");
  // Before prepare every parameter is whole (bf16 on rank 0); rank 1's meta
  // tensors count nothing, policy's whole fp32 tensors do.
  EXPECT_EQ(owner_bytes_text(r0.sharded_bytes), "default:80 policy:256 reference:256 base:180");
  EXPECT_EQ(owner_bytes_text(r1.sharded_bytes), "policy:512");
  EXPECT_EQ(r1.opt_total, 0);  // no optimizer before accelerate's prepare
  EXPECT_TRUE(r1.groups.empty());  // nor any FSDP group
  // gloo completes rank 0's bf16 broadcast into rank 1's fp32 tensor, part-filled (real bytes)
  const std::string want =
      "cross-paired: rank 0 in broadcast(lin0.lora_A.policy, 64 bf16) of lin0.lora_A.policy at step 3; "
      "rank 1 in broadcast(lin0.lora_A.policy, 64 fp32) of lin0.lora_A.policy at step 3";
  for (int rank : {0, 1}) {
    const Observation& o = obs_at(r.observations, 3, rank);
    EXPECT_EQ(o.status, Status::Ok);
    EXPECT_EQ(o.message, want);
    std::string dt = rank == 0 ? "bf16" : "fp32";
    // state_dict() order: policy, loaded before prepare, comes after the declared reference
    EXPECT_EQ(colls_text(o).substr(0, colls_text(o).find(" broadcast(lin0.lora_B.reference")),
              "broadcast(lin0.weight, 64 bf16)[lin0.weight:64] broadcast(lin0.bias, 8 bf16)[lin0.bias:8] "
              "broadcast(lin0.lora_A.reference, 64 bf16)[lin0.lora_A.reference:64] "
              "broadcast(lin0.lora_A.policy, 64 " + dt + ")[lin0.lora_A.policy:64]");
  }
  RunResult model = run_checked(parse_seq(seed001("upstream"), "<test>"));
  EXPECT_EQ(compare_observations(model.observations, r.observations), std::vector<std::string>{});
}

TEST(RealPrepare, Seed001PatchedPreparesCleanlyOnCpuInBf16) {
  std::string text = seed001("patched", "train_step\n");
  real::RealResult r = run(text);
  ASSERT_EQ(r.observations.size(), 8u);
  for (const char* p : {"lin0.lora_A.policy", "lin0.lora_B.policy", "lin0.lora_A.reference", "lin1.lora_B.default"})
    EXPECT_EQ(placed(obs_at(r.observations, 2, 1), p), "meta/bf16") << p;
  for (int rank : {0, 1}) {
    const Observation& o = obs_at(r.observations, 3, rank);
    ASSERT_EQ(o.status, Status::Ok) << o.message;
    for (const auto& p : o.params) EXPECT_EQ(placed(o, p.name), "cpu/bf16") << p.name;
    ASSERT_EQ(o.collectives.size(), 10u);  // weight, bias, 2 A, 2 B on lin0; weight, bias, A, B on lin1
    for (const auto& c : o.collectives) {
      EXPECT_EQ(c.op, CollOp::Broadcast);
      EXPECT_EQ(c.dtype, DType::BF16);
      ASSERT_EQ(c.parts.size(), 1u);
      EXPECT_EQ(c.parts[0].param, c.group);
      EXPECT_EQ(c.parts[0].numel, c.count);
    }
    EXPECT_EQ(o.collectives[2].group, "lin0.lora_A.reference");  // injection order: the loaded policy last
    EXPECT_EQ(o.collectives[3].group, "lin0.lora_A.policy");
    // Sharded now: padded chunks in bf16.
    EXPECT_EQ(owner_bytes_text(o.sharded_bytes), "default:40 policy:128 reference:128 base:90");
    EXPECT_EQ(o.opt_total, 4);  // default's A, B and the trainable-loaded policy's (PeftModel.load_adapter -> set_requires_grad)
    EXPECT_EQ(o.opt_missing, 0);
    const Observation& t = obs_at(r.observations, 4, rank);
    ASSERT_EQ(t.status, Status::Ok) << t.message;
    EXPECT_EQ(*t.grads, std::vector<std::string>{"default"});
    for (const auto& l : t.layers) EXPECT_EQ(l.stored, WeightClass::Exact) << l.name;
  }
  // Rank 1 adopted rank 0's values: the ranks agree and the spec sees nothing.
  EXPECT_TRUE(check_spec(parse_seq(text, "<test>"), r.observations).empty());
  RunResult model = run_checked(parse_seq(text, "<test>"));
  EXPECT_EQ(compare_observations(model.observations, r.observations), std::vector<std::string>{});
}

namespace {

// One layer, two adapters; lin0's A has 8 rows, B 8 rows: 4 per rank at world 2.
std::string ckpt(const std::string& profile, const std::string& ops, const std::string& set = "") {
  return "world 2\nprofile " + profile + "\n" + set +
         "layer lin0 6 8\nadapter a r=8 alpha=8 targets=lin0\nadapter b r=2 alpha=2 targets=lin0\n"
         "fully_shard root\n---\n" + ops;
}

}  // namespace

// save_and_load.py::_reshard_dtensor_values_for_load: a tensor of this rank's local
// shard shape is wrapped as this rank's shard, so every rank loads rank 0's rows:
// no error, rank 0 gets its own values back, rank 1 holds rank 0's. A shape that is neither local nor global
// (lin0 with 3 rows of b's A: 2 on rank 0, 1 on rank 1) fails on rank 1 only.
TEST(RealAdapterCheckpoint, UpstreamSavesLocalRowsAndEveryRankLoadsRank0s) {
  std::string text = ckpt("upstream", "train_step\nsave_adapters\ntrain_step\nload_adapters\n");
  real::RealResult r = run(text);
  for (int rank : {0, 1}) {
    const Observation& s = obs_at(r.observations, 2, rank);
    ASSERT_EQ(s.status, Status::Ok) << s.message;
    ASSERT_EQ(s.saved.size(), 4u);
    const std::vector<SavedObs> want = {{"lin0.lora_A.a", 4, 8, DType::F32},
                                        {"lin0.lora_A.b", 1, 2, DType::F32},
                                        {"lin0.lora_B.a", 4, 8, DType::F32},
                                        {"lin0.lora_B.b", 4, 8, DType::F32}};
    EXPECT_EQ(s.saved, want);
    const Observation& l = obs_at(r.observations, 4, rank);
    EXPECT_EQ(l.status, Status::Ok) << l.message;
    EXPECT_TRUE(l.collectives.empty());  // reading a file is no collective
    const std::vector<std::string> diff =
        rank == 0 ? std::vector<std::string>{} : std::vector<std::string>{"lin0.lora_A.a", "lin0.lora_A.b", "lin0.lora_B.a", "lin0.lora_B.b"};
    EXPECT_EQ(l.reload_diff, diff) << rank;
  }
  RunResult model = run_checked(parse_seq(text, "<test>"));
  EXPECT_EQ(compare_observations(model.observations, r.observations), std::vector<std::string>{});
  std::string odd = "world 2\nprofile upstream\nlayer lin0 6 8\nadapter a r=2 alpha=2 targets=lin0\n"
                    "adapter b r=3 alpha=3 targets=lin0\nfully_shard root\n---\nsave_adapters\nload_adapters\n";
  real::RealResult o = run(odd);
  EXPECT_EQ(obs_at(o.observations, 2, 0).status, Status::Ok);
  // Module.load_state_dict collects the size mismatches into one RuntimeError
  EXPECT_EQ(obs_at(o.observations, 2, 1).status, Status::Exception);
  EXPECT_EQ(obs_at(o.observations, 2, 1).message, "RuntimeError: Error(s) in loading state_dict for FSDPPeftModel:");
  RunResult om = run_checked(parse_seq(odd, "<test>"));
  EXPECT_EQ(compare_observations(om.observations, o.observations), std::vector<std::string>{});
}

TEST(RealAdapterCheckpoint, PatchedSavesFullRowsAndReloadsExactly) {
  std::string text = ckpt("patched", "train_step\nsave_adapters\ntrain_step\nload_adapters\nsave_adapters b\n");
  real::RealResult r = run(text);
  for (int rank : {0, 1}) {
    const Observation& s = obs_at(r.observations, 2, rank);
    const std::vector<SavedObs> want = {{"lin0.lora_A.a", 8, 8, DType::F32},
                                        {"lin0.lora_A.b", 2, 2, DType::F32},
                                        {"lin0.lora_B.a", 8, 8, DType::F32},
                                        {"lin0.lora_B.b", 8, 8, DType::F32}};
    EXPECT_EQ(s.saved, want);
    const Observation& l = obs_at(r.observations, 4, rank);
    ASSERT_EQ(l.status, Status::Ok) << l.message;
    EXPECT_TRUE(l.reload_diff.empty());
    EXPECT_TRUE(l.collectives.empty());
    EXPECT_EQ(obs_at(r.observations, 5, rank).saved.size(), 2u);  // named: b only
  }
  RunResult model = run_checked(parse_seq(text, "<test>"));
  EXPECT_EQ(compare_observations(model.observations, r.observations), std::vector<std::string>{});
}

// Tensors a refused add_adapter left are saved once per saved adapter's dict (half_added_saved).
TEST(RealAdapterCheckpoint, AHalfAddedAdapterIsInEverySavedAdaptersStateDict) {
  real::RealResult r = run(parse_seq_file(FSDPSIM_SOURCE_DIR "/corpus/regressions/add_adapter_raised_half_added_saved_per_adapter.seq"));
  for (int rank : {0, 1}) {
    ASSERT_EQ(obs_at(r.observations, 1, rank).status, Status::ValueError);
    EXPECT_EQ(obs_at(r.observations, 2, rank).saved, half_added_saved(true)) << rank;
    EXPECT_EQ(obs_at(r.observations, 3, rank).saved, half_added_saved(false)) << rank;
  }
}

TEST(RealAdapterCheckpoint, ActiveSelectionSavesOnlyTheActiveAdapter) {
  real::RealResult r = run(ckpt("patched", "save_adapters\n", "set adapter_save_selection=active\n"));
  const Observation& s = obs_at(r.observations, 1, 0);
  ASSERT_EQ(s.saved.size(), 2u);
  EXPECT_EQ(s.saved[0].name, "lin0.lora_A.a");
  EXPECT_EQ(s.saved[1].name, "lin0.lora_B.a");
}

// Parts, sharded bytes and the unsharded peak on a small scenario at world 2:
// lin0 (4 -> 6) in its own group, lin1 (6 -> 3) in the root's, adapter a (r=2) on both.
TEST(RealCost, PartsShardedBytesAndUnshardedPeak) {
  std::string text =
      "world 2\nprofile patched\nlayer lin0 4 6\nlayer lin1 6 3\nadapter a r=2 alpha=2 targets=lin0,lin1\n"
      "fully_shard lin0 reshard_after_forward=true\nfully_shard root reshard_after_forward=true\n---\n"
      "unshard lin0\nreshard\ntrain_step\n";
  real::RealResult r = run(text);
  for (int rank : {0, 1}) {
    // Padded shards: lin0.weight 3x4, bias 3, A 1x4, B 3x2; lin1.weight 2x6, bias 2, A 1x6, B 2x2.
    const Observation& u = obs_at(r.observations, 1, rank);
    EXPECT_EQ(colls_text(u), "all_gather(lin0, 25)[lin0.weight:12,lin0.bias:3,lin0.lora_A.a:4,lin0.lora_B.a:6]");
    EXPECT_EQ(owner_bytes_text(u.sharded_bytes), "a:80 base:116");
    EXPECT_EQ(owner_bytes_text(u.peak_unsharded), "a:80 base:120");  // lin0's 25 elements x 2 ranks x 4 bytes
    // reshard: lin0 was unsharded when the op started.
    const Observation& s = obs_at(r.observations, 2, rank);
    EXPECT_TRUE(s.collectives.empty());
    EXPECT_EQ(owner_bytes_text(s.peak_unsharded), "a:80 base:120");
    // train_step: forward and backward each gather the root (lin1) then lin0;
    // lin0's input needs no grad, so both reduce-scatters wait for the final
    // callback (group order). The root's copies and lin0's are alive together.
    const Observation& t = obs_at(r.observations, 3, rank);
    ASSERT_EQ(t.status, Status::Ok) << t.message;
    const std::string ag_root = "all_gather(root, 24)[lin1.weight:12,lin1.bias:2,lin1.lora_A.a:6,lin1.lora_B.a:4]";
    const std::string ag_lin0 = "all_gather(lin0, 25)[lin0.weight:12,lin0.bias:3,lin0.lora_A.a:4,lin0.lora_B.a:6]";
    EXPECT_EQ(colls_text(t), ag_root + " " + ag_lin0 + " " + ag_root + " " + ag_lin0 +
                                 " reduce_scatter(root, 10)[lin1.lora_A.a:6,lin1.lora_B.a:4]"
                                 " reduce_scatter(lin0, 10)[lin0.lora_A.a:4,lin0.lora_B.a:6]");
    EXPECT_EQ(owner_bytes_text(t.sharded_bytes), "a:80 base:116");
    EXPECT_EQ(owner_bytes_text(t.peak_unsharded), "a:160 base:232");
  }
  RunResult model = run_checked(parse_seq(text, "<test>"));
  EXPECT_EQ(compare_observations(model.observations, r.observations), std::vector<std::string>{});
}

// An adapter in the model at prepare, deleted and added again: PEFT's
// LoraLayer.update_layer registers a new module no FSDP group manages (torch
// _fsdp_init.py::_get_managed_states ran at fully_shard): group "", held whole,
// its grads straight from autograd; the group keeps all-gathering the deleted
// module's shard under the name (seed003_readd_after_delete.seq, as upstream measured).
TEST(RealReaddAfterDelete, TheNewModuleIsUnmanagedAndTheGroupGathersTheGhost) {
  std::string text =
      "world 2\nseed 5\nprofile upstream\nlayer lin0 8 8\n"
      "adapter default r=2 alpha=4 targets=lin0 init=random\n"
      "adapter other r=2 alpha=4 targets=lin0 init=random deferred\n"
      "fully_shard root reshard_after_forward=true\n---\n"
      "load_adapter other trainable\nprepare\ndelete_adapter other\nadd_adapter other\n"
      "set_adapter [default,other]\ntrain_step\n";
  real::RealResult r = run(text);
  for (int rank : {0, 1}) {
    const Observation& o = obs_at(r.observations, 6, rank);
    ASSERT_EQ(o.status, Status::Ok) << o.message;
    for (const auto& p : o.params) {
      const bool other = p.name.str().find(".other") != std::string::npos;
      EXPECT_EQ(p.group, other ? "" : "root") << p.name;
      if (other) EXPECT_EQ(p.rg_u, -1) << p.name;
    }
    EXPECT_EQ(o.sharded_bytes, (std::vector<OwnerBytes>{{"default", 64}, {"other", 128}, {"base", 144}}));
    EXPECT_EQ(o.grads, (std::optional<std::vector<std::string>>{{"default", "other"}}));  // both adapters train; other's grads come from autograd, not a reduce-scatter
    std::string c = colls_text(o);
    EXPECT_NE(c.find("lin0.lora_A.other:8"), std::string::npos) << c;  // the ghost's shard, all-gathered
    EXPECT_EQ(c.find("reduce_scatter(root)[lin0.lora_A.default:8,lin0.lora_A.other"), std::string::npos) << c;
  }
  RunResult model = run_checked(parse_seq(text, "<test>"));
  EXPECT_EQ(compare_observations(model.observations, r.observations), std::vector<std::string>{});
}
