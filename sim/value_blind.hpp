// What the value backends cannot see. They read the stored weight and the
// reloaded adapters off real values; where a delta in play is zero on a rank's
// rows (a B row no step moved), or a reload took in another rank's rows equal
// to this rank's own, the values fit more than one reading. Those backends
// report the other readings (LayerObs::stored_alt / registered_alt,
// Observation::reload_coincident); the model, which tracks what was done rather
// than what it came to, reports one.
#pragma once
#include <vector>

#include "model/vocab/observation.hpp"

namespace fsdpsim {

// `values` with each such field read the model's way where the model's reading is
// one the values fit, so that the model is checked only where the values can tell.
// Observations are matched by (step, rank); unmatched ones are left as they are.
std::vector<Observation> reconcile_value_blind(const std::vector<Observation>& model, std::vector<Observation> values);

}  // namespace fsdpsim
