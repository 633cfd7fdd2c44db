// What one op left on one rank beside its state: the raised status and message and the
// fields the observation reports about the op itself (RankModel::apply fills it; the
// Observer reads it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/vocab/adapter_order.hpp"
#include "model/vocab/adapter_set.hpp"
#include "model/vocab/observation.hpp"

namespace fsdpsim {

struct OpResult {
  Status status = Status::Ok;
  std::string message;
  int64_t index = -1;       // key_error: optimizer index
  int opt_missing = 0;      // save/load_optimizer: optimizer params not registered
  bool has_grads = false;   // training op reached the gradient stage
  AdapterSet grads;         // adapters whose shard received a gradient
  AdapterOrder deltas;      // delta_weight: adapters whose delta was computed, in the order computed
  AdapterSet corrupt_deltas;  // ... from one rank's rows (not the full A and B)
  std::vector<int> reload_diff;  // load_adapters: params whose values differ from this rank's at save time
};

}  // namespace fsdpsim
