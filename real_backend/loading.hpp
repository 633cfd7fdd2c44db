// accelerate's loading and prepare on the real module (accelerate/accelerator.py::prepare,
// utils/fsdp_utils.py::fsdp2_prepare_model): where each parameter is placed (seed 001: a meta
// tensor where ram-efficient loading leaves no values, a tensor of the parameter's dtype
// elsewhere), the broadcast from rank 0, fully_shard, the optimizer; and the bytes the
// placed shards hold. Same file and class as model/machine/loading.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "real_backend/dtensor.hpp"
#include "real_backend/optimizer.hpp"

namespace fsdpsim::real {

class Accelerator {
 public:
  Accelerator(const Layout& layout, uint64_t seed, Parameters& params, FsdpState& fsdp, DTensor& dtensor, ProcessGroup& pg,
              Optimizer& optimizer)
      : layout_(&layout), seed_(seed), params_(&params), fsdp_(&fsdp), dtensor_(&dtensor), pg_(&pg), optimizer_(&optimizer) {}
  // from_pretrained: every base parameter created and placed (with ram-efficient loading only
  // rank 0 holds values, the others' are on meta).
  void place_base_params();
  // lora/model.py::LoraModel._create_and_replace -> LoraLayer.update_layer per targeted layer,
  // then peft_model.py's _cast_adapter_dtype.
  void place_new_adapter(int adapter, bool load);
  // One layer's share of place_new_adapter (autocast false: the cast is never reached).
  void place_new_adapter_in(int layer, int adapter, bool load, bool autocast = true);
  // peft_model.py::PeftModel.load_adapter of a name already in peft_config: the checkpoint's
  // values copied into the adapter's existing tensors.
  void load_into_adapter(int adapter);
  // accelerate/utils/fsdp_utils.py::fsdp2_prepare_model.
  void prepare();
  // accelerate 1.15 utils/fsdp_utils.py::fsdp2_prepare_model under mixed precision (a
  // `mixed_precision` line): every trainable parameter not in fp32 is upcast in place before fully_shard.
  void upcast_trainable();
  // The shards this rank holds, per owner.
  std::vector<OwnerBytes> sharded_bytes() const;

 private:
  void create_param(int p, const std::vector<float>& full);
  void place_param(int p, bool meta, at::ScalarType dtype);
  void move_adapter_to_device_of_base_layer(int layer, int adapter);

  const Layout* layout_;
  uint64_t seed_;
  Parameters* params_;
  FsdpState* fsdp_;
  DTensor* dtensor_;
  ProcessGroup* pg_;
  Optimizer* optimizer_;
};

}  // namespace fsdpsim::real
