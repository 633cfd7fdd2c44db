#include "sim/core/explore.hpp"

#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/graphviz.hpp>
#include <chrono>
#include <ctime>
#include <fmt/format.h>
#include <algorithm>
#include <iterator>
#include <new>
#include <unordered_map>

#include "model/machine/state_key.hpp"
#include "model/spec/spec_checks.hpp"
#include "model/vocab/table.hpp"
#include "sim/core/memory_use.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim {
namespace {

// Every rank's state key, in rank order, read through the ranks' observers (state_key.hpp).
void append_ranks_key(const Simulator& sim, std::vector<uint32_t>& words) {
  thread_local std::vector<Observer> views;  // a buffer: this runs per explored state
  views.clear();
  for (const RankModel& m : sim.ranks()) views.push_back(m.observer());
  append_state_key(views, words);
}

// A reached state: every rank's model and what the spec checks remember.
struct Node {
  Simulator sim;
  SpecChecker checker;
  int vertex;
};

struct Key {
  uint64_t a, b;
  bool operator==(const Key& o) const { return a == o.a && b == o.b; }
};
struct KeyHash {
  size_t operator()(const Key& k) const { return static_cast<size_t>(k.a ^ (k.b * 0x9e3779b97f4a7c15ull)); }
};

// 128 bits of the canonical words: states are told apart by the words
// themselves up to a collision chance of about n^2 / 2^128.
Key key_of(const std::vector<uint32_t>& words) {
  uint64_t a = 0x243f6a8885a308d3ull, b = 0x13198a2e03707344ull;
  for (uint32_t w : words) {
    a = (a ^ w) * 0x100000001b3ull;
    a ^= a >> 29;
    b = (b + w + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
    b ^= b >> 31;
  }
  return {a, b};
}

// What kind of state an op fires from: groups all sharded (S) or some
// unsharded (U), and whether a layer is merged (M), a forward's graph is
// pending (G), adapters are disabled (D).
std::string state_kind(const RankState& st) {
  bool u = false, m = false;
  for (const auto& g : st.groups) u = u || g.sharded == ShardedState::Unsharded;
  for (const auto& l : st.layers) m = m || l.n_merged > 0;
  std::string k = st.prepared ? (u ? "U" : "S") : "P";
  if (m) k += "+M";
  if (st.graph.valid) k += "+G";
  if (st.disabled) k += "+D";
  return k;
}

// The finding's symptom: its text without the "S1 step 4 rank 0: " head,
// up to the first detail clause, with numbers as '#'.
std::string symptom_of(const std::string& text) {
  size_t start = text.find(": ");
  std::string s = start == std::string::npos ? text : text.substr(start + 2);
  for (const char* cut : {"; ", " ("}) {
    size_t at = s.find(cut);
    if (at != std::string::npos) s.resize(at);
  }
  std::string out;
  for (char c : s) {
    if (c >= '0' && c <= '9') {
      if (out.empty() || out.back() != '#') out += '#';
    } else {
      out += c;
    }
  }
  if (out.size() > 100) out = out.substr(0, 97) + "...";
  return out;
}

bool matches(const Op& op, const std::vector<std::string>& only) {
  if (only.empty()) return true;
  for (const auto& o : only)
    if (o == op_text(op) || o == op_name(op.kind)) return true;
  return false;
}

// Shortest-path tree from the root, by Boost's breadth-first search.
struct PredecessorRecorder : boost::default_bfs_visitor {
  std::vector<StateGraph::edge_descriptor>* pred;
  std::vector<uint8_t>* has_pred;
  template <typename E, typename G>
  void tree_edge(E e, const G& g) const {
    (*pred)[boost::target(e, g)] = e;
    (*has_pred)[boost::target(e, g)] = 1;
  }
};

}  // namespace

std::vector<Op> explore_alphabet(const Scenario& s, bool rank_ops, bool full) {
  std::vector<std::string> lines = {"forward", "eval", "backward", "train_step", "merge", "unmerge"};
  if (full) lines.insert(lines.end(), {"step", "zero_grad"});
  const bool several = s.adapters.size() > 1;
  std::string all;
  for (const auto& a : s.adapters) {
    fmt::format_to(std::back_inserter(all), "{}{}", all.empty() ? "" : ",", a.name);
    if (several && full) lines.push_back("merge " + a.name);
    lines.push_back("set_adapter " + a.name);
  }
  if (several && full) lines.push_back(fmt::format("set_adapter [{}]", all));
  lines.insert(lines.end(), {"disable_enter", "disable_exit"});
  for (const auto& a : s.adapters) {
    if (a.deferred) {
      lines.push_back("add_adapter " + a.name);
      if (full) lines.push_back(fmt::format("load_adapter {} trainable", a.name));
    }
    lines.push_back("delete_adapter " + a.name);
  }
  // Per-rank data: a fresh optimizer takes a late adapter's plain tensors in (beyond-seeds B1).
  if (s.data == Data::PerRank) lines.push_back("new_optimizer");
  lines.push_back("reshard");
  if (full) {
    lines.push_back("unshard");
    for (const auto& d : s.shards) {
      lines.push_back("reshard " + d.modules[0]);
      lines.push_back("unshard " + d.modules[0]);
    }
    lines.push_back("state_dict");
  }
  lines.insert(lines.end(), {"save_optimizer", "load_optimizer", "save_adapters", "load_adapters"});
  std::string probe = s.layers[0].name;
  for (const auto& l : s.layers)
    if (l.experts > 0) probe = l.name;
  for (const auto& l : s.layers)
    if (full || l.name == probe) lines.push_back("delta_weight " + l.name);
  if (rank_ops && s.world > 1) {
    // Ops a user may run on one rank without a collective inside them.
    std::vector<std::string> local = {"merge", "unmerge", "disable_enter", "disable_exit", "zero_grad", "step"};
    for (const auto& a : s.adapters) local.push_back("set_adapter " + a.name);
    for (int r = 0; r < s.world; ++r)
      for (const auto& l : local) lines.push_back(fmt::format("@{} {}", r, l));
  }
  // Parsed against the scenario, so every op is one a .seq file may hold (after a
  // `prepare`, which a scenario with ram-efficient loading needs; it is dropped).
  std::string text = print_scenario(s) + "---\nprepare\n";
  for (const auto& l : lines) text += l + "\n";
  std::vector<Op> ops = parse_seq(text, "<explore alphabet>").ops;
  ops.erase(ops.begin());
  return ops;
}

ExploreResult explore(const SeqFile& f, const ExploreOptions& opt) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const std::clock_t c0 = std::clock();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  ExploreResult res;
  const int pi = prepare_index(f);
  res.setup.assign(f.ops.begin(), pi < 0 ? f.ops.begin() : f.ops.begin() + pi + 1);
  for (const Op& op : explore_alphabet(f.scenario, opt.rank_ops, opt.full_alphabet))
    if (matches(op, opt.only_ops)) res.alphabet.push_back(op);
  SeqFile setup_file{{}, f.scenario, res.setup, {}};
  const Topology topo = compile_topology(setup_file);

