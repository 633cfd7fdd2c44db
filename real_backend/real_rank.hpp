// One rank of the real backend: the scenario's layers as libtorch leaf
// tensors in a registry that can swap the object registered under a name (the
// analogue of FSDP2's unsafe_setattr_param), LoRA math, real autograd, gloo
// collectives. Method names mirror model/machine/rank_model.hpp; every
// observation is read off these tensors, never asked of the model.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "model/vocab/adapter_set.hpp"
#include "model/vocab/op.hpp"
#include "real_backend/comm.hpp"
#include "real_backend/dtensor.hpp"
#include "real_backend/fsdp_state.hpp"
#include "real_backend/layout.hpp"
#include "real_backend/op_raised.hpp"
#include "real_backend/optimizer.hpp"
#include "real_backend/rank_report.hpp"
#include "real_backend/real_layer.hpp"

namespace fsdpsim::real {

class RealRank {
 public:
  RealRank(const Layout& layout, uint64_t seed, Comm* comm);
  RealRank(const RealRank&) = delete;  // its classes hold each other's addresses
  RealRank& operator=(const RealRank&) = delete;
  void reset();  // get_peft_model (the state before prepare); then prepare, unless a `prepare` op runs it
  // Runs one op and reports what the real objects show. CollectiveFailure and
  // CommBroken propagate: the op's rank is stopped there.
  RankReport apply(const Op& op, int step);
  // The report of an op that stopped in a collective (hang/mismatch).
  RankReport failed_report(const Op& op, int step, Status s, const std::string& desc);
  Comm& comm() { return *comm_; }

 private:
  void dispatch(const Op& op);
  // Until the PEFT side is its own classes: the registry and DTensor as these methods read them.
  const at::Tensor& registered(int p) const { return params_.registered(p); }
  int group_of(int p) const { return params_.group_of(p); }
  ParamTensors& fsdp_param(int p) { return params_[p].fsdp_objects(); }
  void set_registered_rg(int p, bool v) { params_.set_requires_grad(p, v); }
  at::ScalarType param_dtype(int p) { return params_.param_dtype(p); }
  at::Tensor gather_full(int p, DType wire = DType::F32) { return dtensor_.full_tensor(p, wire); }
  bool in_some_layer(int adapter) const;  // some layer holds this adapter's tensors (PEFT's config aside)
  // --- LoRA layers and PEFT ops (real_lora.cpp, real_peft.cpp) ---
  // sign +1 merge, -1 unmerge (their checks around the delta), 0 the delta alone; *form: which rows it returned
  at::Tensor get_delta_weight(int layer, int adapter, int sign, DeltaForm* form = nullptr);
  at::Tensor linear_delta(int layer, int adapter, DeltaForm* form);
  void apply_delta(int layer, const at::Tensor& d, bool add);
  // --- ParamWrapper (experts) layers (real_param_wrapper.cpp) ---
  // what: the delta_weight op's report of the value returned (its form and whole shape)
  at::Tensor experts_delta(int layer, int adapter, bool merge, DeltaValue* what = nullptr);
  at::Tensor one_expert_delta(int layer, int adapter, bool merge, bool dtensor, DeltaValue* what);
  void wrapper_forward(int layer);  // throws where a ParamWrapper made after fully_shard meets a DTensor shard
  at::Tensor experts_forward(int layer, const at::Tensor& h);
  void layer_merge(int layer, int adapter);
  void layer_unmerge(int layer);
  void layer_set_adapter(int layer, AdapterSet names, bool inference_mode);
  void layer_enable_adapters(int layer, bool enabled);
  at::Tensor layer_forward(int layer, const at::Tensor& h, at::Tensor* base_out = nullptr);  // base_out: the base layer's output
  void set_adapter_module_level(AdapterSet names, bool list_form, bool inference_mode);
  // --- modules_to_save wrappers (real_modules_to_save.cpp; names as model/machine/modules_to_save.cpp) ---
  bool copy_registered(int layer, int adapter) const;  // the copy is in the wrapper's modules_to_save ModuleDict
  void create_copy(int layer, int adapter);
  void set_copy_rg(int layer, int adapter, bool rg);
  void wrapper_set_adapter(int layer, int adapter, bool inference_mode);  // adapter -1: set_adapter([])
  void wrappers_set_adapter(AdapterSet names, bool list_form, bool inference_mode);
  void wrapper_enable_adapters(int layer, bool enabled);
  at::Tensor wrapper_module_forward(int layer, const at::Tensor& h);
  void set_additional_trainable_modules(int adapter, bool inference_mode);
  void wrappers_delete_adapter(int adapter, AdapterSet new_active);
  void op_set_adapter(const Op& op);
  void op_merge(const Op& op);
  void unmerge_adapter();
  void op_disable_enter();
  void op_disable_exit();
  void update_layer(int layer, int adapter, bool inference_mode);
  void inject_adapter(int adapter, bool inference_mode, bool first);
  void active_without_config() const;  // throws KeyError for a tuner-active name without a config
  void op_add_adapter(int adapter, bool inference_mode, bool load, bool trainable);
  void op_delete_adapter(int adapter);
  void op_delta_weight(int layer);
  void op_save_adapters(const Op& op);
  void op_load_adapters();
  bool saved_local_rows(size_t p) const;  // the saved file holds rank 0's local rows of p
  bool any_merged() const;
  // --- activation checkpointing (real_checkpoint.cpp) ---
  // at::linear(x, w, b), noting in saving_ what autograd keeps for it (x is in x_dtype).
  at::Tensor saving_linear(const at::Tensor& x, at::ScalarType x_dtype, int w, int b = -1);
  void checkpoint_forward(int layer, const at::Tensor& in, const at::Tensor& out);
  void register_checkpoint_hooks();
  void checkpoint_recompute(int layer);
  std::vector<SavedTensor>* saving_ = nullptr;  // during a checkpointed layer's forward or recompute
  std::vector<std::pair<int, at::Tensor>> ckpt_outputs_;  // this forward's checkpointed outputs
  int ckpt_raised_ = -1;  // the layer whose recompute raised in this backward
  // --- training (real_fsdp.cpp) ---
  void op_forward(bool grad_enabled);
  void forward_hooks(bool grad_enabled);  // op_forward's body; op_forward restores the graph flags on a raise
  void op_backward();
  // --- placement, prepare and memory (real_loading.cpp) ---
  void create_param(int p, const std::vector<float>& full);
  void place_param(int p, bool meta, at::ScalarType dtype);
  void move_adapter_to_device_of_base_layer(int layer, int adapter);
  void create_adapter(int adapter, bool load);
  void op_prepare();
  std::vector<OwnerBytes> sharded_bytes() const;
  void create_adapter_in(int layer, int adapter, bool load, bool autocast = true);
  // --- reporting ---
  RankReport report(const Op& op, int step);
  AdapterSet adapters_named(const std::vector<std::string>& names) const { return AdapterSet::named(layout_->adapters, names); }

