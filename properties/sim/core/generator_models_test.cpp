// `--draw models` (sim/core/generator_models.cpp): tiny transformers `model` scenarios that parse,
// that the model and the upstream backend both take, and that run on the model backend; the other
// draws keep their seeds.
#include <gtest/gtest.h>

#include <set>

#include "model/vocab/model_lowering.hpp"
#include "sim/core/crosscheck.hpp"
#include "sim/core/generator.hpp"
#include "sim/core/simulator.hpp"

using namespace fsdpsim;

namespace {
GenOptions draw(const std::string& list, int world = 2) {
  GenOptions opt;
  EXPECT_EQ(apply_draws(list, &opt), "");
  opt.world = world;
  return opt;
}
}  // namespace

TEST(GeneratorModels, TwoHundredDrawsParseAndRunOnTheModel) {
  std::set<std::string> families, plans, kinds;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Prng rng(seed);
    const SeqFile f = generate_seq(rng, draw("models", 1 + static_cast<int>(seed % 2)));
    ASSERT_TRUE(f.scenario.model) << "seed " << seed;
    const std::string text = print_seq(f);
    SeqFile back;
    ASSERT_NO_THROW(back = parse_seq(text)) << text;
    EXPECT_EQ(print_seq(back), text);
    SourcePos at;
    EXPECT_EQ(model_refusal(back, &at), "") << text;
    EXPECT_EQ(upstream_refusal(back.scenario, &at), "") << text;
    const RunResult r = run_checked(lowered_file(back));
    EXPECT_FALSE(r.observations.empty()) << text;
    families.insert(family_name(f.scenario.model->family));
    plans.insert(f.scenario.plan == ShardPlan::TransformerLayers ? "plan" : "lines");
    for (const Op& op : f.ops) kinds.insert(op_name(op.kind));
  }
  EXPECT_EQ(families, (std::set<std::string>{"gpt2", "llama", "mistral", "qwen2"}));
  EXPECT_EQ(plans.size(), 2u);
  for (const char* k : {"train_step", "merge", "set_adapter", "save_model", "load_model", "delta_weight", "unshard",
                        "add_adapter", "load_adapter", "generate"})
    EXPECT_TRUE(kinds.count(k)) << k << " never drawn";
}

TEST(GeneratorModels, PercentOnAForkedStreamLeavesTheOtherSequences) {
  int models = 0;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    Prng a(seed), b(seed), c(seed), d(seed);
    const SeqFile mixed = generate_seq(a, draw("models=30"));
    if (mixed.scenario.model) ++models;
    else EXPECT_EQ(print_seq(mixed), print_seq(generate_seq(b, draw("checkpoint=0"))));
    const SeqFile all = generate_seq(c, draw("all,models=30"));
    if (!all.scenario.model) EXPECT_EQ(print_seq(all), print_seq(generate_seq(d, draw("all"))));
  }
  EXPECT_GT(models, 15);
  EXPECT_LT(models, 45);
}

TEST(GeneratorModels, BadPercentIsRefused) {
  GenOptions opt;
  EXPECT_NE(apply_draws("models=101", &opt), "");
  EXPECT_NE(apply_draws("model", &opt), "");
}