  std::unordered_map<Key, int, KeyHash> seen;
  std::map<std::string, size_t> class_index;
  struct FirstSeen {
    int vertex;  // the transition's source (-1: the setup), its op, its target
    uint16_t op;
    int to;
  };
  std::vector<FirstSeen> class_first;
  std::vector<uint32_t> words;
  RunOptions ro;
  ro.hash_observations = false;
  const Key stuck_key{0, 0};

  auto key_for = [&](const Node& n, bool stuck) {
    if (stuck) return stuck_key;  // nothing runs after a hang: every stuck state is the same sink
    words.clear();
    append_ranks_key(n.sim, words);
    n.checker.append_key(words);
    return key_of(words);
  };

  auto note = [&](const Finding& fd, const Op& op, int from_vertex, int alphabet_index, int to_vertex) {
    std::string cls = fd.spec + "|" + op_name(op.kind) + "|" + symptom_of(fd.text);
    auto [ci, fresh] = class_index.emplace(cls, res.classes.size());
    if (fresh) {
      FindingClass c;
      c.spec = fd.spec;
      c.op = op_name(op.kind);
      c.symptom = symptom_of(fd.text);
      c.text = fd.text;
      res.classes.push_back(c);
      class_first.push_back({from_vertex, static_cast<uint16_t>(alphabet_index), to_vertex});
    }
    ++res.classes[ci->second].transitions;
    std::vector<uint16_t>& labels = res.state_classes[to_vertex];
    const auto cls_index = static_cast<uint16_t>(ci->second);
    if (labels.size() < ExploreResult::kClassesPerState && std::find(labels.begin(), labels.end(), cls_index) == labels.end())
      labels.push_back(cls_index);
  };

