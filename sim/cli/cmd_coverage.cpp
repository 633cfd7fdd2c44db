// `fsdpsim coverage`: how often the generator draws each feature of the vocabulary and each pair
// of features in N sequences per world, and which it never draws (exit 1 then, so that the
// nightly job fails on a feature added to the parser that the generator has not learnt).
#include <iostream>
#include <string>
#include <vector>

#include "model/vocab/table.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/progress.hpp"
#include "sim/core/coverage.hpp"

namespace fsdpsim::cli {

namespace {

// A feature or pair no sequence drew at one world, and what a forced draw made of it.
struct Gap {
  int a, b, world;
  std::string refusal;  // "": the parser accepts a file with it (a generator gap); else why not
};

constexpr int kForcedTries = 200;

}  // namespace

int cmd_coverage(const Args& a, const CoverageFlags& own) {
  const uint64_t seed = a.have_seed ? a.seed : 1;
  const int count = a.count_given ? a.count : 1000;
  std::vector<int> worlds;
  if (a.world > 0) worlds = {a.world};
  else
    for (int w = own.worlds_lo; w <= own.worlds_hi; ++w) worlds.push_back(w);
  // The whole vocabulary, with the opt-in capabilities (coverage.hpp's kCoverageDraw).
  const std::string draw = a.draw.empty() ? std::string(kCoverageDraw) : a.draw;
  GenOptions opt;
  apply_draws_or_default(draw, &opt);
  const auto& feats = vocab_features();
  const int n = static_cast<int>(feats.size());
  // a feature `--draw all` leaves out is a feature like any other under all2, which draws it
  auto listed_apart = [&](int i) { return !opt.all2 && !feats[i].undrawn.empty(); };
  Progress progress("coverage", a.quiet);
  std::vector<Coverage> per_world;
  for (int w : worlds) {
    opt.world = w;
    progress.status("world " + std::to_string(w) + ": " + std::to_string(count) + " sequences");
    per_world.push_back(measure_coverage(seed, count, opt));
  }
  // What was never drawn: a forced draw tells a generator gap (the parser accepts such a file)
  // from a combination the parser's own checks refuse.
  std::vector<Gap> gaps;
  int pairs = 0, apart = 0;
  for (const Coverage& c : per_world) {
    opt.world = c.world;
    for (int i = 0; i < n; ++i) {
      if (feats[i].always || listed_apart(i) || c.feature[i] > 0) continue;
      gaps.push_back({i, -1, c.world, forced_witness(i, -1, opt, kForcedTries, nullptr)});
    }
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) {
        if (feats[i].always || feats[j].always) continue;
        if (listed_apart(i) || listed_apart(j)) continue;  // listed apart below
        if (!grammar_allows(feats[i], feats[j])) {
          apart += c.world == worlds[0];
          continue;
        }
        pairs += c.world == worlds[0];
        if (c.pair[i][j] > 0 || c.feature[i] == 0 || c.feature[j] == 0) continue;  // a feature never drawn is one gap
        gaps.push_back({i, j, c.world, forced_witness(i, j, opt, kForcedTries, nullptr)});
      }
  }
  progress.done();
  int missing = 0, refused = 0;
  for (const Gap& g : gaps) (g.refusal.empty() || g.refusal.rfind("never realised", 0) == 0 ? missing : refused) += 1;
  auto name_of = [&](const Gap& g) { return feats[g.a].name + (g.b >= 0 ? " + " + feats[g.b].name : ""); };
  if (a.json) {
    for (int i = 0; i < n; ++i)
      for (const Coverage& c : per_world)
        JsonRecord("coverage_feature").str("feature", feats[i].name).num("world", c.world).num("drawn", c.feature[i]).print(std::cout);
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) {
        if (feats[i].always || feats[j].always || !grammar_allows(feats[i], feats[j])) continue;
        for (const Coverage& c : per_world)
          JsonRecord("coverage_pair").str("a", feats[i].name).str("b", feats[j].name).num("world", c.world).num("drawn", c.pair[i][j])
              .print(std::cout);
      }
    for (const Gap& g : gaps)
      JsonRecord("coverage_gap").str("feature", name_of(g)).num("world", g.world).str("refused", g.refusal).print(std::cout);
    JsonRecord("coverage_summary").num("seed", static_cast<int64_t>(seed)).num("count", count).str("draw", draw)
        .num("features", n).num("pairs", pairs).num("never_drawn", missing).num("refused", refused).print(std::cout);
    return missing ? kFinding : kClean;
  }
  std::cout << "coverage seed " << seed << ", " << count << " sequences per world, worlds " << worlds.front()
            << (worlds.size() > 1 ? "-" + std::to_string(worlds.back()) : "") << ", draw " << draw << "\n\n";
  std::vector<std::string> head = {"feature"};
  for (int w : worlds) head.push_back("world " + std::to_string(w));
  std::vector<std::vector<std::string>> rows = {head};
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> row = {feats[i].name + (feats[i].always ? " (every file)" : "")};
    for (const Coverage& c : per_world) row.push_back(c.feature[i] ? std::to_string(c.feature[i]) : "never");
    rows.push_back(row);
  }
  print_aligned(std::cout, rows);
  std::cout << "\n";
  head[0] = "pair";
  rows = {head};
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      if (feats[i].always || feats[j].always || !grammar_allows(feats[i], feats[j])) continue;
      std::vector<std::string> row = {feats[i].name + " + " + feats[j].name};
      for (const Coverage& c : per_world) row.push_back(c.pair[i][j] ? std::to_string(c.pair[i][j]) : "never");
      rows.push_back(row);
    }
  print_aligned(std::cout, rows);
  std::cout << "\n" << n << " features, " << pairs << " pairs that may meet (" << apart
            << " more are two values of one directive)\n";
  for (const Gap& g : gaps)
    std::cout << (g.refusal.empty() || g.refusal.rfind("never realised", 0) == 0 ? "never drawn" : "refused by the parser")
              << " at world " << g.world << ": " << name_of(g) << (g.refusal.empty() ? " (a forced draw reaches it)" : " (" + g.refusal + ")")
              << "\n";
  for (int i = 0; i < n; ++i)
    if (listed_apart(i)) std::cout << "not drawn: " << feats[i].name << ": " << feats[i].undrawn << "\n";
  std::cout << (missing ? std::to_string(missing) + " features or pairs never drawn" : "every feature and pair drawn at every world")
            << (refused ? ", " + std::to_string(refused) + " that the parser refuses together left out" : "") << "\n";
  return missing ? kFinding : kClean;
}

}  // namespace fsdpsim::cli
