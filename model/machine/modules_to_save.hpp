// PEFT's ModulesToSaveWrapper on one layer (peft/utils/other.py): the layer kept as
// original_module plus a whole trainable copy per adapter; which copy runs, and its
// requires_grad flips, which land on whatever object FSDP has registered (a flip on the
// unsharded copy is lost at the next reshard, as seed 000's is). Its state is the layer's
// (LoraLayer's wrapper fields, so the rank's state stays one plain value); it is built on the fly
// over it and the layer's parameters (LayerParams; modules_to_save.cpp). Same file and class as
// real_backend/modules_to_save.
#pragma once
#include "model/machine/lora_layer.hpp"

namespace fsdpsim {

class ModulesToSaveWrapper {
 public:
  // own: the wrapped layer's parameters; prov: where a raise is noted (null: nowhere); module: its state.
  ModulesToSaveWrapper(const LayerParams& own, Provenance* prov, LoraLayer& module) : own_(own), prov_(prov), module_(module) {}
  // other.py::_set_trainable on this layer for a newly injected adapter (`active`: the tuner's
  // active adapters hold it): a new wrapper, or one more copy (ModulesToSaveWrapper.update).
  void add(int adapter, bool inference_mode, bool active);
  // other.py::ModulesToSaveWrapper.set_adapter: adapter -1 is set_adapter([]).
  void set_adapter(int adapter, bool inference_mode);
  // other.py::_set_adapter's call on this wrapper (check_set_adapter, then set_adapter).
  [[nodiscard]] Raise set_adapter_named(AdapterSet names, bool list_form, bool inference_mode);
  // other.py::ModulesToSaveWrapper.enable_adapters.
  void enable_adapters(bool enabled);
  // tuners_utils.py::_delete_auxiliary_adapter -> ModulesToSaveWrapper.delete_adapter.
  [[nodiscard]] Raise delete_adapter(int adapter, AdapterSet new_active);

 private:
  void set_copy_rg(int adapter, bool rg);
  const char* class_name() const;

  LayerParams own_;
  Provenance* prov_;
  LoraLayer& module_;
};

}  // namespace fsdpsim
