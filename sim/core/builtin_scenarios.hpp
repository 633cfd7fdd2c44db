// The built-in scenarios: named models that together cover the five seeds'
// lifecycles (corpus/regressions/seed00N_*.seq) and a few shapes beyond them
// (experts layers, ram-efficient loading, bf16, reshard_after_forward=false
// groups, an adapter added after fully_shard, three ranks). The explorer and
// the hunt start from these; `fsdpsim explore --builtin NAME` picks one.
#pragma once
#include <string>
#include <vector>

#include "model/vocab/seq.hpp"

namespace fsdpsim {

struct BuiltinScenario {
  std::string name;         // "seed000_merged_raf_false"
  std::string description;  // one line
  // The scenario, and the seed's op sequence where it has one (empty for the
  // scenarios beyond the seeds): replaying it reproduces the seed's finding.
  SeqFile file;
};

// Parsed once; the order is the listing order (seeds first).
const std::vector<BuiltinScenario>& builtin_scenarios();
// nullptr when no built-in scenario has that name.
const BuiltinScenario* find_builtin(const std::string& name);
// "a, b, c": the names, for usage and error messages.
std::string builtin_names();

}  // namespace fsdpsim
