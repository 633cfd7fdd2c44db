// An exception upstream raises inside an op, and the per-op outcome the classes
// fill: shared by every class of this folder (the model's twin is
// model/machine/op_raised.hpp, which this folder may not include: it uses model/vocab only).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/vocab/adapter_set.hpp"
#include "real_backend/rank_report.hpp"

namespace fsdpsim::real {

// An exception upstream raises inside an op (a libtorch error's first line):
// the op stops where Python's would, and RealRank::apply reports it. This backend's one
// way to raise: a thrown OpError in the model's OpRaised shape, never a flag
// set and returned through. A throw and not the model's Raise value, because
// some raises happen inside libtorch autograd hooks (post_backward, a
// checkpoint's recompute), out of which only an exception gets through
// loss.backward(). Only RealRank::apply catches it for good; a catch elsewhere undoes
// what upstream undoes (add_adapter's config) and rethrows.
class OpError : public std::runtime_error {
 public:
  OpError(Status s, const std::string& msg) : std::runtime_error(msg), status(s), message(msg) {}
  Status status;
  std::string message;
};

// What one op did beside the state it left, as the model's OpResult
// (model/machine/rank_model.hpp): RealRank::apply starts it afresh, the classes' transitions
// fill it, RealRank::report reads it into the RankReport.
struct OpResult {
  Status status = Status::Ok;
  std::string message;
  int64_t index = -1;  // key_error: the first optimizer index no module holds
  AdapterSet grads;  // adapters whose shard received a gradient
  std::vector<DeltaObs> deltas;  // delta_weight: per active adapter (its class: the observer's)
  int delta_layer = -1;          // ... its layer, and per entry of deltas the value get_delta_weight returned
  std::vector<DeltaValue> delta_values;
  std::vector<SavedObs> saved;                      // save_adapters: the tensors rank 0's file holds
  std::vector<std::string> reload_diff;             // load_adapters: values that differ from the save
  std::vector<std::string> reload_coincident;       // ... reloaded from another rank's equal rows
};

}  // namespace fsdpsim::real
