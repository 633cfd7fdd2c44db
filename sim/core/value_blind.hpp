// What the value backends cannot see. They read the stored weight and the
// reloaded adapters off real values; where a delta in play is zero on a rank's
// rows (a B row no step moved), or a reload took in another rank's rows equal
// to this rank's own, or an unreduced step left replicas equal on every rank, the
// values fit more than one reading. Those backends report the other readings
// (LayerObs::stored_alt / registered_alt, Observation::reload_coincident,
// replica_coincident); the model, which tracks what was done rather
// than what it came to, reports one.
#pragma once
#include <string>
#include <vector>

#include "model/vocab/observation.hpp"

namespace fsdpsim {

// `values` with each such field read the model's way where the model's reading is
// one the values fit, so that the model is checked only where the values can tell.
// Observations are matched by (step, rank); unmatched ones are left as they are.
std::vector<Observation> reconcile_value_blind(const std::vector<Observation>& model, std::vector<Observation> values);

// A value backend's `unjudged` classes (stored, registered, delta: its values cannot settle
// them) each take the model's reading, so that no divergence and no finding follows from them,
// and each is named in the returned notes ("step 3 rank 1 (merge): lin0 stored unjudged (model:
// corrupt)"), which the comparison counts apart: never as agreement.
std::vector<std::string> settle_unjudged(const std::vector<Observation>& model, std::vector<Observation>* values);

}  // namespace fsdpsim
