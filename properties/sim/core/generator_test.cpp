// The seeded generator (sim/core/generator.cpp): deterministic, valid, varied.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <set>

#include "properties/test_util.hpp"
#include "sim/core/generator.hpp"

using namespace fsdpsim;

TEST(Generator, SameSeedSameSequence) {
  for (uint64_t seed : {0ull, 1ull, 42ull, 123456789ull}) {
    Prng a(seed), b(seed);
    EXPECT_EQ(print_seq(generate_seq(a, {})), print_seq(generate_seq(b, {})));
  }
}

TEST(Generator, DifferentSeedsGiveDifferentSequences) {
  std::set<std::string> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Prng rng(seed);
    seen.insert(print_seq(generate_seq(rng, {})));
  }
  EXPECT_GT(seen.size(), 195u);
}

TEST(Generator, EverySequenceIsValidAndRunsWithoutValueErrors) {
  int value_errors = 0, ops = 0;
  std::set<OpKind> kinds;
  for (int world = 1; world <= 4; ++world) {
    for (uint64_t seed = 0; seed < 500; ++seed) {
      Prng rng(seed * 7 + static_cast<uint64_t>(world));
      GenOptions opt;
      opt.world = world;
      opt.per_rank_data_percent = seed % 4 == 0 ? 100 : 0;  // new_optimizer is drawn only with per-rank data
      SeqFile f = generate_seq(rng, opt);
      ASSERT_NO_THROW(validate(f, "<generated>")) << print_seq(f);
      SeqFile back = parse_seq(print_seq(f), "<generated>");
      Topology topo = compile_topology(back);
      Simulator sim(topo);
      RunResult r = sim.run(back.ops);
      for (const auto& o : r.observations) {
        ++ops;
        value_errors += o.status == Status::ValueError;
      }
      for (const auto& op : back.ops) kinds.insert(op.kind);
    }
  }
  // gradient_sync only behind GenOptions::gradient_sync_percent (GradientSyncOnlyWhenAsked).
  // save_model / load_model (from kDrawAllOpKinds on) are drawn by no generator yet.
  EXPECT_EQ(kinds.size(), static_cast<size_t>(kDrawAllOpKinds - 1)) << "every op kind but gradient_sync is generated";
  EXPECT_EQ(kinds.count(OpKind::GradientSync), 0u);
  EXPECT_LT(value_errors * 50, ops) << "generated sequences are mostly legal";
}

// The toggle is drawn only when asked for, alternating off/on, and the sequences stay valid.
TEST(Generator, GradientSyncOnlyWhenAsked) {
  int toggles = 0;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    Prng rng(seed);
    GenOptions opt;
    opt.gradient_sync_percent = 20;
    SeqFile f = generate_seq(rng, opt);
    ASSERT_NO_THROW(validate(f, "<generated>")) << print_seq(f);
    EXPECT_EQ(parse_seq(print_seq(f), "<generated>"), f);
    bool sync = true;
    for (const auto& op : f.ops) {
      if (op.kind != OpKind::GradientSync) continue;
      EXPECT_NE(op.sync, sync) << print_seq(f);
      sync = op.sync;
      ++toggles;
    }
  }
  EXPECT_GT(toggles, 50);
}

// `checkpoint` is drawn only when asked for: Linear layers only, at least one, in module order,
// and the sequences stay valid and print back the same.
TEST(Generator, CheckpointOnlyWhenAsked) {
  int with = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Prng plain(seed);
    EXPECT_TRUE(generate_seq(plain, {}).scenario.checkpoint.empty());
    Prng rng(seed);
    GenOptions opt;
    opt.checkpoint_percent = 100;
    SeqFile f = generate_seq(rng, opt);
    ASSERT_NO_THROW(validate(f, "<generated>")) << print_seq(f);
    EXPECT_EQ(parse_seq(print_seq(f), "<generated>"), f);
    bool linear = false;
    for (const auto& l : f.scenario.layers) linear = linear || l.experts == 0;
    EXPECT_EQ(f.scenario.checkpoint.empty(), !linear) << print_seq(f);
    for (const auto& n : f.scenario.checkpoint) EXPECT_EQ(f.scenario.layers[f.scenario.layer_index(n)].experts, 0);
    with += !f.scenario.checkpoint.empty();
  }
  EXPECT_GT(with, 150);
}

TEST(Generator, GroupedFullyShardOnlyWhenAskedInEitherOrderAndWithRaisingMembers) {
  DrawsReached r;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    Prng plain(seed);
    for (const auto& d : generate_seq(plain, {}).scenario.shards) EXPECT_EQ(d.modules.size(), 1u);
    Prng rng(seed);
    GenOptions opt;
    opt.grouped_percent = 100;
    opt.world = 3;
    SeqFile f = generate_seq(rng, opt);
    ASSERT_NO_THROW(validate(f, "<generated>")) << print_seq(f);
    EXPECT_EQ(parse_seq(print_seq(f), "<generated>"), f);
    EXPECT_TRUE(f.scenario.shards.back().is_root());
    r.count(f);
  }
  EXPECT_GT(r.grouped, 100);
  EXPECT_GT(r.reversed, 20);
  EXPECT_GT(r.apart, 10);
  EXPECT_GT(r.raising, 20);
}

