// A canonical key for the state of every rank: two states get the same key
// exactly when the model cannot tell them apart by any future op. The
// explorer (sim/core/explore.cpp) merges states by it.
#pragma once
#include <cstdint>
#include <vector>

#include "model/machine/observer.hpp"

namespace fsdpsim {

// Appends the key words of `ranks` (every rank's view, in rank order, same topology).
void append_state_key(const std::vector<Observer>& ranks, std::vector<uint32_t>& out);

}  // namespace fsdpsim
