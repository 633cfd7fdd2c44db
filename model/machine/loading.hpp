// accelerate's loading and prepare on one rank (accelerate/accelerator.py::prepare,
// utils/fsdp_utils.py::fsdp2_prepare_model): where each parameter is placed (devices, dtypes:
// a meta tensor where ram-efficient loading leaves no values), a new adapter's placement, the
// prepare op with its broadcasts from rank 0 and the optimizer it points at the shards; and the
// bytes the placed shards hold (loading.cpp). Built on the fly over this rank's parameters, the
// prepared flag and the op's CollectiveLog. Same file and class as real_backend/loading.
#pragma once
#include <vector>

#include "model/machine/collective_log.hpp"
#include "model/machine/fsdp_param.hpp"
#include "model/machine/fsdp_param_group.hpp"
#include "model/machine/optimizer.hpp"
#include "model/machine/rank_state.hpp"
#include "model/machine/topology.hpp"
#include "model/vocab/observation.hpp"

namespace fsdpsim {

class Accelerator {
 public:
  // `groups`: the FSDP groups, to read which copy of a base weight is registered (none: the shards).
  Accelerator(const Topology& topo, int rank, std::vector<FsdpParam>& params, bool& prepared, CollectiveLog& log,
              const std::vector<FsdpParamGroup>* groups = nullptr)
      : topo_(topo), rank_(rank), params_(params), prepared_(prepared), log_(log), groups_(groups) {}
  // transformers' from_pretrained under accelerate's fsdp_cpu_ram_efficient_loading: every base
  // parameter placed (only rank 0 holds values, the others' are on meta).
  void place_base_params();
  // tuners_utils.py::BaseTunerLayer._move_adapter_to_device_of_base_layer, then
  // BaseTuner._cast_adapter_dtype (autocast false: the injection raised before it).
  void place_new_adapter(int adapter, bool autocast = true);
  // accelerate/utils/fsdp_utils.py::fsdp2_prepare_model, then accelerator.py::_prepare_fsdp2's
  // optimizer switch (`port`: the optimizer's view of the parameters).
  void prepare(Optimizer& optimizer, const OptimizerPort& port);
  // accelerate 1.15 utils/fsdp_utils.py::fsdp2_prepare_model under mixed precision: every trainable
  // parameter not in fp32 is upcast in place before fully_shard.
  void upcast_trainable();

 private:
  bool default_placement() const;

  const Topology& topo_;
  int rank_;
  std::vector<FsdpParam>& params_;
  bool& prepared_;
  CollectiveLog& log_;
  const std::vector<FsdpParamGroup>* groups_;
};

}  // namespace fsdpsim
