// What the generator draws of the vocabulary: the features a `.seq` file can say (every scenario
// directive and adapter, layer and fully_shard option the parser knows, each value of the
// enumerated ones, every op kind and op form), which of them a file holds, and the counts of
// features and feature pairs over many generated sequences (`fsdpsim coverage`).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/vocab/seq.hpp"
#include "sim/core/generator.hpp"

namespace fsdpsim {

struct Feature {
  std::string name;       // as the .seq text says it: "dtype bf16", "adapter deferred", "op merge", "@R op"
  std::string directive;  // the line it lives on (a directive, or "op")
  std::string key;        // the option ("" for the directive's own value)
  bool one_value = false;  // a directive given once: two of its values never meet in one file
  bool always = false;     // every file has it (world, seed, layer sizes, r, ...): not paired
  // Why `--draw all` does not draw it ("" when it does): `coverage` lists it apart, not as a gap,
  // unless its draw is all2, which draws it.
  std::string undrawn;
};

// Built from the vocabulary's own lists: directive_names(), adapter_option_names(), the profile
// and switch tables, the op kinds (FSDPSIM_OPS) and the enums' value names.
const std::vector<Feature>& vocab_features();
// What `fsdpsim coverage` draws unless told: the whole vocabulary (`--draw all`), with the opt-in
// capabilities (a mixed_precision policy, DoRA adapters) each in a third of the sequences.
constexpr const char* kCoverageDraw = "all,mixed_precision=33,dora=33,qlora=33";
// Which features the file holds, indexed as vocab_features().
std::vector<bool> features_of(const SeqFile& f);
// Two features may meet in one file as far as the grammar goes (not two values of a one-value
// directive); whether the parser's checks accept them together is decided by drawing.
bool grammar_allows(const Feature& a, const Feature& b);

struct Coverage {
  int world = 0;
  int sequences = 0;
  std::vector<int64_t> feature;           // per feature
  std::vector<std::vector<int64_t>> pair;  // [i][j], i < j
  void add(const std::vector<bool>& held);
};

// `count` sequences generated at `world` from seeds seed..seed+count-1.
Coverage measure_coverage(uint64_t seed, int count, const GenOptions& opt);

// A pair (or one feature when b < 0) never drawn: is there a file with both that the parser
// accepts? Forced draws (GenOptions::force) over `tries` seeds. Returns "" when one was found,
// else the parser's last refusal ("never realised" when every forced draw missed a feature).
std::string forced_witness(int a, int b, const GenOptions& opt, int tries, SeqFile* found);

}  // namespace fsdpsim
