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
#include "real_backend/real_group.hpp"
#include "real_backend/real_layer.hpp"
#include "real_backend/layout.hpp"
#include "real_backend/rank_report.hpp"

namespace fsdpsim::real {

// A parameter's dtype as the observations name it (bf16, else fp32; uint8: a byte-packed buffer).
DType dtype_of(const at::Tensor& t);
DType dtype_of(at::ScalarType t);

// One FSDPParam: S (this rank's padded dim-0 chunk, a leaf), U (the unsharded
// leaf, created at the group's first all-gather and reused).
struct RealParam {
  at::Tensor s, u;
  // S's placement: a meta tensor, or S's values on cpu in the parameter's dtype
  // (compute stays fp32 in `s`; device and dtype are read off this tensor).
  at::Tensor place;
  at::Tensor adam_m, adam_v;  // AdamW state, keyed to S
  int64_t adam_step = 0;
  int64_t adam_created = 0;   // when the state was created (Optimizer.state's insertion order)
};

// One parameter name on this rank, as the model's FsdpParam (model/machine/fsdp_param.hpp): the
// objects behind it, what the module registers under it, and the ghost a re-add leaves.
struct RealParamSlot {
  RealParam leaf;  // this name's own objects (after a re-add: the new unmanaged module's leaf)
  // module._parameters[name]: S, U or the new module's leaf (undefined: absent, FsdpParam::present false)
  at::Tensor registered;
  // Re-added after fully_shard over a managed name (FsdpParam::detached): `leaf` is the new module's
  // (peft tuners/lora/layer.py::LoraLayer.update_layer); `ghost` the deleted one's FSDPParam, which its
  // group keeps gathering (torch _fsdp_init.py::_get_managed_states ran at fully_shard).
  bool detached = false;
  RealParam ghost;
  // As FsdpParam::keep_ghost: the group keeps the deleted module's FSDPParam; the name gets a fresh leaf.
  void keep_ghost() {
    ghost = std::move(leaf);
    leaf = RealParam{};
    detached = true;
  }
};

// An exception upstream raises inside an op (a libtorch error's first line):
// the op stops where Python's would, and apply() reports it. This backend's one
// way to raise: a thrown OpError in the model's OpRaised shape, never a flag
// set and returned through. A throw and not the model's Raise value, because
// some raises happen inside libtorch autograd hooks (post_backward, a
// checkpoint's recompute), out of which only an exception gets through
// loss.backward(). Only apply() catches it for good; a catch elsewhere undoes
// what upstream undoes (add_adapter's config) and rethrows.
class OpError : public std::runtime_error {
 public:
  OpError(Status s, const std::string& msg) : std::runtime_error(msg), status(s), message(msg) {}
  // OpRaised's fields (model/machine/op_raised.hpp, which this folder may not include: it uses
  // model/vocab only).
  Status status;
  std::string message;
};

// What one op did beside the state it left, as the model's OpResult
// (model/machine/rank_model.hpp): apply() starts it afresh, the op's transitions
// fill it, report() reads it into the RankReport.
struct OpResult {
  Status status = Status::Ok;
  std::string message;
  int64_t index = -1;  // key_error: the first optimizer index no module holds
  AdapterSet grads;  // adapters whose shard received a gradient
  std::vector<DeltaObs> deltas;  // delta_weight: per active adapter (its class: the observer's)
  int delta_layer = -1;          // ... its layer, and per entry of deltas the value get_delta_weight returned
  std::vector<DeltaValue> delta_values;
  std::vector<SavedObs> saved;                      // save_adapters: the tensors rank 0's file holds
  std::vector<std::string> reload_diff;             // load_adapters: values that differ from the save
  std::vector<std::string> reload_coincident;       // ... reloaded from another rank's equal rows
  int64_t peak_total = -1;                          // the largest bytes of live U copies, per owner below
  std::vector<OwnerBytes> peak_owners;
};

class RealRank {
 public:
  RealRank(const Layout& layout, uint64_t seed, Comm* comm);
  void reset();  // get_peft_model (the state before prepare); then prepare, unless a `prepare` op runs it
  // Runs one op and reports what the real objects show. CollectiveFailure and
  // CommBroken propagate: the op's rank is stopped there.
  RankReport apply(const Op& op, int step);
  // The report of an op that stopped in a collective (hang/mismatch).
  RankReport failed_report(const Op& op, int step, Status s, const std::string& desc);
  Comm& comm() { return *comm_; }

