// The whole-vocabulary generator (sim/core/generator_all.cpp, `--draw all`): deterministic, valid,
// every feature reachable at every world, and the default generator's seeds untouched.
#include <gtest/gtest.h>

#include <set>

#include "properties/test_util.hpp"
#include "sim/core/coverage.hpp"
#include "model/vocab/op_rules.hpp"
#include "sim/core/generator.hpp"

using namespace fsdpsim;

namespace {
GenOptions draw_all(int world) {
  GenOptions opt;
  EXPECT_EQ(apply_draws("all", &opt), "");
  opt.world = world;
  return opt;
}
uint64_t fnv(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

TEST(GeneratorAll, SameSeedSameTextAndItsOwnStream) {
  std::set<std::string> seen;
  for (uint64_t seed : {0ull, 1ull, 42ull, 123456789ull}) {
    Prng a(seed), b(seed), legacy(seed);
    const std::string text = print_seq(generate_seq(a, draw_all(2)));
    EXPECT_EQ(text, print_seq(generate_seq(b, draw_all(2))));
    EXPECT_NE(text, print_seq(generate_seq(legacy, {})));
    seen.insert(text);
  }
  EXPECT_EQ(seen.size(), 4u);
}

// `--draw all` seeds keep their meaning from now on, as the default generator's do
// (Generator.FixedSeedsPrintFixedSequences).
TEST(GeneratorAll, FixedSeedsPrintFixedSequences) {
  const std::pair<uint64_t, uint64_t> golden[] = {{0, 0x046b173e995545faull}, {1, 0x719b86e8e74a53c6ull}, {42, 0xe8dbd2b76f8c20a1ull}};
  for (const auto& [seed, hash] : golden) {
    Prng rng(seed);
    const std::string text = print_seq(generate_seq(rng, draw_all(3)));
    EXPECT_EQ(fnv(text), hash) << "seed " << seed << ":\n" << text;
  }
}

// The default generator ignores what only `--draw all` reads: the forced features.
TEST(GeneratorAll, OldDrawsUnchangedByTheNewOptions) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    GenOptions forced;
    forced.force = {"dtype bf16", "op gradient_sync"};
    Prng a(seed), b(seed);
    EXPECT_EQ(print_seq(generate_seq(a, {})), print_seq(generate_seq(b, forced)));
  }
}

TEST(GeneratorAll, EveryDrawIsValidAndPrintsBackToItself) {
  for (int world = 1; world <= 4; ++world)
    for (uint64_t seed = 0; seed < 400; ++seed) {
      Prng rng(seed);
      const SeqFile f = generate_seq(rng, draw_all(world));
      const std::string text = print_seq(f);
      SeqFile back;
      ASSERT_NO_THROW(back = parse_seq(text, "<generated>")) << text;
      EXPECT_EQ(print_seq(back), text);
      EXPECT_EQ(back.scenario, f.scenario) << text;
      EXPECT_EQ(back.ops, f.ops) << text;
    }
}

// With the opt-in capabilities (kCoverageDraw: a policy line in a third of the sequences).
TEST(GeneratorAll, EveryFeatureReachableAtEveryWorld) {
  const auto& feats = vocab_features();
  for (int world = 1; world <= 4; ++world) {
    GenOptions opt;
    ASSERT_EQ(apply_draws(kCoverageDraw, &opt), "");
    opt.world = world;
    const Coverage c = measure_coverage(7, 1500, opt);
    for (size_t i = 0; i < feats.size(); ++i) {
      if (!feats[i].undrawn.empty()) continue;  // save_model / load_model: coverage lists them apart
      EXPECT_GT(c.feature[i], 0) << feats[i].name << " at world " << world;
    }
  }
}

// A forced feature is drawn in every sequence (what coverage's witness search relies on).
TEST(GeneratorAll, ForcedFeaturesAreDrawn) {
  GenOptions opt = draw_all(2);
  opt.force = {"dtype bf16", "loading full", "adapter autocast=false"};
  const auto& feats = vocab_features();
  auto at = [&](const std::string& n) {
    for (size_t i = 0; i < feats.size(); ++i)
      if (feats[i].name == n) return i;
    ADD_FAILURE() << n;
    return size_t{0};
  };
  int both = 0;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    Prng rng(seed);
    const std::vector<bool> held = features_of(generate_seq(rng, opt));
    EXPECT_TRUE(held[at("dtype bf16")]);
    both += held[at("loading full")] && held[at("adapter autocast=false")];
  }
  EXPECT_EQ(both, 100);
}

