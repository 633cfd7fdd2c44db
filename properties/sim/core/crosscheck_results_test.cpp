// crosscheck --shard I/N and merge-results: shard ranges, the results JSON
// round trip, merging, and the command line's exit codes on bad input.
#include "sim/core/crosscheck_results.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "model/vocab/source_error.hpp"
#include "properties/cli_run.hpp"

namespace fsdpsim {
namespace {

CrosscheckResults sample() {
  CrosscheckResults r;
  r.seed = 20000, r.count = 10, r.world = 2, r.backends = "model,real", r.profile = "";
  r.first = 0, r.end = 10;
  r.divergent = {20003, 20007};
  r.broken = {20009};
  r.findings = {{"S1", 4}, {"S5", 1}};
  return r;
}

// The SourceError text f throws ("" when it throws none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const SourceError& e) {
    return e.what();
  }
  return "";
}

std::string json_of(const CrosscheckResults& r) {
  std::ostringstream os;
  write_results_json(os, r);
  return os.str();
}

TEST(ShardRange, BlocksAreDisjointInOrderAndCoverTheRange) {
  rc::check([](uint16_t count16, uint8_t shards8) {
    int64_t count = count16 % 5000 + 1;
    int shards = shards8 % 64 + 1;
    int64_t next = 0;
    for (int i = 0; i < shards; ++i) {
      auto [lo, hi] = shard_range(count, i, shards);
      RC_ASSERT(lo == next);
      RC_ASSERT(hi >= lo);
      RC_ASSERT(hi - lo <= count / shards + 1);
      next = hi;
    }
    RC_ASSERT(next == count);
  });
}

TEST(ResultsJson, RoundTripsAndPrintsTheSameBytes) {
  CrosscheckResults r = sample();
  std::string text = json_of(r);
  EXPECT_EQ(text,
            "{\"crosscheck\":{\"seed\":20000,\"count\":10,\"world\":2,\"backends\":\"model,real\",\"profile\":\"\"},"
            "\"first\":0,\"end\":10,\"divergent\":[20003,20007],\"broken\":[20009],\"findings\":{\"S1\":4,\"S5\":1}}\n");
  CrosscheckResults back = read_results_json(text, "r.json");
  EXPECT_EQ(back, r);
  EXPECT_EQ(json_of(back), text);
}

TEST(ResultsJson, BadInputNamesFilePositionOrField) {
  std::string e = error_of([] { read_results_json("{\"crosscheck\":\n  {\"seed\": 1,,}}", "bad.json"); });
  EXPECT_EQ(e.rfind("bad.json:2:", 0), 0u) << e;
  std::string text = json_of(sample());
  std::string no_end = text;
  no_end.replace(no_end.find("\"end\":10"), 8, "\"end\":11");
  EXPECT_THROW(read_results_json(no_end, "x.json"), SourceError);  // beyond count
  std::string foreign = text;
  foreign.replace(foreign.find("20003"), 5, "30003");
  e = error_of([&] { read_results_json(foreign, "x.json"); });
  EXPECT_NE(e.find("field 'divergent'"), std::string::npos) << e;
}

TEST(MergeResults, ShardsMergeIntoTheWholeRunWhateverTheirOrder) {
  CrosscheckResults whole = sample();
  // Three shards of the same run, split as --shard I/3 splits it.
  std::vector<CrosscheckResults> parts;
  for (int i = 0; i < 3; ++i) {
    CrosscheckResults p = whole;
    std::tie(p.first, p.end) = shard_range(whole.count, i, 3);
    p.divergent.clear(), p.broken.clear(), p.findings.clear();
    for (uint64_t s : whole.divergent)
      if (s >= whole.seed + p.first && s < whole.seed + p.end) p.divergent.push_back(s);
    for (uint64_t s : whole.broken)
      if (s >= whole.seed + p.first && s < whole.seed + p.end) p.broken.push_back(s);
    parts.push_back(p);
  }
  parts[0].findings = {{"S1", 3}};
  parts[2].findings = {{"S1", 1}, {"S5", 1}};
  std::vector<CrosscheckResults> shuffled = {parts[2], parts[0], parts[1]};
  CrosscheckResults merged = merge_results(shuffled, {"c", "a", "b"});
  EXPECT_EQ(json_of(merged), json_of(whole));
}

