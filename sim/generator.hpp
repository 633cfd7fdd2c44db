// Seeded generation of valid scenarios and op sequences (swarm-style: each
// sequence draws its own topology, adapters, sharding plan and profile).
#pragma once
#include <cstdint>

#include "model/vocab/seq.hpp"
#include "sim/prng.hpp"

namespace fsdpsim {

struct GenOptions {
  int world = 2;
  int min_ops = 4;
  int max_ops = 14;
  int rank_op_percent = 6;  // chance of an `@R` prefix (world > 1)
};

// Op kinds drawn by weight: x in [0, kOpWeightTotal).
constexpr uint32_t kOpWeightTotal = 103;
OpKind weighted_op_kind(uint32_t x);

Scenario generate_scenario(Prng& rng, const GenOptions& opt);
std::vector<Op> generate_ops(Prng& rng, const Scenario& s, const GenOptions& opt);
SeqFile generate_seq(Prng& rng, const GenOptions& opt);

}  // namespace fsdpsim
