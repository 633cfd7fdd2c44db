// The whole-vocabulary generator (sim/core/generator_all.cpp, `--draw all`): deterministic, valid,
// every feature reachable at every world, and the default generator's seeds untouched.
#include <gtest/gtest.h>

#include <set>

#include "properties/test_util.hpp"
#include "sim/core/coverage.hpp"
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

TEST(GeneratorAll, EveryFeatureReachableAtEveryWorld) {
  const auto& feats = vocab_features();
  for (int world = 1; world <= 4; ++world) {
    const Coverage c = measure_coverage(7, 1500, draw_all(world));
    for (size_t i = 0; i < feats.size(); ++i) EXPECT_GT(c.feature[i], 0) << feats[i].name << " at world " << world;
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
