// print(parse(text)) is canonical: printing is a fixed point and
// parse(print(x)) == x, for the corpus, hand-written and generated sequences.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "model/vocab/seq.hpp"
#include "properties/rc_vocab.hpp"
#include "sim/core/default_scenario.hpp"
#include "sim/core/generator.hpp"
#include "sim/core/prng.hpp"

namespace fsdpsim {
namespace {

// Names the first difference between two files (print_seq hides flags it
// does not print, so the message spells them out).
std::string describe_difference(const SeqFile& a, const SeqFile& b) {
  if (a.comments != b.comments) return "comments differ";
  if (!(a.scenario == b.scenario)) return "scenario differs:\n" + print_scenario(a.scenario) + "vs\n" + print_scenario(b.scenario);
  if (a.ops.size() != b.ops.size()) return "op count " + std::to_string(a.ops.size()) + " vs " + std::to_string(b.ops.size());
  for (size_t i = 0; i < a.ops.size(); ++i) {
    const Op& x = a.ops[i];
    const Op& y = b.ops[i];
    if (x == y) continue;
    auto flags = [](const Op& o) {
      return " [rank=" + std::to_string(o.rank) + " list_form=" + std::to_string(o.list_form) +
             " trainable=" + std::to_string(o.trainable) + " names=" + std::to_string(o.names.size()) +
             " expects=" + std::to_string(o.expects.size()) + "]";
    };
    return "op " + std::to_string(i + 1) + ": " + op_text(x) + flags(x) + " vs " + op_text(y) + flags(y);
  }
  return "equal";
}

// Checks both halves of the canonical-form contract for an in-memory file.
void check_file(const SeqFile& x, const std::string& label) {
  SCOPED_TRACE(label);
  std::string p1 = print_seq(x);
  SeqFile y;
  try {
    y = parse_seq(p1, label + " (printed)");
  } catch (const SourceError& e) {
    ADD_FAILURE() << "printed form does not parse: " << e.what() << "\n" << p1;
    return;
  }
  EXPECT_TRUE(y == x) << describe_difference(x, y) << "\nprinted:\n" << p1;
  EXPECT_EQ(print_seq(y), p1);
}

// Checks the contract starting from text: parse, print, reparse, reprint.
void check_text(const std::string& text, const std::string& label) {
  SeqFile x;
  try {
    x = parse_seq(text, label);
  } catch (const SourceError& e) {
    ADD_FAILURE() << label << " does not parse: " << e.what();
    return;
  }
  check_file(x, label);
}

// ---- corpus -------------------------------------------------------------------

TEST(SeqRoundTrip, CorpusRegressions) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(FSDPSIM_SOURCE_DIR) / "corpus" / "regressions";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;  // nothing to check yet: zero files pass
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".seq") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  int checked = 0;
  for (const auto& p : files) {
    std::ifstream in(p, std::ios::binary);
    ASSERT_TRUE(in) << p;
    std::stringstream ss;
    ss << in.rdbuf();
    check_text(ss.str(), p.string());
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(files.size()));
  if (!files.empty()) {
    EXPECT_GE(checked, 1);
  }
  RecordProperty("corpus_files", checked);
}

// ---- hand-written ---------------------------------------------------------------

const char* const kMessy = R"(#c
#   indented comment text
world 2
layer lin0 10 20
layer lin1 20 2   # trailing
adapter default targets=[lin0, lin1]
adapter other r=4 targets=lin1 init=zero deferred
fully_shard lin0
fully_shard root reshard_after_forward=false
---
# dropped
eval   expect ok
@1 set_adapter   [default]
merge [default]
add_adapter other
load_adapter other trainable expect ok
train_step expect grads={ default } expect @1 missing=0/4
  expect finding=S1
)";

const char* const kMessyCanonical = R"(# c
#   indented comment text
world 2
seed 0
profile upstream
layer lin0 10 20
layer lin1 20 2
adapter default r=8 alpha=8 targets=lin0,lin1 init=random
adapter other r=4 alpha=8 targets=lin1 init=zero deferred
fully_shard lin0 reshard_after_forward=none
fully_shard root reshard_after_forward=false
optimizer trainable
---
eval                  expect ok
@1 set_adapter [default]
merge default
add_adapter other
load_adapter other trainable  expect ok
train_step            expect grads={default} expect @1 missing=0/4 expect finding=S1
)";

TEST(SeqRoundTrip, CanonicalFormIsExact) {
  EXPECT_EQ(print_seq(parse_seq(kMessy)), kMessyCanonical);
  EXPECT_EQ(print_seq(parse_seq(kMessyCanonical)), kMessyCanonical);
}