  // The root: the state after the setup ops (findings there are classes of length 0).
  std::vector<Node> frontier;
  {
    Node root{Simulator(topo), SpecChecker(f.scenario), 0};
    RunResult r = root.sim.run(res.setup, ro);
    std::vector<Finding> findings;
    size_t i = 0;
    while (i < r.observations.size()) {
      size_t j = i;
      while (j < r.observations.size() && r.observations[j].step == r.observations[i].step) ++j;
      root.checker.step(res.setup[r.observations[i].step - 1], r.observations.data() + i, j - i, findings);
      i = j;
    }
    for (const Finding& fd : findings) note(fd, res.setup[fd.step - 1], -1, 0, 0);
    StateInfo info;
    info.stuck = r.hang || r.mismatch;
    info.violating = !findings.empty();
    info.kind = state_kind(root.sim.ranks()[0].state());
    boost::add_vertex(info, res.graph);
    seen[key_for(root, info.stuck)] = 0;
    if (!info.stuck) frontier.push_back(std::move(root));
  }

  double last_progress = 0;
  int level = 0;
  auto stop = [&](const char* why) {
    res.limited = true;
    res.stopped_by = why;
  };
  for (; !frontier.empty() && (opt.depth <= 0 || level < opt.depth) && !res.limited; ++level) {
    std::vector<Node> next;
    try {  // an allocation refused (a `ulimit -v` under the budget) is the memory cap too: `next` goes here
      next.reserve(std::min<size_t>(frontier.size() * 4, 65536));
      const int step = static_cast<int>(res.setup.size()) + level + 1;
      for (const Node& u : frontier) {
        const std::string from_kind = res.graph[u.vertex].kind;
        for (size_t a = 0; a < res.alphabet.size(); ++a) {
          const Op& op = res.alphabet[a];
          Node n{u.sim, u.checker, -1};
          RunResult r = n.sim.run_more({op}, step - 1, ro);
          std::vector<Finding> findings;
          n.checker.step(op, r.observations.data(), r.observations.size(), findings);
          ++res.transitions;
          bool error = false;
          for (const auto& o : r.observations) error = error || o.status != Status::Ok;
          ++res.fired[op_name(op.kind)][from_kind][error ? 1 : 0];
          const bool stuck = r.hang || r.mismatch;
          const Key k = key_for(n, stuck);
          auto it = seen.find(k);
          int v;
          if (it == seen.end()) {
            StateInfo info;
            info.depth = level + 1;
            info.stuck = stuck;
            info.kind = stuck ? "stuck" : state_kind(n.sim.ranks()[0].state());
            v = static_cast<int>(boost::add_vertex(info, res.graph));
            seen.emplace(k, v);
            if (!stuck) {
              n.vertex = v;
              next.push_back(std::move(n));
            }
          } else {
            v = it->second;
          }
          if (!findings.empty()) res.graph[v].violating = true;
          if (v != u.vertex) boost::add_edge(u.vertex, v, TransitionInfo{static_cast<uint16_t>(a), !findings.empty()}, res.graph);
          for (const Finding& fd : findings) note(fd, op, u.vertex, static_cast<int>(a), v);
          if ((res.transitions & 1023) == 0) {
            const double t = elapsed();
            res.memory_bytes = memory_in_use();
            if (opt.max_seconds > 0 && t > opt.max_seconds) stop("seconds");
            else if (static_cast<int64_t>(boost::num_vertices(res.graph)) > opt.max_states) stop("states");
            else if (opt.max_bytes > 0 && res.memory_bytes > opt.max_bytes) stop("memory");
            if (opt.progress && t - last_progress > 2) {
              last_progress = t;
              *opt.progress << "explore: depth " << level + 1 << ", " << boost::num_vertices(res.graph) << " states, "
                            << res.transitions << " transitions, " << static_cast<int64_t>(boost::num_vertices(res.graph) / t)
                            << " states/s\n";
            }
          }
          if (res.limited) break;
        }
        if (res.limited) break;
      }
    } catch (const std::bad_alloc&) {
      stop("memory");
    }
    if (res.limited) break;
    res.depth_reached = level + 1;
    if (opt.progress)
      *opt.progress << "explore: depth " << level + 1 << " done: " << boost::num_vertices(res.graph) << " states, "
                    << res.transitions << " transitions, frontier " << next.size() << "\n";
    frontier = std::move(next);
  }
  res.exhausted = frontier.empty() && !res.limited;
  res.states = static_cast<int64_t>(boost::num_vertices(res.graph));
  res.seconds = elapsed();
  res.cpu_seconds = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;