// The hunt's swarm (sim/findings/hunt.cpp draws each generated sequence with swarm_options): at world 2
// it reaches grouped fully_shard lines of every shape and, with wide worlds, worlds 3-4 with
// padding-only ranks, each valid and running; at another world, or without, it stays there.
TEST(Generator, HuntSwarmDrawsGroupedFullyShardAndPaddedWorlds) {
  DrawsReached r;
  int wide = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    Prng rng(seed);
    SeqFile f = generate_seq(rng, swarm_options(rng, 2, true));
    ASSERT_NO_THROW(validate(f, "<swarm>")) << print_seq(f);
    ASSERT_NO_THROW(run_checked(f)) << print_seq(f);
    wide += f.scenario.world > 2;
    r.count(f);
    Prng one(seed);
    EXPECT_EQ(swarm_options(one, 1, true).world, 1);
    Prng two(seed);
    EXPECT_EQ(swarm_options(two, 2, false).world, 2);
  }
  EXPECT_TRUE(r.every_grouping_draw()) << r.grouped << " grouped, " << r.adjacent << " adjacent, " << r.apart << " apart, "
                                   << r.reversed << " reversed, " << r.raising << " raising, " << r.padded << " padded";
  EXPECT_GT(r.grouped, 30);
  EXPECT_GT(wide, 60);
  EXPECT_LT(wide, 140);
}

TEST(Generator, DrawListParsesOrNamesWhatWasExpected) {
  GenOptions opt;
  EXPECT_EQ(apply_draws("checkpoint=30,gradient_sync=5,per_rank_data=100", &opt), "");
  EXPECT_EQ(opt.checkpoint_percent, 30);
  EXPECT_EQ(opt.gradient_sync_percent, 5);
  EXPECT_EQ(opt.per_rank_data_percent, 100);
  EXPECT_EQ(apply_draws("grouped=40", &opt), "");
  EXPECT_EQ(opt.grouped_percent, 40);
  EXPECT_NE(apply_draws("checkpoint=101", &opt).find("checkpoint= expects a percentage, a whole number in 0..100, got 101 (larger than 100)"),
            std::string::npos);
  EXPECT_NE(apply_draws("checkpoint", &opt).find("got 'checkpoint'"), std::string::npos);
  EXPECT_NE(apply_draws("experts=3", &opt).find("unknown 'experts'"), std::string::npos);
  EXPECT_NE(apply_draws("checkpoint=3,", &opt).find("got ''"), std::string::npos);
}

// Golden values: every printed --seed means these streams. A change to the
// PRNG or its seeding (xoshiro256** seeded through splitmix64) fails here
// instead of silently giving every recorded seed a new meaning.
TEST(Generator, PrngIsTheSameStreamEverywhere) {
  const std::pair<uint64_t, std::array<uint64_t, 3>> golden[] = {
      {0, {0x99ec5f36cb75f2b4ull, 0xbf6e1f784956452aull, 0x1a5f849d4933e6e0ull}},
      {1, {0xb3f2af6d0fc710c5ull, 0x853b559647364ceaull, 0x92f89756082a4514ull}},
      {2026, {0x92e011592e98ae15ull, 0x489f37946d6d18d8ull, 0xd0009e279d9cdedaull}},
  };
  for (const auto& [seed, values] : golden) {
    Prng rng(seed);
    for (uint64_t v : values) EXPECT_EQ(rng.next(), v) << "seed " << seed;
  }
  Prng rng(7);
  for (uint32_t v : {94u, 74u, 38u, 64u, 64u}) EXPECT_EQ(rng.below(100), v);
}

// The generator on top of the stream: a fixed seed prints a fixed sequence
// (FNV-1a of the printed text), so `fsdpsim random --seed S` keeps its meaning.
TEST(Generator, FixedSeedsPrintFixedSequences) {
  auto fnv = [](const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
  };
  const std::pair<uint64_t, uint64_t> golden[] = {
      {0, 0x341e771ab3a019b9ull}, {1, 0xe6d3db94d2bdcac1ull}, {42, 0x04ed72a3835a8febull}, {123456789, 0xd8909a013365d686ull}};
  for (const auto& [seed, hash] : golden) {
    Prng rng(seed);
    const std::string text = print_seq(generate_seq(rng, {}));
    EXPECT_EQ(fnv(text), hash) << "seed " << seed << ":\n" << text;
  }
}

// qlora=P: nothing at 0 (every recorded seed keeps its sequence), with `all` on a forked stream that
// leaves the rest of the sequence as `all` alone draws it; 4-bit layers only where the model runs them.
TEST(Generator, QloraOnlyWhenAskedOnAForkedStream) {
  auto quantized = [](const SeqFile& f) { return f.scenario.quantized() != nullptr; };
  int with = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    for (bool all : {false, true}) {
      GenOptions off, on;
      off.all = on.all = all;
      on.qlora_percent = 100;
      Prng a(seed), b(seed);
      SeqFile plain = generate_seq(a, off), f = generate_seq(b, on);
      EXPECT_FALSE(quantized(plain));
      ASSERT_NO_THROW(validate(f, "<generated>")) << print_seq(f);
      EXPECT_EQ(parse_seq(print_seq(f), "<generated>"), f);
      for (const auto& l : f.scenario.layers)
        if (l.quant) EXPECT_TRUE(l.experts == 0 && !f.scenario.saved_module(l.name)) << print_seq(f);
      SeqFile cleared = f;
      for (auto& l : cleared.scenario.layers) l.quant.reset(), l.compute_dtype.reset();
      if (all) EXPECT_EQ(print_seq(cleared), print_seq(plain));  // the fork draws nothing else
      with += quantized(f);
    }
  }
  EXPECT_GT(with, 300);
}
