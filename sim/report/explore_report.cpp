// The explorer's report (figures, op table, classes) and its Graphviz output.
#include <fmt/format.h>

#include <set>
#include <tuple>

#include "model/vocab/table.hpp"
#include "sim/core/cost.hpp"
#include "sim/report/explore_report.hpp"

namespace fsdpsim {

std::string stop_text(const ExploreResult& r) {
  if (r.stopped_by == "memory")
    return fmt::format("stopped at the memory budget ({} in use; --memory-budget)", bytes_text(r.memory_bytes));
  if (r.stopped_by == "states") return fmt::format("stopped at the state cap ({} states; --max-states)", r.states);
  return "stopped at the time limit (--seconds)";
}

void print_explore(std::ostream& os, const ExploreResult& r, bool with_sequences) {
  const std::string ended = r.exhausted ? "exhausted (no new state)" : r.limited ? stop_text(r) : "complete to that depth";
  os << fmt::format("explore: {} states, {} transitions, depth {}, {}, {:.2f} s ({:.0f} states/s; CPU {:.2f} s), alphabet {} ops, "
                    "setup {} ops\n",
                    r.states, r.transitions, r.depth_reached, ended, r.seconds, r.seconds > 0 ? r.states / r.seconds : 0.0,
                    r.cpu_seconds, r.alphabet.size(), r.setup.size());
  // Which op kinds fired from which kinds of state: ok/error transition counts.
  std::set<std::string> kinds;
  for (const auto& [op, per] : r.fired)
    for (const auto& [k, n] : per) kinds.insert(k);
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"op \\ from"});
  for (const auto& k : kinds) rows[0].push_back(k);
  for (const auto& [op, per] : r.fired) {
    rows.push_back({op});
    for (const auto& k : kinds) {
      auto it = per.find(k);
      rows.back().push_back(it == per.end() ? "-" : fmt::format("{}/{}", it->second[0], it->second[1]));
    }
  }
  os << "transitions by op and source state (ok/error; S all sharded, U some unsharded, +M merged, +G forward graph\n"
        "pending, +D adapters disabled):\n";
  print_aligned(os, rows);
  os << fmt::format("finding classes: {}\n", r.classes.size());
  for (const auto& c : r.classes) {
    bool divergent = false;
    for (const auto& op : c.file.ops) divergent = divergent || op.rank >= 0;
    os << fmt::format("  {} on {}: {}  ({} ops, {} transitions{}{})\n", c.spec, c.op, c.symptom, c.file.ops.size() - r.setup.size(),
                      c.transitions, divergent ? ", rank-divergent" : "", c.replayed ? "" : ", NOT reproduced by a replay");
  }
  if (!with_sequences) return;
  for (const auto& c : r.classes) os << "\n" << print_seq(c.file);
}

namespace {
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\\\"") : std::string(1, c);
  return out + "\"";
}

const char* const kFindingStyle = "shape=box, style=\"filled,rounded\", fillcolor=\"#f4a6a6\"";
const char* const kStuckStyle = "style=filled, fillcolor=\"#bbbbbb\"";

struct DrawnEdge {
  int from, to;
  std::string op;
  bool finding;
};

// The legend: what a node's number, kind, fill and shape and a red edge mean, and which
// states are drawn.
void write_legend(std::ostream& os, int64_t drawn, int64_t states, int64_t max_states) {
  const std::string which = drawn == states ? fmt::format("all {} states", states)
                                            : fmt::format("{} of {} states: over {}, only the paths from the\\ninitial state "
                                                          "to each finding class's first state",
                                                          drawn, states, max_states);
  os << "subgraph cluster_legend {\nlabel=\"legend\"; fontsize=10; color=\"#888888\";\n"
     << "legend_state [label=\"N\\nkind\"];\n"
     << "legend_root [label=\"initial\\nstate\", shape=doublecircle];\n"
     << "legend_finding [label=\"a finding shows on entering it:\\nSPEC on OP: symptom\", " << kFindingStyle << "];\n"
     << "legend_stuck [label=\"stuck: a hang\\nor a mismatch\", shape=box, " << kStuckStyle << "];\n"
     << "legend_from [shape=point]; legend_to [shape=point];\n"
     << "legend_from -> legend_to [label=\"op showing a finding\", color=red, fontcolor=red];\n"
     << "legend_drawn [shape=box, label="
     << quoted("N: the state's number; kind: S all sharded, U some unsharded,\\n+M merged, +G forward graph pending, "
               "+D adapters disabled\\n" + which)
     << "];\n}\n";
}
}  // namespace

int64_t write_state_dot(std::ostream& os, const ExploreResult& r, int64_t max_states) {
  const StateGraph& g = r.graph;
  const int64_t states = static_cast<int64_t>(boost::num_vertices(g));
  const bool all = states <= max_states;
  std::vector<uint8_t> drawn(static_cast<size_t>(states), all ? 1 : 0);
  std::vector<DrawnEdge> edges;
  if (all) {
    for (auto [e, end] = boost::edges(g); e != end; ++e)
      edges.push_back({static_cast<int>(boost::source(*e, g)), static_cast<int>(boost::target(*e, g)), op_text(r.alphabet[g[*e].op]),
                       g[*e].finding});
  } else {
    // Each class's path: its ops are the class file's after the setup; the last one shows it.
    std::set<std::tuple<int, int, std::string>> seen;
    for (const FindingClass& c : r.classes) {
      for (int v : c.path_states) drawn[static_cast<size_t>(v)] = 1;
      for (size_t i = 0; i + 1 < c.path_states.size(); ++i) {
        const int u = c.path_states[i], v = c.path_states[i + 1];
        const std::string op = op_text(c.file.ops[r.setup.size() + i]);
        if (!seen.insert({u, v, op}).second) continue;
        bool finding = i + 2 == c.path_states.size();
        for (auto [e, end] = boost::out_edges(static_cast<size_t>(u), g); e != end; ++e)
          if (static_cast<int>(boost::target(*e, g)) == v && op_text(r.alphabet[g[*e].op]) == op) finding = finding || g[*e].finding;
        edges.push_back({u, v, op, finding});
      }
    }
  }
  os << "digraph G {\nrankdir=LR;\nnode [shape=circle, fontsize=10];\nedge [fontsize=8];\n";  // paths read left to right
  int64_t count = 0;
  for (int64_t v = 0; v < states; ++v) {
    if (!drawn[static_cast<size_t>(v)]) continue;
    ++count;
    const StateInfo& s = g[static_cast<size_t>(v)];
    std::string label = fmt::format("{}\\n{}", v, s.kind);
    if (auto it = r.state_classes.find(static_cast<int>(v)); it != r.state_classes.end())
      for (uint16_t ci : it->second) {
        const FindingClass& c = r.classes[ci];
        std::string line = fmt::format("{} on {}: {}", c.spec, c.op, c.symptom);
        if (line.size() > 48) line = line.substr(0, 45) + "...";
        label += "\\n" + line;
      }
    os << v << " [label=" << quoted(label);
    if (s.stuck) os << ", " << kStuckStyle;
    else if (s.violating) os << ", " << (v == 0 ? "style=filled, fillcolor=\"#f4a6a6\"" : kFindingStyle);
    if (v == 0) os << ", shape=doublecircle";
    os << "];\n";
  }
  for (const DrawnEdge& e : edges)
    os << e.from << " -> " << e.to << " [label=" << quoted(e.op) << (e.finding ? ", color=red, fontcolor=red" : "") << "];\n";
  write_legend(os, count, states, max_states);
  os << "}\n";
  return count;
}

}  // namespace fsdpsim
