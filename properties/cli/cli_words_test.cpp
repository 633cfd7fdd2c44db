// The same word for the same thing everywhere (issue 54, item 10): triage's
// verdict is the catalogue's; the hunt's default budget comes from one
// constant; flags with no command go to the hunt; --ops refuses what it would
// drop; every number refused says the value, the range and why.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "properties/cli_run.hpp"
#include "sim/findings/hunt.hpp"
#include "sim/findings/root_cause_catalogue.hpp"

namespace {

using Result = fsdpsim::test::CliResult;

Result run(const std::string& args) { return fsdpsim::test::run_cli(args); }

std::string write(const std::string& name, const std::string& text) {
  std::string path = std::string(FSDPSIM_BINARY_DIR) + "/cli_words_test_" + name;
  std::ofstream(path) << text;
  return path;
}

bool has(const Result& r, const std::string& text) { return r.out.find(text) != std::string::npos; }

std::string column(const std::string& line, int n) {
  std::istringstream in(line);
  std::string cell;
  for (int i = 0; i <= n && std::getline(in, cell, '\t');) ++i;
  return cell;
}

}  // namespace

// (a) triage printed `known optimizer_ckpt_reshard=on` for a root cause the catalogue calls `unreported`.
TEST(CliWords, TriageSaysTheCataloguesVerdict) {
  const std::string f = write("triage.seq",
                              "world 2\nlayer a 4 2\nadapter x r=2 alpha=2 targets=a\nfully_shard root reshard_after_forward=false\n---\n"
                              "eval\nsave_optimizer\n");
  Result r = run("triage " + f);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string root_cause = column(r.out, 2), verdict = column(r.out, 3);
  ASSERT_FALSE(root_cause.empty()) << r.out;
  const std::string word = fsdpsim::root_verdict_word(fsdpsim::root_cause_entry(root_cause).verdict);
  EXPECT_EQ(verdict.substr(0, verdict.find(',')), word) << r.out;
  Result j = run("triage " + f + " --json");
  EXPECT_TRUE(has(j, "\"verdict\":\"" + word + "\"")) << j.out;
}

// (c) `hunt --help` said 10 s while the hunt and the guide said 30 s.
TEST(CliWords, HuntDefaultBudgetIsOneConstant) {
  Result r = run("hunt --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(has(r, "(default " + std::to_string(fsdpsim::kHuntDefaultSeconds) + "; " +
                         std::to_string(fsdpsim::kHuntModelOnlyDefaultSeconds) + " with --model-only)"))
      << r.out;
  std::ifstream guide(std::string(FSDPSIM_SOURCE_DIR) + "/docs/guide/hunt.md");
  std::stringstream text;
  text << guide.rdbuf();
  EXPECT_NE(text.str().find("`--seconds T` (default " + std::to_string(fsdpsim::kHuntDefaultSeconds) + ")"), std::string::npos);
}

namespace {

// Exit 3 with `message` in the output, and never "unknown command".
void refused(const std::string& args, const std::string& message) {
  Result r = run(args);
  EXPECT_EQ(r.code, 3) << args;
  EXPECT_TRUE(has(r, message)) << args << "\n" << r.out;
  EXPECT_FALSE(has(r, "unknown command")) << args << "\n" << r.out;
}

}  // namespace

// (d) `fsdpsim --seconds 3` said "unknown command": flags alone are the hunt's.
TEST(CliWords, FlagsWithoutACommandGoToTheHunt) {
  refused("--seconds 0", "--seconds expects a whole number in 1..3600, got 0 (smaller than 1)");
  refused("--fail-on-unreported --frobnicate", "unknown flag --frobnicate");
}

// (e) `explore --ops merge,nosuch` dropped nosuch; `--ops mrege` had no suggestion.
TEST(CliWords, ExploreRefusesUnknownOps) {
  refused("explore --builtin seed000_merged_raf_false --ops merge,nosuch", "<command line>: --ops: unknown op 'nosuch'");
  refused("explore --builtin seed000_merged_raf_false --ops mrege", "--ops: unknown op 'mrege'; did you mean 'merge'?");
}

// (f) Numbers on the command line: the value, the range and why; never just "expects a number".
TEST(CliWords, NumericFlagsSayValueRangeAndWhy) {
  refused("hunt --seconds 1e9", "--seconds expects a whole number in 1..3600, got '1e9' (an exponent; write the digits out)");
  refused("random --seed 1 --world 18446744073709551616",
          "--world expects a whole number in 1..64, got 18446744073709551616 (larger than 64, and than any 64-bit number)");
  refused("random --seed -1", "--seed expects a whole number in 0..999999999999999999, got -1 (negative; the smallest accepted is 0)");
  refused("random --seed 1 --draw checkpoint=150", "checkpoint= expects a percentage, a whole number in 0..100, got 150 (larger than 100)");
}
