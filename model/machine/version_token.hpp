// Every version and mix encoding of the model, in one place: the constant versions the model
// assigns to a weight (versions are object ids, compared for equality, not counters:
// model/machine/state_key.cpp says how the state key renames them), the delta ids a base weight
// holds, and the mix ids a gather of disagreeing ranks makes. Written once here so the op that
// assigns one, the DTensor port that settles a gather (dtensor.cpp) and the key that must leave
// it fixed agree.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fsdpsim {

// Which delta a base weight holds for an adapter: A's version in bits 32-62, B's
// in bits 0-31 (version::delta_id), bit 63 for the transposed delta a square
// experts layer adds (param_wrapper.cpp). Kept apart so that rows merged from
// different ranks' B can be read back (DTensor::concatenated_u).
using DeltaId = uint64_t;
constexpr DeltaId kZeroDelta = ~DeltaId{0};  // the delta of an adapter whose B is still zero
constexpr DeltaId kTransposedDelta = DeltaId{1} << 63;
constexpr uint32_t kMixedVersion = 0xfffeu;   // LoRA values gathered from ranks that disagree
constexpr uint32_t kNoRows = 0xffffffffu;     // a rank holding only padding rows of a parameter
constexpr uint32_t kRank0Copy = 0x7fff0000u;  // FsdpParam::drift of a replica reloaded from rank 0's drifted copy

}  // namespace fsdpsim

namespace fsdpsim::version {

// B stays exactly zero under init=zero (PEFT's default, peft lora/layer.py::
// LoraLayer.reset_lora_parameters) until an update or a load changes it: B @ A is zero then.
// `zero_init`: the adapter's B starts at zero.
constexpr DeltaId delta_id(bool zero_init, uint32_t ver_a, uint32_t ver_b) {
  if (ver_b == 0 && zero_init) return kZeroDelta;
  return (static_cast<DeltaId>(ver_a & 0x7fffffffu) << 32) | ver_b;
}

// Versions at or above kMixBase name a mix: rows of differing tensors gathered into one.
constexpr uint32_t kMixBase = 0x10000u;
constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

// One version for a parameter whose rows live on several ranks (kNoRows: a rank holding
// padding only): the common version when they agree, else a mix id above 0xffff.
inline uint32_t mix_version(const std::vector<uint32_t>& row_holder_versions) {
  uint32_t first = kNoRows;
  bool same = true;
  uint64_t h = kFnvOffset;
  for (uint32_t x : row_holder_versions) {
    if (x == kNoRows) continue;
    if (first == kNoRows) first = x;
    same = same && x == first;
    h = (h ^ x) * kFnvPrime;
  }
  if (first == kNoRows) return 0;
  if (same) return first;
  return kMixBase + static_cast<uint32_t>(h % 0xfffe0000ull);
}

// A gather slot peer j filled with rows of another packing: its version (`own`, 0 for none)
// marked by the peer and by the parameter it packed (`packed`: its index + 1, 0 for none), so
// two foreign tensors at one version still differ.
constexpr uint32_t foreign_slot(uint32_t own, size_t j, uint32_t packed) {
  return (own ^ static_cast<uint32_t>(j + 1) * 0x9e37u ^ packed * 0x61c9u) & 0xffffu;
}
// A slot of a gather packing several parameters: not one parameter's rows.
constexpr uint32_t packed_slot(uint32_t v, size_t j) { return (v ^ static_cast<uint32_t>(j + 1) * 0x9e37u) & 0xffffu; }
// A mix made of one peer's foreign rows: above 0xffff whatever the slots' versions were.
constexpr uint32_t foreign_mix(uint32_t v) { return v < kMixBase ? kMixBase + (v & 0xffffu) : v; }

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
// A DoRA magnitude at this version still the norm it was made as (dora.py::DoraLinearLayer.update_layer):
// never stepped, or loaded from a checkpoint of the fresh init (kLoaded, whose B is zero too).
constexpr bool magnitude_at_init(uint32_t ver_m) { return ver_m == 0 || ver_m == kLoaded; }
// x may be a foreign_rows value (the key keeps such values raw unless fixed).
constexpr bool maybe_foreign_rows(uint32_t x) { return x >= kForeignRowsBase && x <= kVersionMask; }

}  // namespace fsdpsim::version
