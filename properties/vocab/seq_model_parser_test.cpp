// The `model` scenario line and what it brings to the grammar (seq_model_parser.cpp): print/parse
// round trip, PEFT target_modules resolution on dotted module paths, fully_shard_plan, explicit
// dotted fully_shard lines, and every bad input's exact file:line:column and words.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model/vocab/module_tree.hpp"
#include "model/vocab/seq.hpp"
#include "model/vocab/source_error.hpp"

namespace fsdpsim {
namespace {

const std::string kLlama = "model llama hidden=16 intermediate=32 layers=2 heads=4 kv_heads=2 vocab=64\n";

std::string file(const std::string& model, const std::string& rest) { return "world 2\n" + model + rest + "---\ntrain_step\n"; }

TEST(SeqModelParser, ModelLineRoundTripsWithEveryOptionSpelledOut) {
  const SeqFile f = parse_seq(file(kLlama, "adapter a r=4 alpha=8 targets=q_proj,v_proj\nfully_shard_plan transformer_layers\n"));
  ASSERT_TRUE(f.scenario.model);
  EXPECT_EQ(f.scenario.model->family, Family::Llama);
  EXPECT_FALSE(f.scenario.model->tie_embeddings);  // LlamaConfig's default
  EXPECT_EQ(f.scenario.model->seq_len, 16);
  EXPECT_EQ(f.scenario.plan, ShardPlan::TransformerLayers);
  const std::string printed = print_seq(f);
  EXPECT_NE(printed.find("model llama hidden=16 intermediate=32 layers=2 heads=4 kv_heads=2 vocab=64 tie_embeddings=false seq_len=16\n"),
            std::string::npos) << printed;
  EXPECT_NE(printed.find("fully_shard_plan transformer_layers\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("targets=q_proj,v_proj "), std::string::npos) << printed;
  EXPECT_EQ(parse_seq(printed), f);
  EXPECT_EQ(print_seq(parse_seq(printed)), printed);
}

TEST(SeqModelParser, Gpt2TiesByDefaultAndMoeKeepsExperts) {
  const SeqFile g = parse_seq(file("model gpt2 hidden=16 intermediate=64 layers=1 heads=4 kv_heads=4 vocab=50\n",
                                   "adapter a targets=c_attn\nfully_shard root\n"));
  EXPECT_TRUE(g.scenario.model->tie_embeddings);
  EXPECT_EQ(parse_seq(print_seq(g)), g);
  const SeqFile m = parse_seq(file("model qwen2_moe hidden=16 intermediate=8 layers=1 heads=4 kv_heads=2 vocab=50 experts=4 top_k=2 "
                                   "tie_embeddings=true seq_len=8\n",
                                   "adapter a targets=all-linear\nfully_shard_plan lora_modules\n"));
  EXPECT_EQ(m.scenario.model->experts, 4);
  EXPECT_EQ(m.scenario.model->top_k, 2);
  EXPECT_EQ(m.scenario.model->seq_len, 8);
  EXPECT_NE(print_seq(m).find("experts=4 top_k=2 seq_len=8"), std::string::npos);
  EXPECT_EQ(parse_seq(print_seq(m)), m);
}

TEST(SeqModelParser, ExplicitDottedFullyShardLinesIncludingLoraSubmodules) {
  const SeqFile f = parse_seq(file(kLlama,
                                   "adapter a targets=model.layers.1.self_attn.q_proj\n"
                                   "fully_shard model.layers.1.self_attn.q_proj.lora_A.a,model.layers.1.self_attn.q_proj.lora_B.a\n"
                                   "fully_shard model.layers.0 reshard_after_forward=false\n"
                                   "fully_shard model.layers.1\n"
                                   "fully_shard root\n"));
  ASSERT_EQ(f.scenario.shards.size(), 4u);
  EXPECT_EQ(f.scenario.shards[0].modules[1], "model.layers.1.self_attn.q_proj.lora_B.a");
  EXPECT_EQ(f.scenario.shards[1].raf, Raf::False);
  EXPECT_EQ(parse_seq(print_seq(f)), f);
}

TEST(SeqModelParser, TargetsResolveAsPeftTargetModules) {
  ModelDecl m;
  m.hidden = 16, m.intermediate = 32, m.layers = 2, m.heads = 4, m.kv_heads = 2, m.vocab = 64;
  const ModuleTree t = module_tree(m);
  auto mods = [&](std::vector<std::string> targets) { return resolve_targets(t, targets).modules; };
  EXPECT_EQ(mods({"q_proj", "v_proj"}), (std::vector<std::string>{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj",
                                                                   "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"}));
  // a dotted suffix, a whole name; a piece of a name is no suffix (`proj` matches nothing)
  EXPECT_EQ(mods({"1.mlp.down_proj"}), (std::vector<std::string>{"model.layers.1.mlp.down_proj"}));
  EXPECT_EQ(mods({"model.layers.0.self_attn.o_proj"}), (std::vector<std::string>{"model.layers.0.self_attn.o_proj"}));
  EXPECT_NE(resolve_targets(t, {"proj"}).error.find("not found in the base model"), std::string::npos);
  // all-linear: the 7 Linears of each layer, not lm_head
  const std::vector<std::string> all = mods({"all-linear"});
  EXPECT_EQ(all.size(), 14u);
  EXPECT_EQ(std::count(all.begin(), all.end(), "lm_head"), 0);
  EXPECT_EQ(mods({"lm_head"}), (std::vector<std::string>{"lm_head"}));  // named, the head is a target like any Linear
  EXPECT_NE(resolve_targets(t, {"self_attn"}).error.find("PEFT cannot wrap module 'model.layers.0.self_attn' (a LlamaAttention)"),
            std::string::npos);
  EXPECT_NE(resolve_targets(t, {"embed_tokens"}).error.find("is an Embedding"), std::string::npos);
}

struct BadModel {
  const char* name;
  std::string text;
  int line, column;
  const char* phrase;
};

std::vector<BadModel> bad_models() {
  const std::string a = "adapter a targets=q_proj\nfully_shard root\n";
  return {
      {"UnknownFamily", file("model lama hidden=16\n", a), 2, 7, "unknown model family 'lama'; did you mean 'llama'?"},
      {"MissingKey", file("model llama hidden=16 intermediate=32 layers=2 heads=4 kv_heads=2\n", a), 2, 66, "expected vocab=N on the model line"},
      {"UnknownKey", file("model llama hiden=16\n", a), 2, 13, "unknown model option 'hiden'; did you mean 'hidden'?"},
      {"KeyTwice", file("model llama hidden=16 hidden=16\n", a), 2, 23, "model option 'hidden' given twice"},
      {"BadNumber", file("model llama hidden=0\n", a), 2, 20, "expected the hidden size, a whole number in 1..8192, got 0"},
      {"HeadsNotDividing", file("model llama hidden=16 intermediate=32 layers=2 heads=3 kv_heads=1 vocab=64\n", a), 2, 48,
       "heads=3 does not divide hidden=16"},
      {"KvHeadsNotDividing", file("model llama hidden=16 intermediate=32 layers=2 heads=4 kv_heads=3 vocab=64\n", a), 2, 56,
       "kv_heads=3 does not divide heads=4"},
      {"Gpt2Gqa", file("model gpt2 hidden=16 intermediate=32 layers=2 heads=4 kv_heads=2 vocab=64\n", "adapter a targets=c_attn\nfully_shard root\n"),
       2, 55, "gpt2 has no grouped-query attention"},
      {"ExpertsOnLlama", file("model llama hidden=16 intermediate=32 layers=2 heads=4 kv_heads=2 vocab=64 experts=4\n", a), 2, 76,
       "experts= is qwen2_moe's"},
      {"MoeWithoutExperts", file("model qwen2_moe hidden=16 intermediate=32 layers=2 heads=4 kv_heads=2 vocab=64\n", a), 2, 79,
       "expected experts=N on the model line"},
      {"TieNotBool", file("model llama hidden=16 intermediate=32 layers=2 heads=4 kv_heads=2 vocab=64 tie_embeddings=yes\n", a), 2, 76,
       "expected tie_embeddings=true|false, got 'yes'"},
      {"ModelAndLayer", "layer lin0 4 4\n" + kLlama + a + "---\ntrain_step\n", 2, 1, "a `model` line and `layer` lines cannot be in one file"},
      {"LayerAfterModel", file(kLlama, "layer lin0 4 4\n" + a), 3, 1, "a `model` line and `layer` lines cannot be in one file"},
      {"ModelTwice", file(kLlama + kLlama, a), 3, 1, "`model` is given twice (first at line 2)"},
      {"UnknownTarget", file(kLlama, "adapter a targets=qproj\nfully_shard root\n"), 3, 11, "PEFT finds none of targets=qproj"},
      {"TargetAContainer", file(kLlama, "adapter a targets=mlp\nfully_shard root\n"), 3, 11,
       "PEFT cannot wrap module 'model.layers.0.mlp' (a LlamaMLP)"},
      {"AllLinearWithOthers", file(kLlama, "adapter a targets=all-linear,q_proj\nfully_shard root\n"), 3, 11, "all-linear stands alone"},
      {"BadPath", file(kLlama, "adapter a targets=self_attn..q_proj\nfully_shard root\n"), 3, 11, "module paths are names joined by '.'"},
      {"ModulesToSave", file(kLlama, "adapter a targets=q_proj modules_to_save=lm_head\nfully_shard root\n"), 3, 26,
       "modules_to_save= on a `model` scenario is not modelled yet"},
      {"PlanWithoutModel", "layer lin0 4 4\nadapter a targets=lin0\nfully_shard_plan transformer_layers\n---\ntrain_step\n", 3, 1,
       "fully_shard_plan needs a `model` line"},
      {"PlanUnknown", file(kLlama, "adapter a targets=q_proj\nfully_shard_plan layers\n"), 4, 18, "expected fully_shard_plan transformer_layers|lora_modules"},
      {"PlanAndShard", file(kLlama, "adapter a targets=q_proj\nfully_shard_plan transformer_layers\nfully_shard root\n"), 5, 1,
       "fully_shard_plan and fully_shard lines cannot be in one file"},
      {"ShardUnknownModule", file(kLlama, "adapter a targets=q_proj\nfully_shard model.layers.2\nfully_shard root\n"), 4, 13,
       "unknown module 'model.layers.2'"},
      {"ShardLoraOfUntargeted", file(kLlama, "adapter a targets=q_proj\nfully_shard model.layers.0.self_attn.k_proj.lora_A.a\nfully_shard root\n"), 4, 13,
       "unknown module 'model.layers.0.self_attn.k_proj.lora_A.a'"},
      {"ShardParentFirst", file(kLlama, "adapter a targets=q_proj\nfully_shard model.layers.0\nfully_shard model.layers.0.mlp\nfully_shard root\n"), 5, 13,
       "module 'model.layers.0.mlp' is inside 'model.layers.0', sharded by an earlier fully_shard: calls go bottom-up"},
      {"NoShards", file(kLlama, "adapter a targets=q_proj\n"), 4, 1, "or a `fully_shard_plan` line"},
      {"CheckpointOnModel", file(kLlama, "adapter a targets=q_proj\ncheckpoint model.layers.0\nfully_shard root\n"), 4, 1,
       "`checkpoint` on a `model` scenario is not modelled yet"},
  };
}

TEST(SeqModelParser, BadInputNamesLineColumnAndWhy) {
  for (const BadModel& b : bad_models()) {
    try {
      parse_seq(b.text, "f.seq");
      ADD_FAILURE() << b.name << ": parsed";
    } catch (const SourceError& e) {
      const std::string want = "f.seq:" + std::to_string(b.line) + ":" + std::to_string(b.column) + ": ";
      EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << b.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(b.phrase), std::string::npos) << b.name << ": " << e.what();
    }
  }
}

TEST(SeqModelParser, AdapterLinesComeAfterTheModelLine) {
  try {
    parse_seq("world 1\nlayer lin0 4 4\nadapter a targets=lin0\n" + kLlama + "fully_shard root\n---\n", "f.seq");
    FAIL() << "parsed";
  } catch (const SourceError& e) {
    EXPECT_NE(std::string(e.what()).find("f.seq:4:1: a `model` line and `layer` lines"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fsdpsim
