// The constant version values the model assigns to a weight (versions are object ids, compared
// for equality, not counters: model/machine/state_key.cpp says how the state key renames them).
// Written once here so the op that assigns one and the key that must leave it fixed agree.
#pragma once
#include <cstdint>

namespace fsdpsim::version {

// A deferred adapter's A or B loaded from its checkpoint (peft peft_model.py::PeftModel.load_adapter):
// values that differ from any fresh init.
constexpr uint32_t kLoaded = 0x100u;

// load_adapters on a sharded parameter whose saved tensor is rank 0's whole shard: torch
// nn/modules/module.py::Module.load_state_dict wraps rank 0's rows as every rank's shard, so a
// rank r > 0 holds values no rank held before. Encoded as saved + 0x8000 + r, in 16 bits.
constexpr uint32_t kForeignRowsBase = 0x8000u;
constexpr uint32_t kVersionMask = 0xffffu;
constexpr uint32_t foreign_rows(uint32_t saved, int rank) {
  return (saved + kForeignRowsBase + static_cast<uint32_t>(rank)) & kVersionMask;
}
// x may be a foreign_rows value (the key keeps such values raw unless fixed).
constexpr bool maybe_foreign_rows(uint32_t x) { return x >= kForeignRowsBase && x <= kVersionMask; }

}  // namespace fsdpsim::version