 private:
  void dispatch(const Op& op);
  // --- FSDP2 (real_fsdp.cpp) ---
  at::Tensor delta_few_rows(int layer, int adapter, DeltaForm* form = nullptr);  // DTensor's B @ A when W has fewer rows than ranks
  bool late_delta_on_shard(int layer, int adapter) const;  // an adapter added after prepare meets W's shard
  void check_mixed(int layer, int adapter, bool add);  // a plain delta into a DTensor shard
  void check_inplace_placement(int layer, int adapter, bool add);  // DTensor's in-place rule
  at::ScalarType param_dtype(int p);
  bool group_gathers_bytes(int g);  // a group with mixed-dtype shards gathers uint8
  at::Tensor all_gather_group(int g);
  void unshard(int g);
  void prefetch_unshard(int g);
  void to_sharded(int g);
  void reshard_in_forward(int g);
  void post_backward(int g);
  void record_post_forward(int g);
  void register_pre_backward_hook(int g, const at::Tensor& out);
  int backward_prefetch_target(int g);
  void reshard_all();         // the state-dict pre-hook: every group, whatever its state
  void module_reshard(int g);  // FSDPModule.reshard(): a no-op in FORWARD without reshard_after_forward
  void module_reshard_all();
  void set_registered_rg(int p, bool v);
  const at::Tensor& registered(int p) const { return params_[p].registered; }
  // The group managing the registered object (-1: none; a re-added adapter's new module).
  int group_of(int p) const { return params_[p].detached ? -1 : layout_->params[p].group; }
  bool in_some_layer(int adapter) const;  // some layer holds this adapter's tensors (PEFT's config aside)
  // The FSDPParam group g holds under p's name: the deleted module's (the ghost) after a re-add.
  RealParam& fsdp_param(int p) { return params_[p].detached ? params_[p].ghost : params_[p].leaf; }
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
  at::Tensor gather_full(int p, DType wire = DType::F32);  // wire: the dtype DTensor gathers in
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
  void forward_unshard(int g);  // pre_forward's unshard: raises where the group has no param_dtype
  void init_mp_dtypes(int g);  // throws AssertionError where the group's trainable shards differ in dtype
  void forward_hooks(bool grad_enabled);  // op_forward's body; op_forward restores the graph flags on a raise
  void op_backward();
  // --- placement, prepare and memory (real_loading.cpp) ---
  void create_param(int p, const std::vector<float>& full);
  void place_param(int p, bool meta, at::ScalarType dtype);
  void move_adapter_to_device_of_base_layer(int layer, int adapter);
  void create_adapter(int adapter, bool load);
  void op_prepare();
  void note_unsharded_peak();
  std::vector<OwnerBytes> sharded_bytes() const;
  // --- optimizer and checkpoints (real_optim.cpp) ---
  void prepare_optimizer();
  void map_by_data_ptr(const std::vector<int>& held_before, const std::vector<int64_t>& data_ptr_before);
  void new_optimizer();
  void op_step();
  void op_zero_grad();
  int optimizer_missing(int* first, std::vector<std::string>* names) const;
  void op_save_optimizer();
  void create_adapter_in(int layer, int adapter, bool load, bool autocast = true);
  RealParam* opt_state_of(size_t i);  // the state slot of optimizer position i (nullptr: an object no module holds)
  void init_optim_state();
  void op_load_optimizer();
  // --- reporting ---
  RankReport report(const Op& op, int step);
  AdapterSet adapters_named(const std::vector<std::string>& names) const { return AdapterSet::named(layout_->adapters, names); }
  at::Tensor chunk_of(const std::vector<float>& full, const ParamSpec& p) const;

  const Layout* layout_;
  uint64_t seed_;
  Comm* comm_;
  int step_ = 0;
  std::vector<RealParamSlot> params_;   // per parameter name (layout_->params)
  std::vector<RealGroup> groups_;         // per FSDP group (layout_->groups)
  std::vector<RealLayer> layers_;         // per layer (layout_->layers): PEFT's and checkpointing's state
  bool prepared_ = false;                 // fully_shard and accelerate's prepare have run
  bool root_lazy_inited_ = false;         // FSDPState._is_root set: the root's lazy init ran (or raised)
  // PEFT bookkeeping (plain Python attributes upstream)
  AdapterSet present_, active_, inference_mode_;
  std::vector<int> peft_config_;  // present_ in PeftModel.peft_config's order: a dict's, insertion order
  bool disabled_ = false;
  // optimizer: S objects held (by identity) in pid order
  std::vector<int> optimizer_;
  std::vector<at::Tensor> optimizer_objects_;
  bool has_opt_ckpt_ = false;
  int64_t adam_clock_ = 0;  // stamps each new AdamW state (adam_created)
  std::vector<std::pair<std::string, std::vector<at::Tensor>>> opt_ckpt_;
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
  // FSDPStateContext.post_backward_final_callback_queued: a backward that raised before its final
  // callback leaves it set, with each hooked group's state_pre_backward (RealGroup)
  bool final_callback_queued_ = false;
  std::vector<int> forward_order_;
  // Pre-backward hooks as libtorch fired them in the last backward: the group and
  // an id of the output tensor the hook was registered on (same id: same tensor).
  std::vector<std::pair<int, int64_t>> fired_;
  at::Tensor last_hooked_;  // during forward: the last tensor a hook went on
  int64_t hooked_tensors_ = 0;
  std::vector<int> post_forward_order_;  // FSDPCommContext.post_forward_order (each group keeps its indices)
  int peft_active_ = 0;  // PeftModel.active_adapter: one adapter's index
  OpResult res_;         // this op's outcome (apply starts it afresh, report reads it)
};

}  // namespace fsdpsim::real
