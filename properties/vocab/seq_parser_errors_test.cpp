// parse_seq on bad input: the exact file:line:column and the words of each error.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "model/vocab/seq.hpp"
#include "properties/vocab/seq_test_header.hpp"

namespace fsdpsim {
namespace {

using namespace seq_test;

// ---- bad inputs -------------------------------------------------------------

struct BadCase {
  std::string name;
  std::string text;
  int line;
  int column;
  std::string phrase;
};

std::vector<BadCase> bad_cases() {
  std::string no_shards = head(9, "# no fully_shard");
  no_shards.replace(no_shards.find(kHeadLines[9]), kHeadLines[9].size(), "# none at all");
  return {
      // header directives
      {"UnknownDirective", head(2, "sed 7"), 2, 1, "unknown directive 'sed'"},
      {"WorldZero", head(1, "world 0"), 1, 7, "expected the world size, a whole number in 1..64, got 0 (smaller than 1)"},
      {"WorldTooBig", head(1, "world 65"), 1, 7, "in 1..64, got 65 (larger than 64)"},
      // Numbers past 64 bits keep their value and the range in the message (model/vocab/number.hpp).
      {"WorldPast64Bits", head(1, "world 18446744073709551616"), 1, 7,
       "expected the world size, a whole number in 1..64, got 18446744073709551616 (larger than 64, and than any 64-bit number)"},
      {"WorldNotNumber", head(1, "world two"), 1, 7, "expected the world size, a whole number in 1..64, got 'two' (not a number)"},
      {"WorldMissing", head(1, "world"), 1, 6, "expected the world size, got end of line"},
      {"WorldTrailing", head(1, "world 2 3"), 1, 9, "unexpected '3' at end of world line"},
      {"SeedTooLong", head(2, "seed 1234567890123456789"), 2, 6, "expected a seed, a whole number in 0..999999999999999999, got 1234567890123456789 (larger than 999999999999999999)"},
      {"SeedNegative", head(2, "seed -5"), 2, 6, "expected a seed, a whole number in 0..999999999999999999, got -5 (negative; the smallest accepted is 0)"},
      {"UnknownProfile", head(3, "profile nightly"), 3, 9, "unknown profile 'nightly'"},
      {"UnknownSwitch", head(3, "set bogus_switch=on"), 3, 5, "unknown switch 'bogus_switch'"},
      {"BadSwitchValue", head(3, "set disable_exit_reshard=maybe"), 3, 5,
       "bad value 'maybe' for switch disable_exit_reshard (expected off|on)"},
      {"SetWithoutValue", head(3, "set disable_exit_reshard"), 3, 5, "expected switch=value"},
      {"LayerNamedRoot", head(4, "layer root 10 20"), 4, 7, "not 'root'"},
      {"LayerBadName", head(4, "layer 9lin 10 20"), 4, 7, "expected a layer name"},
      {"LayerInZero", head(4, "layer lin0 0 20"), 4, 12, "expected the input size, a whole number in 1..4096, got 0 (smaller than 1)"},
      {"LayerOutTooBig", head(4, "layer lin0 10 5000"), 4, 15, "expected the output size, a whole number in 1..4096, got 5000 (larger than 4096)"},
      {"LayerBadNumber", head(4, "layer lin0 1x 20"), 4, 12, "expected the input size, a whole number in 1..4096, got '1x' (not a number)"},
      {"LayerDuplicate", head(5, "layer lin0 20 2"), 5, 7, "layer 'lin0' is declared twice"},
      {"LayerChainMismatch", head(5, "layer lin1 5 2"), 5, 1, "layer 'lin1' takes 5 inputs but 'lin0' gives 20"},
      {"AdapterDuplicate", head(7, "adapter default r=4 targets=lin1"), 7, 9, "adapter 'default' is declared twice"},
      {"AdapterUnknownTarget", head(7, "adapter other targets=lin0,lin9"), 7, 15, "unknown layer 'lin9' in targets"},
      {"AdapterNoTargets", head(7, "adapter other r=4"), 7, 18, "expected targets=L1,L2 for adapter 'other'"},
      {"AdapterUnknownOption", head(7, "adapter other dropout=1 targets=lin1"), 7, 15, "unknown adapter option 'dropout'"},
      {"AdapterBareWord", head(7, "adapter other frozen targets=lin1"), 7, 15, "expected r=N, alpha=N"},
      {"AdapterBadInit", head(7, "adapter other targets=lin1 init=xavier"), 7, 28, "expected init=zero or init=random, got 'xavier'"},
      {"AdapterRankZero", head(7, "adapter other r=0 targets=lin1"), 7, 17, "expected the rank r, a whole number in 1..1024, got 0 (smaller than 1)"},
      {"AdapterRank2To64Minus1", head(7, "adapter other r=18446744073709551615 targets=lin1"), 7, 17,
       "expected the rank r, a whole number in 1..1024, got 18446744073709551615 (larger than 1024)"},
      {"AdapterAlphaExponent", head(7, "adapter other alpha=1e23 targets=lin1"), 7, 21,
       "expected alpha, a whole number in 1..1048576, got '1e23' (an exponent; write the digits out)"},
      {"AdapterAlphaNegative", head(7, "adapter other alpha=-8 targets=lin1"), 7, 21,
       "expected alpha, a whole number in 1..1048576, got -8 (negative; the smallest accepted is 1)"},
      {"AdapterBadAlpha", head(7, "adapter other alpha=1.5 targets=lin1"), 7, 21, "expected alpha, a whole number in 1..1048576, got '1.5' (a fraction; a whole number is expected)"},
      {"AdapterDuplicateTarget", head(7, "adapter other targets=lin1,lin1"), 7, 15, "duplicate name 'lin1' in list"},
      {"AdapterEmptyListItem", head(7, "adapter other targets=[lin0,]"), 7, 15, "got ''"},
      {"UnclosedBracket", head(7, "adapter other targets=[lin1"), 7, 23, "unclosed bracket '[' (close it with ']'"},
      {"UnbalancedClose", head(7, "adapter other targets=lin1]"), 7, 27, "closing bracket ']' without an opening '['"},
      {"UnbalancedCloseBrace", ops("train_step expect grads=a}\n"), 13, 26, "closing brace '}' without an opening '{'"},
      // each "unknown" message gives the fix: the near name, or the declared ones
      {"DirectiveDidYouMean", head(2, "sede 7"), 2, 1, "unknown directive 'sede'; did you mean 'seed'?"},
      {"OpWithoutSeparator", head(12, "train_step"), 12, 1,
       "unknown directive 'train_step': it is an op, and ops go after a `---` line that ends the scenario (add `---` above line 12)"},
      {"RankedOpWithoutSeparator", head(12, "@1 eval"), 12, 1, "ops go after a `---` line"},
      {"NearOpWithoutSeparator", head(12, "trian_step"), 12, 1, "unknown directive 'trian_step'; did you mean 'train_step'? (an op"},
      {"AdapterOptionDidYouMean", head(7, "adapter other target=lin1"), 7, 15, "unknown adapter option 'target'; did you mean 'targets'?"},
      {"AdapterBareOptionPrefix", head(7, "adapter other targets=lin1 inference"), 7, 28,
       "unknown adapter option 'inference'; did you mean 'inference_mode'?"},
      {"AdapterTargetDeclared", head(7, "adapter other targets=lin2"), 7, 15,
       "unknown layer 'lin2' in targets (layers declared above: lin0, lin1; did you mean 'lin0' or 'lin1'?)"},
      {"LayerOptionDidYouMean", head(5, "layer lin1 20 2 expert=2"), 5, 17, "did you mean 'experts'?"},
      {"ShardOptionDidYouMean", head(10, "fully_shard root reshard_after_foward=true"), 10, 18, "did you mean 'reshard_after_forward'?"},
      {"ProfileDidYouMean", head(3, "profile upstrem"), 3, 9, "unknown profile 'upstrem'; did you mean 'upstream'?"},
      {"OpDidYouMean", ops("trian_step\n"), 13, 1, "unknown op 'trian_step'; did you mean 'train_step'?"},
      {"OpFarListsAll", ops("frobnicate\n"), 13, 1, "unknown op 'frobnicate' (expected one of: forward, eval,"},
      {"AdapterListsDeclared", ops("set_adapter lat\n"), 13, 13,
       "unknown adapter 'lat' (adapters declared above: default, other, late; did you mean 'late'?)"},
      {"ExpectationDidYouMean", ops("eval expect grad={}\n"), 13, 13, "unknown expectation 'grad'; did you mean 'grads'?"},
      {"ModuleListsDeclared", ops("reshard lin\n"), 13, 9, "(modules declared above: lin0, lin1, root; did you mean"},
      {"FirstAdapterDeferred", head(6, "adapter default targets=lin0 deferred"), 6, 1, "cannot be deferred"},
      {"ShardUnknownModule", head(9, "fully_shard lin7"), 9, 13, "unknown module 'lin7'"},
      {"ShardAfterRoot", head(11, "fully_shard lin1"), 11, 1, "fully_shard after the root"},
      {"ShardRootTwice", head(11, "fully_shard root"), 11, 1, "fully_shard after the root"},
      {"ShardMissingRoot", head(10, "fully_shard lin1 reshard_after_forward=none"), 10, 1,
       "expected `fully_shard root` as the last fully_shard"},
      {"ShardNone", no_shards, 12, 1, "expected `fully_shard root`"},
      {"ShardRootGrouped", head(10, "fully_shard lin1,root"), 10, 13, "root cannot be grouped with layers"},
      {"ShardTwice", head(10, "fully_shard lin0"), 10, 13, "'lin0' is already sharded by an earlier fully_shard"},
      {"ShardBadRaf", head(10, "fully_shard root reshard_after_forward=sometimes"), 10, 18, "got 'sometimes'"},
      {"ShardBadOption", head(10, "fully_shard root raf=true"), 10, 18, "expected reshard_after_forward=true|false|none"},
      {"OptimizerBad", head(11, "optimizer adam"), 11, 11, "expected optimizer trainable|all, got 'adam'"},
      {"MissingSeparator", head(12, ""), 13, 1, "expected a `---` line between the scenario and the ops"},
      {"TextAfterSeparator", head(12, "--- ops"), 12, 5, "unexpected text after ---"},
      {"NoLayers", "world 1\n---\n", 2, 1, "expected at least one `layer`"},
      {"NoAdapters", "layer a 4 2\nfully_shard root\n---\n", 3, 1, "expected at least one `adapter`"},
      {"TooManyAdapters",
       "layer a 4 2\nadapter a0 targets=a\nadapter a1 targets=a\nadapter a2 targets=a\nadapter a3 targets=a\n"
       "adapter a4 targets=a\nadapter a5 targets=a\nadapter a6 targets=a\nadapter a7 targets=a\n"
       "adapter a8 targets=a\nfully_shard root\n---\n",
       10, 1, "at most 8 adapters"},
      {"NonAsciiHeader", head(4, "layer l\xc3\xafn0 10 20"), 4, 8, "only printable ASCII"},
      {"ControlCharacter", ops("eval\x01\n"), 13, 5, "only printable ASCII"},
      {"NonAsciiOp", ops("set_adapter d\xc3\xa9" "fault\n"), 13, 14, "only printable ASCII"},
      // ops
      {"UnknownOp", ops("evaluate\n"), 13, 1, "unknown op 'evaluate'"},
      {"DirectiveAfterSeparator", ops("world 2\n"), 13, 1, "unknown op 'world': it is a scenario directive, and those go above the `---` line"},
      {"RankOutOfRange", ops("@2 eval\n"), 13, 1, "rank @2 out of range (world 2: @0..@1)"},
      {"RankTooBig", ops("@99 eval\n"), 13, 2, "expected a rank after @, a whole number in 0..63, got 99 (larger than 63)"},
      {"RankNotNumber", ops("@x eval\n"), 13, 2, "expected a rank after @, a whole number in 0..63, got 'x' (not a number)"},
      {"RankWithoutOp", ops("@1\n"), 13, 3, "expected an op after @R, got end of line"},
      {"UnknownAdapter", ops("set_adapter nope\n"), 13, 13, "unknown adapter 'nope'"},
      {"UnknownAdapterInList", ops("merge [default,nope]\n"), 13, 7, "unknown adapter 'nope'"},
      {"SetAdapterNoArg", ops("set_adapter\n"), 13, 12, "expected an adapter name or [a,b] after set_adapter"},
      {"SetAdapterEmptyList", ops("set_adapter []\n"), 13, 13, "expected at least one adapter in set_adapter"},
      {"SetAdapterDuplicate", ops("set_adapter [default,default]\n"), 13, 13, "duplicate name 'default' in list"},
      {"AddNonDeferred", ops("add_adapter other\n"), 13, 13, "only `deferred` adapters can be added"},
      {"LoadNoMode", ops("load_adapter late\n"), 13, 18, "expected trainable or frozen, got end of line"},
      {"LoadBadMode", ops("load_adapter late maybe\n"), 13, 19, "expected trainable or frozen, got 'maybe'"},
      {"DeleteUnknown", ops("delete_adapter ghost\n"), 13, 16, "unknown adapter 'ghost'"},
      {"ReshardUnknownModule", ops("reshard lin9\n"), 13, 9, "unknown module 'lin9'"},
      {"DeltaWeightRoot", ops("delta_weight root\n"), 13, 14, "unknown layer 'root'"},
      {"DeltaWeightMissing", ops("delta_weight\n"), 13, 13, "expected a layer name, got end of line"},
      {"TrailingArgument", ops("eval now\n"), 13, 6, "unexpected argument 'now' for eval"},
      {"TrailingAfterReshardModule", ops("reshard root lin0\n"), 13, 14, "unexpected argument 'lin0' for reshard"},
      {"TrailingAfterExpect", ops("train_step expect ok extra\n"), 13, 22, "expected ok, error=CLASS"},
      {"ExpectBeforeOp", ops("expect ok\n"), 13, 1, "`expect` before any op"},
      {"ExpectEmpty", ops("eval expect\n"), 13, 12, "expected at least one expectation after `expect`"},
      {"ExpectRankEmpty", ops("eval expect @1\n"), 13, 15, "expected at least one expectation after `expect`"},
      {"ExpectRankOutOfRange", ops("eval expect @3 ok\n"), 13, 13, "rank @3 out of range"},
      {"ExpectRankMismatch", ops("@0 eval expect @1 ok\n"), 13, 16, "expectation for @1 on an op that runs on @0 only"},
      {"ContinuationRankMismatch", ops("@1 eval\n  expect @0 ok\n"), 14, 10, "on an op that runs on @1 only"},
      {"ErrorOk", ops("eval expect error=ok\n"), 13, 13, "expected error=no_grad_fn|key_error"},
      {"ErrorNotRun", ops("eval expect error=not_run\n"), 13, 13, "got 'not_run'"},
      {"GradsNoBraces", ops("train_step expect grads=default\n"), 13, 19, "expected grads={a,b}"},
      {"GradsUnknownAdapter", ops("train_step expect grads={default,ghost}\n"), 13, 19, "unknown adapter 'ghost'"},
      {"GradsUnclosed", ops("train_step expect grads={default\n"), 13, 25, "unclosed brace '{' (close it with '}'"},
      {"GradsMismatchedClose", ops("train_step expect grads={default]\n"), 13, 19, "expected '}' to close the list"},
      {"IndexNegative", ops("step expect index=-1\n"), 13, 19, "expected an optimizer index, a whole number in 0..1073741824, got -1 (negative; the smallest accepted is 0)"},
      {"IndexTooBig", ops("step expect index=2000000000\n"), 13, 19, "in 0..1073741824, got 2000000000 (larger than 1073741824)"},
      {"MissingNoSlash", ops("step expect missing=3\n"), 13, 13, "expected missing=K/N"},
      {"MissingBadCount", ops("step expect missing=1/x\n"), 13, 23, "a count N in missing=K/N, a whole number in 0..1073741824, got 'x' (not a number)"},
      {"StoredNoColon", ops("eval expect stored=lin0\n"), 13, 13, "expected stored=NAME:VALUE"},
      {"StoredUnknownLayer", ops("eval expect stored=lin5:exact\n"), 13, 13, "unknown layer 'lin5'"},
      {"StoredBadClass", ops("eval expect stored=lin0:wrong\n"), 13, 13, "got 'wrong'"},
      {"MergedNotBracketed", ops("merge expect merged=lin0:default\n"), 13, 14, "expected merged=LAYER:[a,b]"},
      {"MergedUnknownAdapter", ops("merge expect merged=lin0:[ghost]\n"), 13, 14, "unknown adapter 'ghost'"},
      {"StateBadValue", ops("eval expect state=root:HALF\n"), 13, 13, "expected state=GROUP:SHARDED|UNSHARDED"},
      {"StateUnknownGroup", ops("eval expect state=lin3:SHARDED\n"), 13, 13, "unknown group 'lin3'"},
      {"FindingBad", ops("eval expect finding=S9\n"), 13, 13, "expected finding=S1..S8, got 'S9'"},
      {"UnknownExpectation", ops("eval expect loss=1\n"), 13, 13, "unknown expectation 'loss'"},
      {"ContinuationBadItem", ops("eval\nexpect @1 bogus\n"), 14, 11, "expected ok, error=CLASS"},
      // accepted before, but printed as text that does not parse back (or loses names)
      {"SetAdapterUnbracketedList", ops("set_adapter default,other\n"), 13, 13, "bracketed list"},
      {"SetAdapterBracedList", ops("set_adapter {default,other}\n"), 13, 13, "bracketed list"},
      {"AdapterEmptyTargets", head(7, "adapter other targets=[]"), 7, 15, "at least one target layer"},
      {"ShardEmptyList", head(9, "fully_shard []"), 9, 13, "at least one module"},
      {"LayerNamedExpect", head(11, "layer expect 2 2"), 11, 7, "'expect' is reserved"},
      {"AdapterNamedExpect", head(8, "adapter expect targets=lin0 deferred"), 8, 9, "'expect' is reserved"},
      // names (docs/guide/seq-format.md, "Names"): no '.', so parameter names cannot collide
      {"LayerDottedName", head(4, "layer a.b 10 20"), 4, 7, "names may not contain '.'"},
      {"AdapterDottedName", head(7, "adapter c.d targets=lin1"), 7, 9, "names may not contain '.'"},
      {"AdapterAutocastNotBool", head(7, "adapter other targets=lin1 autocast=1"), 7, 28, "expected autocast=true or autocast=false"},
      {"AdapterAutocastTwice", head(7, "adapter other targets=lin1 autocast=true autocast=false"), 7, 42, "autocast= given twice"},
      {"LayerLoraCollision", head(5, "layer x.lora_A 20 2"), 5, 7, "names may not contain '.'"},
      {"TargetDottedName", head(7, "adapter other targets=lin1,a.b"), 7, 15, "names may not contain '.'"},
      {"LayerNamedLora", head(5, "layer my_lora_layer 20 2"), 5, 7, "may not contain 'lora_'"},
      {"AdapterNamedBase", head(7, "adapter base targets=lin1"), 7, 9, "'base' is reserved"},
      {"NameTooLong", head(7, "adapter " + std::string(65, 'a') + " targets=lin1"), 7, 9, "at most 64 characters"},
      {"PlacedUnknownParam", ops("eval expect placed=lin0.lora_A.nope:cpu/fp32\n"), 13, 13, "expected an adapter parameter"},
      {"PlacedNotTargeted", ops("eval expect placed=lin0.lora_A.other:cpu/fp32\n"), 13, 13, "expected an adapter parameter"},
      // a directive that sets one value, given twice
      {"WorldTwice", head(2, "world 3"), 2, 1, "`world` is given twice (first at line 1)"},
      {"SeedTwice", head(3, "seed 9"), 3, 1, "`seed` is given twice (first at line 2)"},
      {"ProfileTwice", head(4, "profile patched") + "", 4, 1, "`profile` is given twice (first at line 3)"},
      {"OptimizerTwice", head(12, "optimizer trainable\n---"), 12, 1, "`optimizer` is given twice (first at line 11)"},
      {"LoadingTwice", head(11, "loading full\nloading full"), 12, 1, "`loading` is given twice (first at line 11)"},
      {"DtypeTwice", head(11, "dtype fp32\ndtype bf16"), 12, 1, "`dtype` is given twice (first at line 11)"},
      {"RamEfficientWithoutPrepare", head(11, "loading ram_efficient"), 11, 1, "needs a `prepare` op"},
      {"LineCountAcrossBlanks", ops("eval\n\n# note\n   \nevalx\n"), 17, 1, "unknown op 'evalx'"},
  };
}

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class SeqParserBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(SeqParserBad, ThrowsAtExactPosition) {
  const BadCase& c = GetParam();
  try {
    SeqFile f = parse_seq(c.text, "bad.seq");
    ADD_FAILURE() << "parsed without error:\n" << c.text << "\nprinted:\n" << print_seq(f);
  } catch (const SourceError& e) {
    std::string what = e.what();
    std::string prefix = "bad.seq:" + std::to_string(c.line) + ":" + std::to_string(c.column) + ":";
    EXPECT_EQ(what.substr(0, prefix.size()), prefix) << what;
    EXPECT_NE(what.find(c.phrase), std::string::npos) << "missing '" << c.phrase << "' in: " << what;
    EXPECT_EQ(e.pos().line, c.line);
    EXPECT_EQ(e.pos().column, c.column);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SeqParserBad, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& i) { return i.param.name; });

}  // namespace
}  // namespace fsdpsim