const std::vector<std::string>& hand_written() {
  static const std::vector<std::string> v = {
      kMessy,
      kMessyCanonical,
      kDefaultScenario,  // the built-in default scenario of `fsdpsim` (peft#3872)
      // every op kind, every expect kind, overrides and a patched profile
      R"(world 4
seed 999999999999999999
profile patched
set set_adapter_reshard=none
set disable_exit_reshard=off
set optimizer_ckpt_reshard=on
set enable_inference_mode=ignore
set root_reshard_rule=force_false
layer a 4 6
layer b_1 6 10
layer c-2 10 2
adapter default r=1 alpha=1024 targets=a,b_1,c-2 init=zero
adapter x targets=c-2 inference_mode
adapter y r=2 alpha=4 targets=a deferred
adapter z targets=b_1 inference_mode deferred
fully_shard [a,b_1] reshard_after_forward=true
fully_shard c-2 reshard_after_forward=false
fully_shard root reshard_after_forward=none
optimizer all
---
forward
eval expect ok
backward expect grads={} expect @3 grads={default,x}
step expect @0 missing=0/0
train_step expect error=no_grad_fn expect @2 error=hang
zero_grad
merge
merge x
merge [default,x]
merge []
unmerge
set_adapter x
set_adapter [x]
set_adapter [default,x]
disable_enter
disable_exit
add_adapter y
load_adapter z frozen
delete_adapter y
reshard
reshard a
unshard root
unshard c-2
state_dict
save_optimizer
load_optimizer expect error=key_error index=12 missing=3/8
save_adapters
save_adapters []
save_adapters [x]
load_adapters
delta_weight b_1 expect stored=b_1:extra_delta merged=b_1:[x,default] state=a:UNSHARDED
@0 eval expect @0 error=shape_error
@3 train_step expect @3 error=value_error
@1 unmerge expect error=mismatch finding=S8 finding=S2
)",
      // world 1, a single layer, empty op list
      "layer only 7 7\nadapter solo targets=only\nfully_shard root\n---\n",
      // 4-bit layers (options in either order print canonically), beside an experts layer
      "layer q 4 4 compute_dtype=bf16 quant=nf4\nlayer p 4 2 quant=fp4\nlayer e 2 2 experts=2\n"
      "adapter a targets=q,p\nfully_shard root\n---\nmerge\n",
      // a comment with no text, and a file of ops only on ranks
      "#\n#\nworld 3\nlayer l 2 2\nadapter a targets=l\nfully_shard l\nfully_shard root\n---\n@2 eval\n@0 reshard l\n",
  };
  return v;
}

TEST(SeqRoundTrip, QuantLayerOptions) {
  const Scenario s = parse_seq("layer q 4 4 compute_dtype=bf16 quant=nf4\nlayer p 4 2 quant=fp4\nadapter a targets=q\n"
                               "fully_shard root\n---\n").scenario;
  ASSERT_EQ(s.layers.size(), 2u);
  EXPECT_EQ(s.layers[0].quant, Quant::NF4);
  EXPECT_EQ(s.layers[0].compute_dtype, DType::BF16);
  EXPECT_EQ(s.layers[1].quant, Quant::FP4);
  EXPECT_FALSE(s.layers[1].compute_dtype.has_value());
  EXPECT_EQ(s.quantized(), &s.layers[0]);
  EXPECT_NE(print_scenario(s).find("layer q 4 4 quant=nf4 compute_dtype=bf16\n"), std::string::npos);
}

TEST(SeqRoundTrip, HandWritten) {
  for (size_t i = 0; i < hand_written().size(); ++i) check_text(hand_written()[i], "hand-written #" + std::to_string(i));
}

TEST(SeqRoundTrip, HandWrittenFilesAreNotTrivial) {
  // Guards against the check passing vacuously on an empty parse.
  SeqFile f = parse_seq(hand_written()[3]);
  EXPECT_EQ(f.ops.size(), 34u);
  EXPECT_EQ(f.scenario.overrides.size(), 5u);
  EXPECT_EQ(f.scenario.seed, 999999999999999999ull);
}

// ---- generated ----------------------------------------------------------------

