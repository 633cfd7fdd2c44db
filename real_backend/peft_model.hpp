// PeftModel and its BaseTuner (peft/peft_model.py, peft/tuners/tuners_utils.py)
// on the real module: the adapters' configs and active ones, the tuner's LoRA
// layers and modules_to_save wrappers, the adapter checkpoint rank 0 writes
// (peft_model.cpp; the adapter checkpoints' save_and_load.cpp).
// Same file and class as model/machine/peft_model.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "model/vocab/adapter_order.hpp"
#include "model/vocab/adapter_set.hpp"
#include "model/vocab/op.hpp"
#include "real_backend/loading.hpp"
#include "real_backend/modules_to_save.hpp"
#include "real_backend/op_raised.hpp"

namespace fsdpsim::real {

class PeftModel {
 public:
  PeftModel(const Layout& layout, Parameters& params, FsdpState& fsdp, DTensor& dtensor, ProcessGroup& pg,
            CheckpointWrapper& ckpt, Accelerator& accelerator);
  // get_peft_model + add_adapter for each declared adapter (before prepare).
  void get_peft_model();

  // --- the ops (peft_model.py::PeftModel and tuners_utils.py::BaseTuner) ---
  void set_adapter(const Op& op);
  void merge(const Op& op);
  void unmerge_adapter();
  void disable_enter();
  void disable_exit();
  void add_adapter(int adapter, bool inference_mode, bool load, bool trainable);
  void delete_adapter(int adapter);
  void delta_weight(int layer, OpResult* res);
  void save_adapters(const Op& op, OpResult* res);
  void load_adapters(OpResult* res);

  // --- the forward ---
  // PeftModel.has_active_enabled_adapter: peft_config[active_adapter] inside the root's forward.
  void check_active_config() const;
  // One layer of the module tree: its modules_to_save wrapper, or its LoRA layer.
  at::Tensor layer_forward(int layer, const at::Tensor& h, at::Tensor* base_out = nullptr);
  LoraLayer& layer(int l) { return *layers_[l]; }

  // --- what a report reads ---
  const AdapterSet& active() const { return active_; }
  bool disabled() const { return disabled_; }
  const std::vector<int>& merged(int l) const { return layers_[l]->merged; }
  // Some layer holds this adapter's tensors (PEFT's config aside).
  bool in_some_layer(int adapter) const;

 private:
  void inject_adapter(int adapter, bool inference_mode, bool first);
  void load_state_dict_hooks();
  void set_adapter_module_level(AdapterSet names, bool list_form, bool inference_mode);
  void enable_adapter_layers(bool enabled);
  void active_without_config() const;  // throws KeyError for a tuner-active name without a config
  bool any_merged() const;
  void reshard_groups_without_merged();
  void roll_back_injection(int adapter, const std::vector<std::pair<int, bool>>& before);
  bool tuner_flags_reshard() const;
  bool saved_local_rows(size_t p) const;  // the saved file holds rank 0's local rows of p
  at::Tensor file_layout() const;           // what the saved file's keys and shapes say, as floats
  int64_t adopt_file_layout(const at::Tensor& all);  // rank 0's file's layout as this rank's record
  int64_t layout_floats(const at::Tensor& all) const;  // the floats of the layout heading a file
  AdapterSet adapters_named(const std::vector<std::string>& names) const { return AdapterSet::named(layout_->adapters, names); }

  const Layout* layout_;
  Parameters* params_;
  FsdpState* fsdp_;
  DTensor* dtensor_;
  ProcessGroup* pg_;
  Accelerator* accelerator_;
  std::vector<std::unique_ptr<LoraLayer>> layers_;               // per layer (layout.layers)
  std::vector<std::unique_ptr<ModulesToSaveWrapper>> wrappers_;  // per layer: its wrapper once wrapped
  // PEFT bookkeeping (plain Python attributes upstream)
  AdapterSet present_, active_, inference_mode_;
  AdapterOrder active_order_;  // active_ as the last set_adapter listed it: a merge's order
  std::vector<int> peft_config_;  // present_ in PeftModel.peft_config's order: a dict's, insertion order
  bool disabled_ = false;
  int peft_active_ = 0;  // PeftModel.active_adapter: one adapter's index
  // save_adapters: the checkpoint as rank 0 writes it; this rank keeps the
  // rows it can restore (its chunk of the saved full values) and rank 0's shapes
  AdapterSet saved_adapters_;
  std::vector<int> saved_file_order_;  // saved_adapters_ in the order the file holds them
  int saves_ = 0;  // save_adapters this rank ran: names rank 0's file (Comm::write_rank0_file)
  // per param: this rank's S when saved, in its dtype; the tensor its state dict held (local rows
  // or full); the rows of rank 0's saved tensor (-1: not saved); S's AdamW steps then
  struct SavedParam {
    at::Tensor values, file;
    int64_t rows = -1;
    int64_t adam_step = 0;
  };
  std::vector<SavedParam> saved_;
};

}  // namespace fsdpsim::real
