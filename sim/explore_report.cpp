// The explorer's report (figures, op table, classes) and its Graphviz output.
// Boost's write_graphviz trips GCC's -Wmaybe-uninitialized on its own edge iterator.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/graph/graphviz.hpp>
#include <fmt/format.h>
#include <set>

#include "model/vocab/table.hpp"
#include "sim/explore.hpp"

namespace fsdpsim {

void print_explore(std::ostream& os, const ExploreResult& r, bool with_sequences) {
  const char* ended = r.exhausted ? "exhausted (no new state)" : r.limited ? "stopped by a limit" : "complete to that depth";
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
}  // namespace

void write_state_dot(std::ostream& os, const ExploreResult& r) {
  const StateGraph& g = r.graph;
  auto vertex_writer = [&](std::ostream& out, StateGraph::vertex_descriptor v) {
    const StateInfo& s = g[v];
    out << "[label=" << quoted(fmt::format("{}\\n{}", v, s.kind));
    if (s.stuck) out << ", style=filled, fillcolor=\"#bbbbbb\"";
    else if (s.violating) out << ", style=filled, fillcolor=\"#f4a6a6\"";
    if (v == 0) out << ", shape=doublecircle";
    out << "]";
  };
  auto edge_writer = [&](std::ostream& out, StateGraph::edge_descriptor e) {
    const TransitionInfo& t = g[e];
    out << "[label=" << quoted(op_text(r.alphabet[t.op])) << (t.finding ? ", color=red, fontcolor=red" : "") << "]";
  };
  auto graph_writer = [](std::ostream& out) { out << "node [shape=circle, fontsize=10];\nedge [fontsize=8];\n"; };
  boost::write_graphviz(os, g, vertex_writer, edge_writer, graph_writer);
}

}  // namespace fsdpsim
