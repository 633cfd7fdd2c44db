// The explorer (sim/core/explore.cpp) and its canonical state key
// (model/machine/state_key.cpp): seed 000's classes at their minimal length
// (checked against a brute-force enumeration through the plain simulator),
// equivalent states merged and different ones kept apart, exhaustion of a tiny
// scenario, and Graphviz output that `dot` accepts.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "properties/test_util.hpp"
#include "sim/core/builtin_scenarios.hpp"
#include "sim/core/explore.hpp"
#include "sim/report/explore_report.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {

const FindingClass* find_class(const ExploreResult& r, const std::string& spec, const std::string& op,
                               const std::string& symptom_part) {
  for (const auto& c : r.classes)
    if (c.spec == spec && c.op == op && c.symptom.find(symptom_part) != std::string::npos) return &c;
  return nullptr;
}

// Does any sequence of exactly `len` ops over `alphabet` show the class at its last op?
bool some_sequence_shows(const Scenario& s, const std::vector<Op>& alphabet, int len, const std::string& spec,
                         const std::string& text_part) {
  std::vector<size_t> idx(len, 0);
  while (true) {
    SeqFile f{{}, s, {}};
    for (size_t i : idx) f.ops.push_back(alphabet[i]);
    for (const auto& fd : run_checked(f).findings)
      if (fd.step == len && fd.spec == spec && fd.text.find(text_part) != std::string::npos) return true;
    int k = len - 1;
    while (k >= 0 && ++idx[k] == alphabet.size()) idx[k--] = 0;
    if (k < 0) return false;
  }
}

SeqFile seed000(const std::string& ops) { return parse_seq(seed000_header(2) + ops); }

const char* kTiny = "world 2\nlayer lin0 4 4\nadapter a r=2 alpha=4 targets=lin0\n"
                    "fully_shard root reshard_after_forward=true\n---\n";

}  // namespace

// Seed 000 (peft#3872): the dropped requires_grad flip (S3) and the training
// step that then trains nothing (S1), each at the shortest length any sequence
// over the same ops reaches it.
TEST(Explore, FindsSeed000ClassesAtTheirMinimalLength) {
  const BuiltinScenario* b = find_builtin("seed000_merged_raf_false");
  ASSERT_NE(b, nullptr);
  ExploreOptions opt;
  opt.depth = 4;
  opt.only_ops = {"eval", "forward", "backward", "merge", "set_adapter other", "train_step", "reshard"};
  ExploreResult r = explore(b->file, opt);
  ASSERT_EQ(r.alphabet.size(), 7u);
  EXPECT_EQ(r.depth_reached, 4);

  const FindingClass* s3 = find_class(r, "S3", "train_step", ".requires_grad U=");
  if (!s3) print_explore(std::cerr, r, false);
  ASSERT_NE(s3, nullptr);
  const FindingClass* s1 = find_class(r, "S1", "train_step", "expected gradients on {other}, got no_grad_fn");
  ASSERT_NE(s1, nullptr);
  for (const FindingClass* c : {s3, s1}) {
    EXPECT_TRUE(c->replayed) << c->symptom;
    const int len = static_cast<int>(c->file.ops.size());
    EXPECT_LE(len, 5) << "no longer than the thread's repro";
    // Minimal: no shorter sequence over the alphabet shows the class.
    for (int shorter = 1; shorter < len; ++shorter)
      EXPECT_FALSE(some_sequence_shows(b->file.scenario, r.alphabet, shorter, c->spec, c->symptom.substr(0, 30)))
          << c->spec << " at length " << shorter;
  }
  EXPECT_EQ(op_text(s3->file.ops.back()), "train_step");
  EXPECT_EQ(s3->file.ops.size(), 3u);  // eval leaves U, set_adapter flips U's flags, train_step reshards them away
}

