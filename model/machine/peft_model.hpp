// PeftModel and its BaseTuner on one rank (peft/peft_model.py, peft/tuners/tuners_utils.py): the
// adapters' configs and active ones (PeftConfig), the tuner's LoRA layers and modules_to_save
// wrappers, the adapter checkpoint rank 0 writes (AdapterFile); the ops, named after the upstream
// methods (peft_model.cpp; the adapter checkpoints' save_and_load.cpp). The order of reshards,
// unmerges and flips is what the profile's switches choose. Built on the fly over a PeftPort; it
// reaches the layers through their LayerPort, FSDP through FsdpState, placement through
// Accelerator and gathers through the DTensor port. Same file and class as real_backend/peft_model.
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

// The module tree PeftModel's ops walk on one rank: the parameters, the tuner's LoRA layers and
// whether fully_shard ran. Which object each parameter registers now is the DTensor port's
// question, the groups are FsdpState's.
struct PeftModules {
  const Topology& topo;
  std::vector<FsdpParam>& params;
  std::vector<LoraLayer>& layers;
  const bool& prepared;
};

// What PeftModel reaches on one rank: its own bookkeeping and checkpoint, the module tree, the
// concept classes it calls (the rank is the DTensor port's) and where a raise is noted. What else
// one op reads or writes is its argument (add_adapter's pending autograd graph, delta_weight's
// corrupt deltas).
struct PeftPort {
  PeftConfig& config;
  AdapterFile& file;
  PeftModules tree;
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
  [[nodiscard]] Raise merge_and_unload();
  [[nodiscard]] Raise disable_enter();
  [[nodiscard]] Raise disable_exit();
  // graph_grad: the pending autograd graph's grads (a recreated parameter gets none).
  [[nodiscard]] Raise add_adapter(int adapter, bool inference_mode, bool load, bool trainable, std::vector<uint8_t>& graph_grad);
  [[nodiscard]] Raise delete_adapter(int adapter);
  // deltas: the adapters whose delta was computed, in order; corrupt_deltas: those whose read
  // is not the adapter's delta.
  [[nodiscard]] Raise delta_weight(int layer, AdapterOrder* deltas, AdapterSet* corrupt_deltas);
  [[nodiscard]] Raise save_adapters(const Op& op);
  // rank0_file_missing: rank 0 never wrote the file this load reads; rank0_first: what rank 0's
  // first file holds (null: none yet), read by a rank that never saved; reload_diff: the
  // parameters whose values differ from this rank's at save time.
  [[nodiscard]] Raise load_adapters(bool rank0_file_missing, const AdapterFile* rank0_first, std::vector<int>* reload_diff);
  // save_model full|sharded and load_model full|sharded|plain: the model's whole state dict,
  // base weights and adapters (model_state_dict.cpp).
  [[nodiscard]] Raise save_model(const Op& op);
  [[nodiscard]] Raise load_model(const Op& op);

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
  bool registered_rg(int param) const { return p_.tree.params[param].registered_rg(p_.dtensor.is_registered_u(param)); }
  // A requires_grad flip reaches whichever object is registered now: S, or the temporary U.
  void set_registered_rg(int param, bool value) const {
    p_.tree.params[param].set_registered_rg(p_.dtensor.is_registered_u(param), value);
  }
  Raise raise(Status s, std::string msg) const;
  ScopeSite site() const { return {p_.prov, &p_.tree.params, &p_.tree.layers}; }
  AdapterSet adapters_named(const std::vector<std::string>& names) const { return AdapterSet::named(p_.tree.topo.adapters, names); }

  PeftPort p_;
};

// Rows of parameter p in the adapter state dict `rank` computes: get_peft_model_state_dict reads
// model.state_dict(), whose FSDP2 values are DTensors it does not gather (adapter_save_gather
// off), so a managed parameter contributes its local rows.
int64_t saved_rows(const Topology& topo, const std::vector<FsdpParam>& params, int p, int rank);

}  // namespace fsdpsim
