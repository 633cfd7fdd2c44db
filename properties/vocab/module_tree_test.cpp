// module_tree.cpp without torch: the shapes and names that differ between families (GPT-2's
// Conv1D, qwen2's q/k/v bias, qwen2_moe's experts, tied heads). The whole trees are compared with
// the installed transformers by properties/vocab/module_tree_test.py (label upstream).
#include <gtest/gtest.h>

#include "model/vocab/module_tree.hpp"

namespace fsdpsim {
namespace {

ModelDecl decl(Family f) {
  ModelDecl m;
  m.family = f;
  m.hidden = 16, m.intermediate = 24, m.layers = 2, m.heads = 4, m.kv_heads = 2, m.vocab = 64;
  if (f == Family::Gpt2) m.kv_heads = 4, m.tie_embeddings = true;
  if (f == Family::Qwen2Moe) m.experts = 4, m.top_k = 2;
  return m;
}

const TreeParam* param(const ModuleTree& t, const std::string& name) {
  for (const auto& p : t.params)
    if (p.name == name) return &p;
  return nullptr;
}

TEST(ModuleTree, LlamaShapesFollowHeadsAndKvHeads) {
  const ModuleTree t = module_tree(decl(Family::Llama));
  EXPECT_EQ(t.modules.front().type, "LlamaForCausalLM");
  EXPECT_EQ(param(t, "model.layers.1.self_attn.k_proj.weight")->shape, (std::vector<int>{8, 16}));  // kv_heads * head_dim
  EXPECT_EQ(param(t, "model.layers.1.mlp.down_proj.weight")->shape, (std::vector<int>{16, 24}));
  EXPECT_EQ(param(t, "model.layers.0.self_attn.q_proj.bias"), nullptr);
  EXPECT_EQ(param(t, "lm_head.weight")->tied_to, "");
  EXPECT_EQ(t.decoder_layers, (std::vector<std::string>{"model.layers.0", "model.layers.1"}));
}

TEST(ModuleTree, Qwen2BiasesQkvOnly) {
  const ModuleTree t = module_tree(decl(Family::Qwen2));
  EXPECT_EQ(param(t, "model.layers.0.self_attn.v_proj.bias")->shape, (std::vector<int>{8}));
  EXPECT_EQ(param(t, "model.layers.0.self_attn.o_proj.bias"), nullptr);
}

TEST(ModuleTree, Gpt2IsConv1DAndTied) {
  const ModuleTree t = module_tree(decl(Family::Gpt2));
  EXPECT_EQ(t.modules[t.module_index("transformer.h.0.attn.c_attn")].kind, ModuleKind::Conv1D);
  EXPECT_EQ(param(t, "transformer.h.0.attn.c_attn.weight")->shape, (std::vector<int>{16, 48}));  // (in, out)
  EXPECT_EQ(param(t, "lm_head.weight")->tied_to, "transformer.wte.weight");
  EXPECT_EQ(resolve_targets(t, {"all-linear"}).modules.size(), 8u);  // c_attn, c_proj, c_fc, mlp.c_proj per block
}

TEST(ModuleTree, Qwen2MoeHasExpertsSharedExpertAndGates) {
  const ModuleTree t = module_tree(decl(Family::Qwen2Moe));
  EXPECT_EQ(param(t, "model.layers.0.mlp.experts.gate_up_proj")->shape, (std::vector<int>{4, 48, 16}));
  EXPECT_EQ(param(t, "model.layers.0.mlp.gate.weight")->shape, (std::vector<int>{4, 16}));
  EXPECT_EQ(param(t, "model.layers.0.mlp.shared_expert_gate.weight")->shape, (std::vector<int>{1, 16}));
  // the router and the 3-D experts are no Linear: all-linear takes attention, shared expert and its gate
  const auto all = resolve_targets(t, {"all-linear"}).modules;
  EXPECT_EQ(all.size(), 16u);
  EXPECT_NE(resolve_targets(t, {"experts"}).error.find("Qwen2MoeExperts"), std::string::npos);
}

}  // namespace
}  // namespace fsdpsim
