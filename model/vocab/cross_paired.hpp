// A completed cross-paired collective: gloo paired the n-th collective of every rank by op, size
// and dtype alone, and at least one rank packed another group or other parameters, so each rank
// went on with peers' bytes of another tensor (silent corruption). The op's status stays what it
// was; an op that ends `ok` carries the first such pairing as its message, which S5 reports.
// Kept apart from observation.hpp, which nearly every file includes.
#pragma once
#include <string>
#include <vector>

#include "model/vocab/observation.hpp"

namespace fsdpsim {

// The message's first words; the upstream pool (pool.py::CROSS_PAIRED) writes the same.
extern const char* const kCrossPaired;

// "cross-paired: rank 0 in all_gather(lin0, 64) of lin0.base,... at step 1; rank 1 in
// all_gather(lin1, 64) of lin1.base,... at step 2": every rank's collective and what it packed.
std::string describe_cross_paired(const std::vector<PendingCollective>& heads);

// An op that ran to its end after one of its collectives was cross-paired.
bool is_cross_paired(const Observation& o);

}  // namespace fsdpsim