// `all,mixed_precision=P` adds a policy line to some sequences and leaves the rest as `all` drew
// them: the policy is drawn last, and not at all at P = 0.
TEST(GeneratorAll, APolicyJoinsTheWholeVocabularyWithoutMovingItsSeeds) {
  GenOptions with;
  ASSERT_EQ(apply_draws("all,mixed_precision=40", &with), "");
  with.world = 2;
  int policies = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Prng a(seed), b(seed);
    const SeqFile plain = generate_seq(a, draw_all(2));
    const SeqFile mp = generate_seq(b, with);
    if (!mp.scenario.mixed_precision()) {
      EXPECT_EQ(print_seq(mp), print_seq(plain)) << "seed " << seed;
      continue;
    }
    ++policies;
    EXPECT_FALSE(plain.scenario.mixed_precision());
    SeqFile back;
    ASSERT_NO_THROW(back = parse_seq(print_seq(mp), "<generated>")) << print_seq(mp);
    EXPECT_EQ(back.scenario, mp.scenario);
  }
  EXPECT_GT(policies, 50);
  EXPECT_LT(policies, 110);
  GenOptions zero;
  ASSERT_EQ(apply_draws("all,mixed_precision=0", &zero), "");
  zero.world = 2;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Prng a(seed), b(seed);
    EXPECT_EQ(print_seq(generate_seq(a, zero)), print_seq(generate_seq(b, draw_all(2))));
  }
}

TEST(GeneratorAll, OnlyThePolicyPercentageCombinesWithAll) {
  GenOptions opt;
  EXPECT_NE(apply_draws("all,checkpoint=20", &opt).find("checkpoint= does not combine with all"), std::string::npos);
  EXPECT_NE(apply_draws("all,bogus=1", &opt).find("does not combine with all"), std::string::npos);
  EXPECT_EQ(apply_draws("mixed_precision=10,all", &opt), "");
  EXPECT_TRUE(opt.all);
  EXPECT_EQ(opt.mixed_precision_percent, 10);
}

// A forced policy feature is drawn even at P = 0 (coverage's witness search).
TEST(GeneratorAll, ForcedPolicyFeaturesAreDrawn) {
  GenOptions opt = draw_all(3);
  opt.force = {"mixed_precision cast_forward_inputs=false", "mixed_precision reduce_dtype=bf16", "fully_shard POLICY_KEY=V"};
  for (uint64_t seed = 0; seed < 100; ++seed) {
    Prng rng(seed);
    const SeqFile f = generate_seq(rng, opt);
    EXPECT_EQ(f.scenario.mp.cast_forward_inputs, std::optional<bool>(false));
    EXPECT_EQ(f.scenario.mp.reduce_dtype, std::optional<DType>(DType::BF16));
    EXPECT_TRUE(std::any_of(f.scenario.shards.begin(), f.scenario.shards.end(), [](const ShardDecl& d) { return !d.mp.empty(); }));
  }
}

// `--draw all2`: the same generator with every op kind, on a stream of its own. Its draws are
// valid, print back to themselves, reach the op kinds `--draw all` leaves out, and hold no
// merge_and_unload the model would refuse (crosscheck compares the model on each of them).
TEST(GeneratorAll, All2DrawsEveryOpKindValidlyWithinWhatTheModelCovers) {
  std::set<OpKind> kinds;
  int unloads = 0, later = 0;
  for (int world = 1; world <= 4; ++world)
    for (uint64_t seed = 0; seed < 300; ++seed) {
      GenOptions opt;
      ASSERT_EQ(apply_draws("all2", &opt), "");
      opt.world = world;
      Prng rng(seed), all(seed);
      const SeqFile f = generate_seq(rng, opt);
      const std::string text = print_seq(f);
      SeqFile back;
      ASSERT_NO_THROW(back = parse_seq(text, "<generated>")) << text;
      EXPECT_EQ(print_seq(back), text);
      EXPECT_EQ(back.ops, f.ops) << text;
      SourcePos at;
      EXPECT_EQ(OpRules::unload_unmodelled(f.scenario, f.ops, &at), "") << text;
      bool unloaded = false;
      for (const Op& op : f.ops) {
        kinds.insert(op.kind);
        later += unloaded;
        unloaded = unloaded || op.kind == OpKind::MergeAndUnload;
        unloads += op.kind == OpKind::MergeAndUnload;
      }
      if (world == 2 && seed < 20) EXPECT_NE(text, print_seq(generate_seq(all, draw_all(2))));
    }
  for (OpKind k : {OpKind::SaveModel, OpKind::LoadModel, OpKind::MergeAndUnload, OpKind::Generate})
    EXPECT_TRUE(kinds.count(k)) << op_name(k);
  EXPECT_GT(unloads, 20);
  EXPECT_GT(later, 20) << "ops after a merge_and_unload";
}