// Two train_steps and one leave different version numbers (different object
// ids) but the same future: their keys are equal. Different adapter state, or
// a save taken at a different point, keeps keys apart.
TEST(Explore, CanonicalKeyMergesEquivalentStatesOnly) {
  SeqFile one = seed000("train_step\n"), two = seed000("train_step\ntrain_step\n");
  {  // the raw states differ: the second step bumped the trained versions again
    Topology topo = compile_topology(one);
    Simulator a(topo), b(topo);
    a.run(one.ops);
    b.run(two.ops);
    bool differ = false;
    for (size_t p = 0; p < topo.params.size(); ++p)
      differ = differ || a.ranks()[0].state().params[p].ver_s != b.ranks()[0].state().params[p].ver_s;
    EXPECT_TRUE(differ);
  }
  EXPECT_EQ(explore_state_key(one), explore_state_key(two));
  EXPECT_EQ(explore_state_key(seed000("save_optimizer\ntrain_step\n")),
            explore_state_key(seed000("train_step\nsave_optimizer\n")));  // commuting ops: one state
  EXPECT_NE(explore_state_key(one), explore_state_key(seed000("set_adapter other\ntrain_step\n")));
  EXPECT_NE(explore_state_key(seed000("train_step\nsave_adapters\ntrain_step\n")),
            explore_state_key(seed000("train_step\ntrain_step\nsave_adapters\n")));  // saved values older vs current
  EXPECT_NE(explore_state_key(seed000("eval\n")), explore_state_key(seed000("forward\n")));  // a pending graph
  EXPECT_NE(explore_state_key(seed000("")), explore_state_key(seed000("save_optimizer\n")));
}

// A one-adapter, one-group model under a few ops closes: no new state at
// some depth, and a deeper bound adds nothing.
TEST(Explore, TinyScenarioIsExhausted) {
  SeqFile f = parse_seq(kTiny);
  ExploreOptions opt;
  opt.depth = 0;
  opt.only_ops = {"train_step", "eval", "reshard", "merge", "unmerge"};
  ExploreResult r = explore(f, opt);
  EXPECT_TRUE(r.exhausted);
  EXPECT_FALSE(r.limited);
  EXPECT_LT(r.states, 200);
  EXPECT_EQ(r.transitions, r.states * 5 - [&] {
    int64_t stuck = 0;
    for (size_t v = 0; v < boost::num_vertices(r.graph); ++v) stuck += r.graph[v].stuck;
    return stuck * 5;
  }());
  opt.depth = r.depth_reached + 3;
  ExploreResult deeper = explore(f, opt);
  EXPECT_EQ(deeper.states, r.states);
  EXPECT_TRUE(deeper.exhausted);
  opt.depth = 1;
  ExploreResult shallow = explore(f, opt);
  EXPECT_FALSE(shallow.exhausted);
}

// --dot output is a graph Graphviz lays out, with op labels and coloured
// violating states.
// The caps stop a space that does not close: each says which it was, keeps the classes found
// so far and the last finished level. A memory budget below what the process already uses
// stops at the first check (every 1 024 transitions).
TEST(Explore, DepthZeroStopsAtTheStateCapOrTheMemoryBudget) {
  const SeqFile f = find_builtin("seed000_merged_raf_false")->file;
  ExploreOptions opt;
  opt.depth = 0;
  opt.max_states = 500;
  ExploreResult r = explore(f, opt);
  EXPECT_TRUE(r.limited);
  EXPECT_EQ(r.stopped_by, "states");
  EXPECT_GT(r.states, 500);
  EXPECT_LT(r.states, 500 + 1024 + 1);
  EXPECT_NE(stop_text(r).find("state cap"), std::string::npos) << stop_text(r);
  opt.max_states = 1000000;
  opt.max_bytes = 1;
  r = explore(f, opt);
  EXPECT_TRUE(r.limited);
  EXPECT_EQ(r.stopped_by, "memory");
  EXPECT_EQ(r.transitions, 1024);
  EXPECT_GT(r.memory_bytes, 1);
  EXPECT_FALSE(r.exhausted);
  EXPECT_NE(stop_text(r).find("stopped at the memory budget"), std::string::npos) << stop_text(r);
}

TEST(Explore, DotOutputParsesWithGraphviz) {
  if (std::system("dot -V > /dev/null 2>&1") != 0) GTEST_SKIP() << "Graphviz dot not installed";
  ExploreOptions opt;
  opt.depth = 3;
  opt.only_ops = {"eval", "merge", "reshard"};
  ExploreResult r = explore(seed000(""), opt);
  ASSERT_FALSE(r.classes.empty());
  std::ostringstream dot;
  write_state_dot(dot, r);
  const std::string text = dot.str();
  EXPECT_NE(text.find("label=\"merge\""), std::string::npos);
  EXPECT_NE(text.find("fillcolor=\"#f4a6a6\""), std::string::npos);
  const std::string path = std::filesystem::temp_directory_path() / ("explore_test_" + std::to_string(::getpid()) + ".dot");
  std::ofstream(path) << text;
  const int rc = std::system(("dot -Tcanon '" + path + "' > /dev/null").c_str());
  std::filesystem::remove(path);
  EXPECT_EQ(rc, 0);
}

