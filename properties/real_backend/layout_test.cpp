// real::make_layout (real_backend/layout.cpp) reads the scenario on its own,
// never through the model's Topology: the two readings must agree on every
// parameter's name, order, group and chunk size, or the cross-check compares
// different things.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/machine/topology.hpp"
#include "real_backend/layout.hpp"
#include "sim/core/generator.hpp"
#include "sim/core/prng.hpp"

using namespace fsdpsim;

namespace {
void expect_same_layout(const SeqFile& f) {
  const Topology t = compile_topology(f);
  const real::Layout l = real::make_layout(f);
  const std::string what = print_seq(f);
  ASSERT_EQ(l.world, t.world) << what;
  ASSERT_EQ(l.params.size(), t.params.size()) << what;
  for (size_t p = 0; p < t.params.size(); ++p) {
    const ParamInfo& m = t.params[p];
    const real::ParamSpec& r = l.params[p];
    ASSERT_EQ(r.name, m.name) << "parameter " << p << "\n" << what;
    EXPECT_EQ(static_cast<int>(r.role), static_cast<int>(m.kind)) << m.name;
    EXPECT_EQ(r.layer, m.layer) << m.name;
    EXPECT_EQ(r.adapter, m.adapter) << m.name;
    EXPECT_EQ(r.rows, m.dim0) << m.name;
    EXPECT_EQ(r.cols, m.rest) << m.name;
    EXPECT_EQ(r.group, m.group) << m.name << "\n" << what;
    if (m.group >= 0) {
      EXPECT_EQ(r.chunk_numel(), m.shard_numel) << m.name << "\n" << what;
    }
  }
  ASSERT_EQ(l.groups.size(), t.groups.size()) << what;
  for (size_t g = 0; g < t.groups.size(); ++g) {
    const GroupInfo& m = t.groups[g];
    const real::GroupSpec& r = l.groups[g];
    EXPECT_EQ(r.name, m.name) << "group " << g << "\n" << what;
    EXPECT_EQ(r.is_root, m.is_root) << m.name;
    EXPECT_EQ(r.reshard_after_forward, m.raf) << m.name << "\n" << what;
    EXPECT_EQ(r.params, m.params) << m.name << "\n" << what;
    EXPECT_EQ(r.layers, m.layers) << m.name;
    EXPECT_EQ(r.first_layer, m.first_layer) << m.name;
    EXPECT_EQ(r.last_layer, m.last_layer) << m.name;
    EXPECT_EQ(r.numel, m.numel) << m.name << "\n" << what;
  }
  EXPECT_EQ(l.state_dict_order, t.state_dict_order) << what;
  ASSERT_EQ(l.layers.size(), t.layers.size()) << what;
  for (size_t i = 0; i < t.layers.size(); ++i) {
    const LayerInfo& m = t.layers[i];
    const real::LayerSpec& r = l.layers[i];
    EXPECT_EQ(r.name, m.name);
    EXPECT_EQ(r.experts, m.experts) << m.name;
    EXPECT_EQ(r.group, m.group) << m.name;
    EXPECT_EQ(r.weight, m.weight) << m.name;
    EXPECT_EQ(r.bias, m.bias) << m.name;
    for (int a = 0; a < t.n_adapters(); ++a) {
      EXPECT_EQ(r.lora_a[a], m.A[a]) << m.name << " adapter " << a;
      EXPECT_EQ(r.lora_b[a], m.B[a]) << m.name << " adapter " << a;
      EXPECT_EQ(r.saved_w[a], m.SW[a]) << m.name << " adapter " << a;
      EXPECT_EQ(r.saved_b[a], m.SB[a]) << m.name << " adapter " << a;
    }
    EXPECT_EQ(r.saved_module, m.saved_module) << m.name;
  }
}
}  // namespace

TEST(Layout, AgreesWithTheModelsTopologyOnGeneratedScenarios) {
  for (int world = 1; world <= 4; ++world) {
    for (uint64_t seed = 0; seed < 300; ++seed) {
      Prng rng(seed * 11 + static_cast<uint64_t>(world));
      GenOptions opt;
      opt.world = world;
      expect_same_layout(generate_seq(rng, opt));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(Layout, AgreesOnEveryCorpusRegression) {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(FSDPSIM_SOURCE_DIR) + "/corpus/regressions")) {
    if (e.path().extension() != ".seq") continue;
    ++files;
    expect_same_layout(parse_seq_file(e.path().string()));
  }
  EXPECT_GT(files, 20);
}

// modules_to_save (peft/utils/other.py::ModulesToSaveWrapper): original_module first, then one
// copy per listing adapter in injection order, in the wrapped layer's group (child or root),
// uneven chunks at world 3; a deferred adapter loaded before prepare changes the order.
TEST(Layout, AgreesOnModulesToSave) {
  const std::string text =
      "world 3\nseed 2\nprofile upstream\n"
      "layer lin0 4 5\nlayer lin1 5 7\nlayer lin2 7 2\n"
      "adapter b r=2 alpha=2 targets=lin0 modules_to_save=lin1,lin2\n"
      "adapter a r=2 alpha=2 targets=lin0 modules_to_save=lin1\n"
      "adapter late r=2 alpha=2 targets=lin0 deferred\n"
      "fully_shard lin1\nfully_shard root\n---\n"
      "load_adapter late frozen\nprepare\nforward\n";
  const SeqFile f = parse_seq(text, "<test>");
  expect_same_layout(f);
  const real::Layout l = real::make_layout(f);
  std::vector<std::string> names;
  for (const auto& p : l.params) names.push_back(p.name);
  const std::vector<std::string> want = {
      "lin0.weight", "lin0.bias", "lin0.lora_A.b", "lin0.lora_A.a", "lin0.lora_A.late", "lin0.lora_B.b", "lin0.lora_B.a",
      "lin0.lora_B.late", "lin1.original_module.weight", "lin1.original_module.bias", "lin1.modules_to_save.b.weight",
      "lin1.modules_to_save.b.bias", "lin1.modules_to_save.a.weight", "lin1.modules_to_save.a.bias",
      "lin2.original_module.weight", "lin2.original_module.bias", "lin2.modules_to_save.b.weight",
      "lin2.modules_to_save.b.bias"};
  EXPECT_EQ(names, want);
  const int lin1 = l.group_of_module("lin1");
  ASSERT_GE(lin1, 0);
  EXPECT_EQ(l.params[l.layers[1].saved_w[1]].group, lin1);  // a's copy sits in the wrapper's group
  EXPECT_EQ(l.params[l.layers[1].saved_w[1]].chunk_rows, 3);  // ceil(7 / 3)
  EXPECT_FALSE(l.layers[1].lora_after_fsdp);                  // the wrapper is the FSDP module
  EXPECT_EQ(real::param_shape(l, l.params[l.layers[1].saved_b[0]], 3), std::vector<int64_t>{3});  // a bias copy is 1-D
}
