// The vocabulary's features (sim/core/coverage.cpp): the table knows every word the parser knows,
// a file's features are read exactly, and the counts add up.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "model/vocab/seq_words.hpp"
#include "properties/test_util.hpp"
#include "sim/core/coverage.hpp"

using namespace fsdpsim;

namespace {
bool has(const std::string& directive, const std::string& key) {
  const auto& f = vocab_features();
  return std::any_of(f.begin(), f.end(), [&](const Feature& x) { return x.directive == directive && (key.empty() || x.key == key); });
}
std::set<std::string> held_names(const SeqFile& f) {
  std::set<std::string> out;
  const std::vector<bool> held = features_of(f);
  for (size_t i = 0; i < held.size(); ++i)
    if (held[i]) out.insert(vocab_features()[i].name);
  return out;
}
}  // namespace

// A directive or adapter option the parser learns must get its features here (and then the
// generator must draw them: coverage names them as never drawn until it does).
TEST(Coverage, EveryWordOfTheGrammarIsAFeature) {
  for (const auto& d : directive_names())
    if (d != "---") EXPECT_TRUE(has(d, "")) << "directive " << d;
  for (const auto& o : adapter_option_names()) EXPECT_TRUE(has("adapter", o)) << "adapter option " << o;
  for (int k = 0; k < kOpKindCount; ++k) EXPECT_TRUE(has("op", op_name(static_cast<OpKind>(k)))) << op_name(static_cast<OpKind>(k));
  for (const auto& p : profile_names()) EXPECT_TRUE(has("profile", "")) << p;
  std::set<std::string> names;
  for (const auto& f : vocab_features()) EXPECT_TRUE(names.insert(f.name).second) << "twice: " << f.name;
}

// Only the op kinds `--draw all` cannot draw without changing its seeds are listed apart, with why
// (`--draw all2` draws them: cmd_coverage then counts them as any feature).
TEST(Coverage, OnlyTheOpsNoGeneratorDrawsAreListedApart) {
  std::vector<std::string> apart;
  for (const auto& f : vocab_features())
    if (!f.undrawn.empty()) apart.push_back(f.name);
  EXPECT_EQ(apart, (std::vector<std::string>{"op save_model", "op load_model", "op merge_and_unload", "op generate"}));
}

TEST(Coverage, FeaturesOfAHandWrittenFile) {
  const SeqFile f = parse_seq(
      "world 2\nprofile patched\nset root_reshard_rule=force_false\nlayer lin0 4 6\nlayer lin1 6 2 experts=2\n"
      "adapter default targets=lin1 init=zero modules_to_save=lin0 autocast=false\nadapter other targets=lin1 deferred\n"
      "fully_shard root reshard_after_forward=false\ndtype bf16\n---\n"
      "@1 set_adapter default\nmerge [default]\nload_adapter other trainable\ngradient_sync off\n",
      "<test>");
  const std::set<std::string> expected = {
      "world W", "seed S", "profile patched", "set root_reshard_rule", "layer IN OUT", "layer experts=E", "adapter r=N",
      "adapter alpha=N", "adapter targets=L", "adapter init=zero", "adapter init=random", "adapter modules_to_save",
      "adapter autocast=false", "adapter deferred", "fully_shard reshard_after_forward=false", "optimizer trainable",
      "loading full", "dtype bf16", "dtype autocast_adapter_dtype=true", "data same", "op set_adapter", "@R op",
      "op merge", "merge NAME", "op load_adapter", "load_adapter trainable", "op gradient_sync", "gradient_sync off"};
  EXPECT_EQ(held_names(f), expected);
}

TEST(Coverage, FeaturesOfAPolicy) {
  const SeqFile f = parse_seq(
      "world 2\nlayer lin0 4 2\nadapter default targets=lin0\nfully_shard lin0 reduce_dtype=bf16\nfully_shard root\n"
      "mixed_precision param_dtype=bf16 output_dtype=fp32 cast_forward_inputs=false\n---\ntrain_step\n",
      "<test>");
  const std::set<std::string> held = held_names(f);
  for (const char* name : {"mixed_precision param_dtype=bf16", "mixed_precision output_dtype=fp32",
                           "mixed_precision cast_forward_inputs=false", "fully_shard POLICY_KEY=V"})
    EXPECT_TRUE(held.count(name)) << name;
  // The override's reduce_dtype is the call's, not the line's.
  for (const char* name : {"mixed_precision reduce_dtype=bf16", "mixed_precision reduce_dtype=fp32", "mixed_precision param_dtype=fp32"})
    EXPECT_FALSE(held.count(name)) << name;
}

TEST(Coverage, TwoValuesOfOneDirectiveNeverMeet) {
  auto at = [](const std::string& n) {
    for (const auto& f : vocab_features())
      if (f.name == n) return f;
    ADD_FAILURE() << n;
    return Feature{};
  };
  EXPECT_FALSE(grammar_allows(at("dtype fp32"), at("dtype bf16")));
  EXPECT_FALSE(grammar_allows(at("profile upstream"), at("profile patched")));
  EXPECT_FALSE(grammar_allows(at("mixed_precision param_dtype=fp32"), at("mixed_precision param_dtype=bf16")));
  EXPECT_TRUE(grammar_allows(at("mixed_precision param_dtype=bf16"), at("mixed_precision reduce_dtype=fp32")));
  EXPECT_TRUE(grammar_allows(at("dtype bf16"), at("dtype autocast_adapter_dtype=false")));
  EXPECT_TRUE(grammar_allows(at("adapter init=zero"), at("adapter init=random")));  // one per adapter
  EXPECT_TRUE(grammar_allows(at("dtype bf16"), at("loading full")));
}

TEST(Coverage, CountsAddUp) {
  GenOptions opt;
  ASSERT_EQ(apply_draws("all", &opt), "");
  const Coverage c = measure_coverage(3, 200, opt);
  EXPECT_EQ(c.sequences, 200);
  const auto& feats = vocab_features();
  for (size_t i = 0; i < feats.size(); ++i) {
    if (feats[i].always) EXPECT_EQ(c.feature[i], 200) << feats[i].name;
    for (size_t j = i + 1; j < feats.size(); ++j) {
      EXPECT_LE(c.pair[i][j], std::min(c.feature[i], c.feature[j]));
      if (!grammar_allows(feats[i], feats[j])) EXPECT_EQ(c.pair[i][j], 0) << feats[i].name << " + " << feats[j].name;
    }
  }
}

// A pair the generator never drew is told apart by a forced draw the parser accepts.
TEST(Coverage, ForcedWitnessFindsAFileWithBoth) {
  const auto& feats = vocab_features();
  auto at = [&](const std::string& n) {
    return static_cast<int>(std::find_if(feats.begin(), feats.end(), [&](const Feature& f) { return f.name == n; }) - feats.begin());
  };
  GenOptions opt;
  opt.world = 2;
  SeqFile w;
  EXPECT_EQ(forced_witness(at("dtype bf16"), at("adapter modules_to_save"), opt, 200, &w), "");
  const std::set<std::string> held = held_names(w);
  EXPECT_TRUE(held.count("dtype bf16") && held.count("adapter modules_to_save")) << print_seq(w);
  EXPECT_NO_THROW(validate(w, "<witness>"));
}