  const Layout* layout_;
  uint64_t seed_;
  Comm* comm_;
  // The module's classes, each reaching the others only through the ports it was given.
  Parameters params_;   // module._parameters, per parameter name (layout_->params)
  ProcessGroup pg_;     // this rank's Comm and the op's step
  FsdpState fsdp_;      // fully_shard's state: the groups
  DTensor dtensor_;     // the LoRA math's reads of sharded parameters
  Optimizer optimizer_;
  std::vector<RealLayer> layers_;         // per layer (layout_->layers): PEFT's and checkpointing's state
  // PEFT bookkeeping (plain Python attributes upstream)
  AdapterSet present_, active_, inference_mode_;
  std::vector<int> peft_config_;  // present_ in PeftModel.peft_config's order: a dict's, insertion order
  bool disabled_ = false;
  // save_adapters: the checkpoint as rank 0 writes it; this rank keeps the
  // rows it can restore (its chunk of the saved full values) and rank 0's shapes
  AdapterSet saved_adapters_;
  std::vector<int> saved_file_order_;  // saved_adapters_ in the order the file holds them
  int saves_ = 0;  // save_adapters this rank ran: names rank 0's file (Comm::write_rank0_file)
  // per param: this rank's S when saved, in its dtype; the tensor its state dict held (local rows
  // or full); the rows of rank 0's saved tensor (-1: not saved)
  struct SavedParam {
    at::Tensor values, file;
    int64_t rows = -1;
  };
  std::vector<SavedParam> saved_;
  // the autograd graph of the last forward
  at::Tensor loss_;
  bool have_output_ = false;
  int peft_active_ = 0;  // PeftModel.active_adapter: one adapter's index
  OpResult res_;         // this op's outcome (apply starts it afresh, report reads it)
};

}  // namespace fsdpsim::real
