// A ParamWrapper target (peft/tuners/lora/layer.py::ParamWrapper: LoRA on an nn.Parameter of E
// experts): the LoraLayer bookkeeping is the layer's; what differs is its get_delta_weight (an
// einsum over the experts, which DTensor redistributes in its own ways) and its forward (a
// parametrization of the weight). param_wrapper.cpp.
#pragma once
#include <string>

#include "model/machine/lora_layer.hpp"

namespace fsdpsim {

// Where LoraLayer::get_delta_weight found A and B: shards of a managed group (the read is a
// DTensor one), an adapter added after prepare meeting W's shard with a delta laid out like W,
// where a merge's gathered delta lands, whether delta_weight_gather (the #3102 fix) is on, and
// where the delta_weight op notes a delta that is not the layer's (null: not that op).
struct DeltaRead {
  bool sharded_read;
  bool late_distributed;
  CollRecord::Into into;
  bool gather_fix;
  AdapterSet* corrupt_deltas;
};

struct ParamWrapper {
  // lora/layer.py::ParamWrapper.get_delta_weight on layer c.own.layer (sign as LoraLayer's).
  [[nodiscard]] static Raise get_delta_weight(LoraLayer& layer, const LayerPort& c, int adapter, int sign,
                                              const DeltaRead& read);
  // lora/layer.py::ParamWrapper.forward -> _activate_lora, for a wrapper made after fully_shard.
  [[nodiscard]] static Raise forward(const LoraLayer& layer, const LayerPort& c);
  // W (1, in, out) + delta (out, in) of an E == 1 wrapper: torch's broadcasting error ("" when
  // the shapes broadcast); `dtensor`: the add meets a DTensor.
  static std::string one_expert_add_error(const LayerPort& c, int adapter, bool dtensor);
};

}  // namespace fsdpsim