  // The shortest sequence of each class: Boost's BFS tree from the root, then the class's op.
  const size_t nv = boost::num_vertices(res.graph);
  std::vector<StateGraph::edge_descriptor> pred(nv);
  std::vector<uint8_t> has_pred(nv, 0);
  PredecessorRecorder vis;
  vis.pred = &pred;
  vis.has_pred = &has_pred;
  boost::breadth_first_search(res.graph, boost::vertex(0, res.graph), boost::visitor(vis));
  for (size_t c = 0; c < res.classes.size(); ++c) {
    std::vector<Op> path;  // empty for a class the setup itself shows
    FindingClass& fc = res.classes[c];
    fc.path_states = {class_first[c].to};
    if (class_first[c].vertex >= 0) {
      path.push_back(res.alphabet[class_first[c].op]);
      fc.path_states.insert(fc.path_states.begin(), class_first[c].vertex);
      for (auto v = static_cast<size_t>(class_first[c].vertex); v != 0 && has_pred[v]; v = boost::source(pred[v], res.graph)) {
        path.insert(path.begin(), res.alphabet[res.graph[pred[v]].op]);
        fc.path_states.insert(fc.path_states.begin(), static_cast<int>(boost::source(pred[v], res.graph)));
      }
    }
    fc.file.scenario = f.scenario;
    fc.file.comments = {fmt::format("explore: shortest sequence reaching {} on {}: {}", fc.spec, fc.op, fc.symptom),
                        fmt::format("signature {}:{}:{}", fc.spec, fc.op, fc.symptom), fc.text};
    fc.file.ops = res.setup;
    fc.file.ops.insert(fc.file.ops.end(), path.begin(), path.end());
    // Replayed from scratch: the class must show at the last op of a whole run.
    const int last = static_cast<int>(fc.file.ops.size());
    for (const Finding& fd : run_checked(fc.file).findings)
      if ((fd.step == last || path.empty()) && fd.spec == fc.spec && symptom_of(fd.text) == fc.symptom) fc.replayed = true;
  }
  return res;
}

std::vector<uint32_t> explore_state_key(const SeqFile& f) {
  const int pi = prepare_index(f);
  SeqFile setup{{}, f.scenario, std::vector<Op>(f.ops.begin(), pi < 0 ? f.ops.begin() : f.ops.begin() + pi + 1), {}};
  const Topology topo = compile_topology(setup);
  Simulator sim(topo);
  SpecChecker checker(f.scenario);
  RunOptions ro;
  ro.hash_observations = false;
  std::vector<Finding> findings;
  // One op at a time, as the explorer steps.
  for (size_t i = 0; i < f.ops.size(); ++i) {
    RunResult r = i == 0 ? sim.run({f.ops[0]}, ro) : sim.run_more({f.ops[i]}, static_cast<int>(i), ro);
    checker.step(f.ops[i], r.observations.data(), r.observations.size(), findings);
  }
  std::vector<uint32_t> words;
  append_ranks_key(sim, words);
  checker.append_key(words);
  return words;
}

}  // namespace fsdpsim
