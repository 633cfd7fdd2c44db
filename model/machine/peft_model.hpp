// PeftModel and its BaseTuner on one rank (peft/peft_model.py, peft/tuners/tuners_utils.py): the
// adapters' configs and active ones (PeftConfig), the tuner's LoRA layers and modules_to_save
// wrappers, the adapter checkpoint rank 0 writes (AdapterFile); the ops, named after the upstream
// methods (peft_model.cpp). The order of reshards, unmerges and flips is what the profile's
// switches choose. Built on the fly over a PeftPort; it reaches the layers through their
// LayerPort, FSDP through FsdpState, placement through Accelerator and gathers through the
// DTensor port. Same file and class as real_backend/peft_model.
#pragma once
#include <cstdint>
#include <vector>

#include "model/machine/dtensor.hpp"
#include "model/machine/fsdp_state.hpp"
#include "model/machine/loading.hpp"
#include "model/machine/lora_layer.hpp"
#include "model/machine/modules_to_save.hpp"
#include "model/machine/provenance.hpp"
#include "model/machine/rank_state.hpp"
#include "model/vocab/op.hpp"

namespace fsdpsim {

// What PeftModel reaches on one rank: its own bookkeeping and checkpoint, the module tree's
// pieces (parameters, groups, layers, the prepared flag, the pending graph's grads), the op's
// corrupt deltas (a delta read that is not the layer's delta), and the concept classes it calls.
struct PeftPort {
  const Topology& topo;
  int rank;
  PeftConfig& config;
  AdapterFile& file;
  std::vector<FsdpParam>& params;
  const std::vector<FsdpParamGroup>& groups;
  std::vector<LoraLayer>& layers;
  bool& prepared;
  std::vector<uint8_t>& graph_grad;
  AdapterSet& corrupt_deltas;
  FsdpState fsdp;
  Accelerator accelerator;
  DTensor dtensor;
  Provenance* prov;
};

class PeftModel {
 public:
  explicit PeftModel(const PeftPort& port) : p_(port) {}
  // get_peft_model + add_adapter for each declared adapter (before prepare).
  void get_peft_model();

  // --- the ops (peft_model.py::PeftModel and tuners_utils.py::BaseTuner) ---
  [[nodiscard]] Raise set_adapter(const Op& op);
  [[nodiscard]] Raise merge(const Op& op);
  [[nodiscard]] Raise unmerge_adapter();
  [[nodiscard]] Raise disable_enter();
  [[nodiscard]] Raise disable_exit();
  [[nodiscard]] Raise add_adapter(int adapter, bool inference_mode, bool load, bool trainable);
  [[nodiscard]] Raise delete_adapter(int adapter);
  // deltas: the adapters whose delta was computed, in order.
  [[nodiscard]] Raise delta_weight(int layer, AdapterOrder* deltas);
  [[nodiscard]] Raise save_adapters(const Op& op);
  // rank0_file_missing: rank 0 never wrote the file this load reads; reload_diff: the
  // parameters whose values differ from this rank's at save time.
  [[nodiscard]] Raise load_adapters(bool rank0_file_missing, std::vector<int>* reload_diff);

 private:
  [[nodiscard]] Raise inject_adapter(int adapter, bool inference_mode, bool first);
  [[nodiscard]] Raise load_into_existing(int adapter);
  [[nodiscard]] Raise load_state_dict_hooks();
  void roll_back_injection(int adapter, const std::vector<std::pair<int, bool>>& before);
  [[nodiscard]] Raise set_adapter_module_level(AdapterSet names, bool list_form, bool inference_mode);
  [[nodiscard]] Raise active_without_config() const;  // KeyError for a tuner-active name without a config
  bool any_merged() const;
  void reshard_groups_without_merged();
  bool tuner_flags_reshard() const;
  int64_t own_rows(int param) const;
  LayerParams layer_params(int layer) const;
  LayerPort layer_port(int layer) const;
  ModulesToSaveWrapper modules_to_save(int layer) const;
  bool registered_rg(int param) const { return p_.params[param].registered_rg(p_.dtensor.is_registered_u(param)); }
  Raise raise(Status s, std::string msg) const;
  ScopeSite site() const { return {p_.prov, &p_.params, &p_.layers}; }
  AdapterSet adapters_named(const std::vector<std::string>& names) const { return AdapterSet::named(p_.topo.adapters, names); }

  PeftPort p_;
};

// Rows of parameter p in the adapter state dict `rank` computes: get_peft_model_state_dict reads
// model.state_dict(), whose FSDP2 values are DTensors it does not gather (adapter_save_gather
// off), so a managed parameter contributes its local rows.
int64_t saved_rows(const Topology& topo, const std::vector<FsdpParam>& params, int p, int rank);

}  // namespace fsdpsim
