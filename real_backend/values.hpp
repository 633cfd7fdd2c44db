// Deterministic initial values: every rank (thread or process) and the
// observer derive the same full tensors from the scenario seed, so no rank
// needs another's to start, and W0 is known to whoever classifies weights.
#pragma once
#include <cstdint>
#include <vector>

#include "real_backend/layout.hpp"

namespace fsdpsim::real {

// Full (rows x cols, row-major) initial values of one parameter. `loaded`
// gives the values a load_adapter reads from disk (different from a fresh init).
std::vector<float> initial_values(const Layout& l, uint64_t seed, int param, bool loaded = false);
// This rank's batch: 3 rows of the first layer's input.
std::vector<float> rank_input(const Layout& l, uint64_t seed, int rank);
// A DoRA magnitude's initial values (one per output row of its layer).
std::vector<float> dora_magnitude(const Layout& l, uint64_t seed, int param, bool loaded);
float lora_scaling(const Layout& l, int adapter);  // alpha / r

}  // namespace fsdpsim::real