// Attaches random (but valid) `expect` clauses so generated files cover them too.
void add_random_expects(Prng& rng, SeqFile& f) {
  const Scenario& s = f.scenario;
  auto adapters = [&]() {
    std::vector<std::string> v;
    for (const auto& a : s.adapters)
      if (rng.chance(40)) v.push_back(a.name);
    return v;
  };
  auto layer = [&]() { return s.layers[rng.below(static_cast<uint32_t>(s.layers.size()))].name; };
  static const Status errors[] = {Status::NoGradFn, Status::KeyError, Status::ShapeError,
                                  Status::ValueError, Status::Hang, Status::Mismatch};
  static const char* classes[] = {"exact", "missing_delta", "extra_delta", "corrupt"};
  for (auto& op : f.ops) {
    int n = rng.chance(30) ? 1 + static_cast<int>(rng.below(2)) : 0;
    for (int e = 0; e < n; ++e) {
      Expect ex;
      if (op.rank >= 0) ex.rank = rng.chance(50) ? op.rank : -1;
      else if (rng.chance(30)) ex.rank = static_cast<int>(rng.below(static_cast<uint32_t>(s.world)));
      int items = 1 + static_cast<int>(rng.below(3));
      for (int i = 0; i < items; ++i) {
        ExpectItem it;
        it.key = static_cast<ExpectItem::Key>(rng.below(10));
        switch (it.key) {
          case ExpectItem::Key::Ok: break;
          case ExpectItem::Key::Error: it.status = errors[rng.below(6)]; break;
          case ExpectItem::Key::Grads: it.names = adapters(); break;
          case ExpectItem::Key::Index: it.a = rng.below(100); break;
          case ExpectItem::Key::Missing: it.a = rng.below(5), it.b = rng.below(20); break;
          case ExpectItem::Key::Stored: it.target = layer(), it.value = classes[rng.below(4)]; break;
          case ExpectItem::Key::Merged: it.target = layer(), it.names = adapters(); break;
          case ExpectItem::Key::State:
            it.target = rng.chance(30) ? "root" : layer();
            it.value = rng.chance(50) ? "SHARDED" : "UNSHARDED";
            break;
          case ExpectItem::Key::Finding: it.target = "S" + std::to_string(1 + rng.below(8)); break;
          case ExpectItem::Key::Placed:
            // a parameter the declarations produce (the parser checks): the first adapter's first target
            it.target = (rng.chance(50) ? lora_a_name : lora_b_name)(s.adapters[0].targets[0], s.adapters[0].name);
            it.value = std::string(rng.chance(50) ? "cpu" : "meta") + (rng.chance(50) ? "/fp32" : "/bf16");
            break;
        }
        ex.items.push_back(it);
      }
      op.expects.push_back(ex);
    }
  }
  if (rng.chance(20)) f.comments = {"generated", "", " leading blank kept"};
}

TEST(SeqRoundTrip, Generated2000) {
  int ops = 0, ranked = 0;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    GenOptions opt;
    opt.world = 1 + static_cast<int>(seed % 4);
    opt.rank_op_percent = seed % 3 == 0 ? 40 : 6;
    Prng rng(seed);
    SeqFile x = generate_seq(rng, opt);
    ASSERT_EQ(x.scenario.world, opt.world);
    ops += static_cast<int>(x.ops.size());
    for (const auto& op : x.ops) ranked += op.rank >= 0;
    check_file(x, "generated seed " + std::to_string(seed) + " world " + std::to_string(opt.world));
    if (::testing::Test::HasFailure()) return;  // one clear failure, not 2000
  }
  EXPECT_GT(ops, 2000);
  EXPECT_GT(ranked, 0);
}

TEST(SeqRoundTrip, Generated2000WithExpects) {
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    GenOptions opt;
    opt.world = 1 + static_cast<int>(seed % 4);
    Prng rng(seed ^ 0x5eedull);
    SeqFile x = generate_seq(rng, opt);
    add_random_expects(rng, x);
    check_file(x, "generated+expects seed " + std::to_string(seed));
    if (::testing::Test::HasFailure()) return;
  }
}

// RapidCheck draws the file (rc_vocab.hpp), so a failure shrinks to the
// fewest ops and simplest scenario that still break the round trip.
RC_GTEST_PROP(SeqRoundTripProp, GeneratedParsePrintIsIdentity, ()) {
  const int world = *rc::gen::inRange(1, 5);
  const SeqFile x = *rcgen::seq_file(world);
  validate(x, "<rc>");
  const std::string printed = print_seq(x);
  SeqFile y = parse_seq(printed, "<rc>");
  RC_ASSERT(y.scenario.world == world);
  RC_ASSERT(y == x);
  RC_ASSERT(print_seq(y) == printed);
}

}  // namespace
}  // namespace fsdpsim