TEST(MergeResults, RejectsGapsOverlapsAndOtherRuns) {
  CrosscheckResults a = sample(), b = sample();
  a.first = 0, a.end = 5, a.divergent = {20003}, a.broken = {};
  b.first = 6, b.end = 10, b.divergent = {20007};
  auto merge = [&] { merge_results({a, b}, {"a.json", "b.json"}); };
  EXPECT_NE(error_of(merge).find("b.json: sequences 5..5 are in no file"), std::string::npos) << error_of(merge);
  b.first = 4;
  EXPECT_NE(error_of(merge).find("b.json: sequences 4..9 overlap"), std::string::npos) << error_of(merge);
  b.first = 5, b.world = 3;
  EXPECT_NE(error_of(merge).find("b.json: results of another crosscheck"), std::string::npos) << error_of(merge);
  b.world = 2, b.draw = "checkpoint=30";
  EXPECT_NE(error_of(merge).find("draw checkpoint=30, expected"), std::string::npos) << error_of(merge);
  b.draw = "";
  EXPECT_EQ(merge_results({a, b}, {"a.json", "b.json"}).end, 10);
}

// --draw is part of what was run: written only when given, read back, absent reads as "".
TEST(ResultsJson, DrawRoundTripsOnlyWhenGiven) {
  CrosscheckResults r = sample();
  r.draw = "checkpoint=30";
  std::string text = json_of(r);
  EXPECT_NE(text.find("\"profile\":\"\",\"draw\":\"checkpoint=30\"}"), std::string::npos) << text;
  EXPECT_EQ(read_results_json(text, "r.json"), r);
  EXPECT_EQ(read_results_json(json_of(sample()), "r.json").draw, "");
}

// The command line: bad --shard values and bad results files exit 3.
TEST(ShardCli, BadShardIsExit3) {
  for (const char* v : {"2/2", "1/0", "x", "1", "-1/2", "1/2/3", "/2"}) {
    auto r = test::run_cli(std::string("crosscheck --seed 1 --count 4 --shard ") + v);
    EXPECT_EQ(r.code, 3) << v << ": " << r.out;
    EXPECT_NE(r.out.find("--shard"), std::string::npos) << r.out;
  }
}

TEST(ShardCli, MergeResultsBadFilesAreExit3AndGoodOnesMerge) {
  auto dir = std::filesystem::temp_directory_path() / ("fsdpsim-merge-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto path = [&](const char* n) { return (dir / n).string(); };
  std::ofstream(path("bad.json")) << "{\"crosscheck\": [1,\n 2}";
  auto r = test::run_cli("merge-results " + path("bad.json"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("bad.json:2:"), std::string::npos) << r.out;
  EXPECT_EQ(test::run_cli("merge-results " + path("missing.json")).code, 3);
  EXPECT_EQ(test::run_cli("merge-results").code, 3);

  CrosscheckResults a = sample(), b = sample();
  a.end = 5, a.divergent = {20003}, a.broken = {}, a.findings = {{"S1", 4}};
  b.first = 5, b.divergent = {20007}, b.findings = {{"S5", 1}};
  std::ofstream(path("a.json")) << json_of(a);
  std::ofstream(path("b.json")) << json_of(b);
  r = test::run_cli("merge-results " + path("b.json") + " " + path("a.json") + " --results " + path("m.json"));
  EXPECT_EQ(r.code, 4) << r.out;  // a broken sequence, as crosscheck exits
  EXPECT_NE(r.out.find("divergent         2 (seeds 20003, 20007)"), std::string::npos) << r.out;
  std::ifstream in(path("m.json"));
  std::stringstream merged;
  merged << in.rdbuf();
  EXPECT_EQ(merged.str(), json_of(sample()));
  std::filesystem::remove_all(dir);
}

// crosscheck's summary of the upstream prepare paths: the accelerate share, each fallback
// reason with its count (most first), runs whose ranks took different paths and runs where none prepared.
TEST(PrepareTally, CountsAccelerateAndEachFallbackReason) {
  PrepareTally t;
  for (const char* by : {"accelerate", "ram_efficient", "accelerate", "grouped", "ram_efficient", "", "mixed", "accelerate"}) t.add(by);
  EXPECT_EQ(t.upstream_runs, 8);
  EXPECT_EQ(t.accelerate, 3);
  EXPECT_EQ(t.unprepared, 1);
  EXPECT_EQ(t.mixed, 1);
  EXPECT_EQ(t.fallbacks, (std::map<std::string, int64_t>{{"grouped", 1}, {"ram_efficient", 2}}));
  EXPECT_EQ(t.accelerate_text(), "3 of 8 (37.5 %)");
  const std::vector<std::vector<std::string>> rows = {{"prepared by accelerate", "3 of 8 (37.5 %)"},
                                                      {"  direct: ram_efficient", "2"},
                                                      {"  direct: grouped", "1"},
                                                      {"  ranks took different paths", "1"},
                                                      {"  path not reported", "1"}};
  EXPECT_EQ(t.rows(), rows);
}

TEST(PrepareTally, NoUpstreamRunClaimsNoShare) {
  PrepareTally t;
  EXPECT_EQ(t.accelerate_text(), "no upstream run");
  EXPECT_EQ(t.rows().size(), 1u);
}

}  // namespace
}  // namespace fsdpsim