namespace {

// The nodes and edges of write_state_dot's text, by the lines it writes.
struct DotGraph {
  std::map<int, std::string> labels;  // state -> its label ("\n" kept as written)
  std::set<int> red;                  // filled like a finding state
  std::vector<std::pair<int, int>> edges;
  std::string text;
};

DotGraph parse_dot(const std::string& text) {
  DotGraph g;
  g.text = text;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || !std::isdigit(static_cast<unsigned char>(line[0]))) continue;  // legend_* and attributes
    size_t n = 0;
    const int u = std::stoi(line, &n);
    if (line.compare(n, 4, " -> ") == 0) {
      g.edges.push_back({u, std::stoi(line.substr(n + 4))});
      continue;
    }
    const size_t l = line.find("label=\"") + 7;
    g.labels[u] = line.substr(l, line.find('"', l) - l);
    if (line.find("fillcolor=\"#f4a6a6\"") != std::string::npos) g.red.insert(u);
  }
  return g;
}

// Every red state is labelled "SPEC on OP: ..." with a class that shows on entering it.
void expect_red_states_labelled(const DotGraph& g, const ExploreResult& r) {
  for (int v : g.red) {
    auto it = r.state_classes.find(v);
    ASSERT_NE(it, r.state_classes.end()) << "red state " << v << " has no class";
    const FindingClass& c = r.classes[it->second.front()];
    EXPECT_NE(g.labels.at(v).find("\\n" + c.spec + " on " + c.op + ": "), std::string::npos) << v << ": " << g.labels.at(v);
  }
}

}  // namespace

// Over the cap, the drawing keeps exactly the states on each class's path from the initial
// state, every finding state labelled with its class; a legend says what is drawn. Under the
// cap, every state, red ones labelled too.
TEST(Explore, DrawingOverTheCapKeepsThePathsToEachFindingLabelledWithALegend) {
  ExploreOptions opt;
  opt.depth = 3;
  opt.only_ops = {"eval", "merge", "reshard", "train_step", "save_optimizer"};
  ExploreResult r = explore(seed000(""), opt);
  ASSERT_GE(r.classes.size(), 2u);
  ASSERT_GT(r.states, 20);

  std::ostringstream trimmed_text;
  const int64_t drawn = write_state_dot(trimmed_text, r, 10);
  const DotGraph t = parse_dot(trimmed_text.str());
  std::set<int> on_paths;
  for (const FindingClass& c : r.classes) {
    ASSERT_EQ(c.path_states.size(), c.file.ops.size() - r.setup.size() + 1) << c.text;
    EXPECT_EQ(c.path_states.front(), 0);
    on_paths.insert(c.path_states.begin(), c.path_states.end());
    const std::string& last = t.labels.at(c.path_states.back());  // the class's own state, labelled with it
    EXPECT_TRUE(t.red.count(c.path_states.back()));
    bool named = false;
    for (uint16_t ci : r.state_classes.at(c.path_states.back())) named = named || &r.classes[ci] == &c;
    if (named) {
      EXPECT_NE(last.find(c.spec + " on " + c.op), std::string::npos) << last;
    }
  }
  std::set<int> nodes;
  for (const auto& [v, label] : t.labels) nodes.insert(v);
  EXPECT_EQ(nodes, on_paths);
  EXPECT_EQ(drawn, static_cast<int64_t>(on_paths.size()));
  EXPECT_LT(drawn, r.states);
  for (const auto& [u, v] : t.edges) EXPECT_TRUE(nodes.count(u) && nodes.count(v)) << u << " -> " << v;
  expect_red_states_labelled(t, r);
  EXPECT_NE(t.text.find("subgraph cluster_legend {"), std::string::npos);
  EXPECT_NE(t.text.find(std::to_string(drawn) + " of " + std::to_string(r.states) + " states: over 10, only the paths"),
            std::string::npos) << t.text;
  EXPECT_NE(t.text.find("legend_finding [label=\"a finding shows on entering it"), std::string::npos);

  std::ostringstream full_text;
  EXPECT_EQ(write_state_dot(full_text, r), r.states);
  const DotGraph full = parse_dot(full_text.str());
  EXPECT_EQ(static_cast<int64_t>(full.labels.size()), r.states);
  EXPECT_FALSE(full.red.empty());
  expect_red_states_labelled(full, r);
  EXPECT_NE(full.text.find("all " + std::to_string(r.states) + " states"), std::string::npos);
}
