// The explorer's report (sim/core/explore.hpp's ExploreResult): the figures, the op
// table and the classes as text, and the Graphviz picture of the state graph.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

#include "sim/core/explore.hpp"

namespace fsdpsim {

// Why a limited search stopped: "stopped at the memory budget (2.1 GB in use; --memory-budget)".
std::string stop_text(const ExploreResult& r);
// The report: figures, the op table, the classes with their sequences.
void print_explore(std::ostream& os, const ExploreResult& r, bool with_sequences);
// Graphviz: edges labelled by op, violating states filled red and labelled with their
// finding classes, stuck ones grey, and a legend. Over max_states states, only the states on
// each class's path (FindingClass::path_states) are drawn. Returns the states drawn.
constexpr int64_t kMaxDrawnStates = 3000;  // past this a Graphviz layout is neither readable nor quick
int64_t write_state_dot(std::ostream& os, const ExploreResult& r, int64_t max_states = kMaxDrawnStates);

}  // namespace fsdpsim
