// Breadth-first exploration of the model's abstract states: every op of the
// scenario's alphabet applied to every rank from every state reached, states
// merged by their canonical key (model/machine/state_key.hpp plus what the
// spec checks remember), the spec checked on every transition, and for each
// finding class the shortest op sequence that reaches it.
#pragma once
#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "model/vocab/seq.hpp"

namespace fsdpsim {

struct ExploreOptions {
  int depth = 6;              // ops after the setup; 0: until the space is exhausted (or a limit)
  bool rank_ops = false;      // also `@R` variants (rank-divergent: user misuse, not a library bug)
  bool full_alphabet = false;  // every op variant; default: the core alphabet (explore_alphabet)
  std::vector<std::string> only_ops;  // restrict the alphabet to these op texts or op kinds (empty: all)
  // The caps (docs/design/explorer.md "Limits"): the search stops at the first one reached,
  // keeps what it found, and says which (ExploreResult::stopped_by). --depth 0 runs to a cap.
  int64_t max_states = 1000000;  // --max-states
  int64_t max_bytes = 0;      // this process's memory (sim/core/memory_use.hpp); --memory-budget; 0: no limit
  double max_seconds = 0;     // 0: no limit
  std::ostream* progress = nullptr;  // a line per depth level and every ~2 s
};

struct StateInfo {
  int depth = 0;
  bool violating = false;  // some transition into it showed a finding
  bool stuck = false;      // a hang or mismatch: no op runs after it
  std::string kind;        // "S", "U+M", ...: see state_kind in explore.cpp
};
struct TransitionInfo {
  uint16_t op = 0;  // index into ExploreResult::alphabet
  bool finding = false;
};
using StateGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, StateInfo, TransitionInfo>;

struct FindingClass {
  std::string spec, op, symptom;  // the class: spec, op kind, symptom (finding text without step, rank, numbers)
  std::string text;               // the first finding's full text
  SeqFile file;                   // the shortest sequence reaching it (setup ops, then the path)
  int64_t transitions = 0;        // transitions that showed it
  bool replayed = false;          // run_checked(file) shows the class at its last op
  // The states along that sequence: the root, ..., the state its first transition lands in
  // (a self-loop repeats the last; {0} for a class the setup shows). What --svg draws when the
  // whole graph is too large.
  std::vector<int> path_states;
};

struct ExploreResult {
  std::vector<Op> setup;       // the file's ops up to and including an explicit `prepare`
  std::vector<Op> alphabet;
  int64_t states = 0, transitions = 0;
  int depth_reached = 0;       // every state within this many ops was expanded
  bool exhausted = false;      // no new state at the last level: the whole reachable space was seen
  bool limited = false;        // stopped by max_states, max_bytes or max_seconds
  std::string stopped_by;      // when limited: "states", "memory" or "seconds"
  int64_t memory_bytes = 0;    // memory_in_use() at the last check (the peak, as it only grows)
  double seconds = 0;
  double cpu_seconds = 0;      // this process's CPU time for the search (the machine may be shared)
  std::vector<FindingClass> classes;  // in order of discovery (so by length)
  // Per op kind and kind of source state: {transitions ok on every rank, transitions with an error}.
  std::map<std::string, std::map<std::string, std::array<int64_t, 2>>> fired;
  StateGraph graph;            // vertex 0 is the state after the setup
  // Violating state -> the classes (indices into `classes`) shown on transitions into it, at
  // most kClassesPerState: the labels of the red states in --dot/--svg.
  static constexpr size_t kClassesPerState = 3;
  std::map<int, std::vector<uint16_t>> state_classes;
};

// Explores `f`'s scenario (its ops up to an explicit `prepare` are the setup).
ExploreResult explore(const SeqFile& f, const ExploreOptions& opt);

// The alphabet for a scenario, from the vocabulary's ops (model/vocab/op.hpp)
// over its adapters, layers and FSDP modules. full: every variant. Core (the
// default) keeps one op per distinct lifecycle effect: no step or zero_grad
// alone (train_step does both), no per-adapter merge or list-form set_adapter,
// reshard of every module only (state_dict reshards the same way), no
// unshard, load_adapter only where add_adapter is not the same for the model,
// delta_weight on one layer (an experts layer when there is one).
std::vector<Op> explore_alphabet(const Scenario& s, bool rank_ops, bool full = true);

// The canonical words of the state `f`'s ops lead to (every op on every rank):
// what the explorer merges states by. For tests and debugging.
std::vector<uint32_t> explore_state_key(const SeqFile& f);

}  // namespace fsdpsim
