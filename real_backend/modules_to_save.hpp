// PeftModel's modules_to_save on real tensors (peft/utils/other.py::ModulesToSaveWrapper):
// the layer kept as original_module plus one deep copy per adapter, each a leaf in the
// registry like any parameter. Every requires_grad flip lands on whatever object is
// registered now (the unsharded copy U while its group is unsharded, lost at the next
// reshard, as a LoRA flip is). Same file and class as model/machine/modules_to_save.
#pragma once
#include <ATen/ATen.h>

#include "model/vocab/adapter_set.hpp"
#include "real_backend/activation_checkpoint.hpp"
#include "real_backend/fsdp_state.hpp"
#include "real_backend/lora_layer.hpp"

namespace fsdpsim::real {

class ModulesToSaveWrapper {
 public:
  // module: the layer it wraps, whose _disable_adapters it shares.
  ModulesToSaveWrapper(const Layout& layout, int layer, Parameters& params, const FsdpState& fsdp, CheckpointWrapper& ckpt,
                       LoraLayer& module)
      : layout_(&layout), layer_(layer), params_(&params), fsdp_(&fsdp), ckpt_(&ckpt), module_(&module) {}
  void reset();

  bool wrapped = false;  // wrapped yet (some adapter listing it was injected)
  AdapterSet trains;     // its _adapters: the adapters with a copy here
  int copy_active = -1;  // the adapter whose copy runs (-1: `_active_adapter = []`)

  // The adapter's copy is in the wrapper's modules_to_save ModuleDict.
  bool copy_registered(int adapter) const;
  // other.py::_set_trainable on this layer for a newly injected adapter (active: the tuner's
  // active adapters hold it).
  void add(int adapter, bool inference_mode, bool active);
  // other.py::ModulesToSaveWrapper.set_adapter: adapter -1 is set_adapter([]).
  void set_adapter(int adapter, bool inference_mode);
  // other.py::_set_adapter's call on this wrapper (check_set_adapter, then set_adapter).
  void set_adapter_named(AdapterSet names, bool list_form, bool inference_mode);
  // other.py::ModulesToSaveWrapper.enable_adapters.
  void enable_adapters(bool enabled);
  // other.py::AuxiliaryTrainingWrapper.forward.
  at::Tensor forward(const at::Tensor& h);
  // tuners_utils.py::_delete_auxiliary_adapter -> ModulesToSaveWrapper.delete_adapter.
  void delete_adapter(int adapter, AdapterSet new_active);

 private:
  void update(int adapter);  // other.py::ModulesToSaveWrapper.update: the adapter's deep copy
  void set_copy_rg(int adapter, bool rg);
  std::string class_name() const;

  const Layout* layout_;
  int layer_;
  Parameters* params_;
  const FsdpState* fsdp_;
  CheckpointWrapper* ckpt_;
  LoraLayer* module_;
};

}  // namespace fsdpsim::real
