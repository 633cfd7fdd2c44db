// PeftModel's adapter checkpoints on the real module (peft/utils/save_and_load.py under
// peft_model.py::PeftModel.save_pretrained / load_adapter): the state dict rank 0's file holds,
// what a load copies back into the adapters' tensors, and the FSDP state-dict hooks around it. The
// adapter lifecycle (set_adapter, merge, add, delete, disable) is peft_model.cpp's. Same file as
// model/machine/save_and_load.cpp.
#include "real_backend/peft_model.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <optional>

#include "real_backend/values.hpp"

namespace fsdpsim::real {

// set_peft_model_state_dict -> load_state_dict: FSDP's load pre-hook reshards every group
// (torch _fsdp_param_group.py::FSDPParamGroup._register_state_dict_hooks).
void PeftModel::load_state_dict_hooks() {
  if (fsdp_->prepared) fsdp_->reshard_all();
  // Its post-hook on every managed module (torch _fsdp_param.py::FSDPParam.reset_sharded_param)
  // reads `_local_tensor` off the registered parameter: a group the pre-hook could not reshard
  // (its lazy init's dtype check raised before the hooks) still registers U, a plain Parameter.
  for (const FsdpParamGroup& g : fsdp_->groups)
    if (g.unsharded() && !g.state_dict_hooks)
      throw OpError(Status::Exception, "AttributeError: 'Parameter' object has no attribute '_local_tensor'");
}

// PeftModel.save_pretrained: model.state_dict() first (its FSDP pre-hook
// reshards), then save_and_load.py::get_peft_model_state_dict per selected
// adapter (none named: all, or with adapter_save_selection=active the active
// ones). Without adapter_save_gather a managed parameter's DTensor gives this
// rank's local rows; with it, the full tensor (DCP full_state_dict). The file
// is rank 0's; this rank keeps its chunk of the saved values and rank 0's rows.
void PeftModel::save_adapters(const Op& op, OpResult* res) {
  AdapterSet names = op.names.empty() ? present_ : adapters_named(op.names);
  // the active adapters as the tuner lists them (BaseTuner.active_adapters): one whose config an add
  // dropped is still there, and the check below refuses it, as save_pretrained's lookup does
  if (op.names.empty() && layout_->profile.get(Switch::AdapterSaveSelection) == sw::kActive) names = active_;
  if (!present_.includes(names))
    throw OpError(Status::ValueError, "selected adapters are not in the model: " + names.without(present_).text(layout_->adapters));
  ++saves_;
  fsdp_->reshard_all();
  const bool gather = layout_->profile.get(Switch::AdapterSaveGather) == sw::kOn;
  const int world = layout_->world, rank = pg_->rank();
  saved_adapters_ = names;
  // peft_model.py::PeftModel.save_pretrained writes selected_adapters in the order given, else list(peft_config)
  saved_file_order_.clear();
  if (!op.names.empty()) {
    for (const std::string& n : op.names)
      for (int a : names)
        if (layout_->adapters[a].name == n && std::find(saved_file_order_.begin(), saved_file_order_.end(), a) == saved_file_order_.end())
          saved_file_order_.push_back(a);
  } else {
    for (int a : peft_config_)
      if (names.contains(a)) saved_file_order_.push_back(a);
  }
  saved_.assign(params_->size(), SavedParam{});
  // DCP's full state dict gathers in model.state_dict() order: per layer lora_A then lora_B,
  // each in injection order (torch distributed/checkpoint/state_dict.py::_get_model_state_dict).
  std::vector<at::Tensor> full(params_->size());
  if (gather)
    for (int p : layout_->state_dict_order) {
      const ParamSpec& ps = layout_->params[p];
      if (ps.adapter >= 0 && names.contains(ps.adapter) && params_->registered(p).defined() && params_->group_of(p) >= 0)
        full[p] = dtensor_->full_tensor(p, dtype_of((*params_)[p].leaf.place));  // DTensor.full_tensor: the parameter's own dtype
    }
  for (size_t p = 0; p < params_->size(); ++p) {
    const ParamSpec& ps = layout_->params[p];
    // save_and_load.py::_filter_state_dict_for_adapter_name drops the OTHER configured adapters'
    // keys only: a half-added adapter's tensors (config rolled back) go into each saved state dict.
    const bool orphan = ps.adapter >= 0 && !present_.contains(ps.adapter) && !names.empty();
    if (ps.adapter < 0 || !(names.contains(ps.adapter) || orphan) || !params_->registered(p).defined()) continue;
    const at::Tensor& sv = (*params_)[p].leaf.s;
    const bool local = !gather && params_->group_of(static_cast<int>(p)) >= 0 && world > 1;
    // With the gather (DCP full_state_dict) every rank all-gathers each managed
    // tensor; the file holds the full values.
    // (local: the unpadded rows of this rank's padded chunk, FSDPParam._sharded_param_data)
    at::Tensor mine = local ? sv.detach().narrow(0, 0, ps.local_rows(rank))
                      : (gather && params_->group_of(static_cast<int>(p)) >= 0) ? full[p]
                                                  : sv.detach();
    // PEFT's get_peft_model_state_dict looks the keys up by module path: under checkpoint_wrapper
    // the path holds `_checkpoint_wrapped_module.` and the key does not, so the layer is dropped
    // (after the full state dict's gather).
    // save_key_prefixes=wrappers_stripped (save-skips-checkpointed-layers.patch) keeps it.
    if (layout_->layers[ps.layer].checkpoint && layout_->profile.get(Switch::SaveKeyPrefixes) != sw::kWrappersStripped) continue;
    // ... one entry per state dict it is in (peft utils/save_and_load.py::get_peft_model_state_dict, per adapter)
    for (int c = orphan ? names.count() : 1; c > 0; --c)
      res->saved.push_back({ps.name, mine.size(0), ps.rows, dtype_of((*params_)[p].leaf.place)});
    saved_[p].values = sv.detach().clone();
    saved_[p].file = mine.clone();
    saved_[p].rows = local ? ps.local_rows(0) : ps.rows;
    saved_[p].adam_step = (*params_)[p].leaf.adam_step;
  }
  // Rank 0 writes the file and the others read it: its layout (what PEFT's keys and shapes say: a
  // peer that never saved knows it from the file alone), then its local rows and its full tensors
  // (which differ from theirs once per-rank data trained an unmanaged replica apart).
  // A file of no tensors is still written: a peer's load waits for it as for any other.
  std::vector<at::Tensor> file{file_layout()};
  for (size_t p = 0; p < params_->size(); ++p)
    if (saved_[p].rows >= 0) file.push_back(saved_[p].file.reshape({-1}).to(at::kFloat));
  pg_->comm->write_rank0_file(at::cat(file), saves_);
}

// The file's layout as floats: the adapters in the file's order, the saved set's bits, then per
// parameter the rows its tensor holds (-1: not in the file). Small integers, exact in fp32.
at::Tensor PeftModel::file_layout() const {
  std::vector<float> h{static_cast<float>(saved_file_order_.size())};
  for (int a : saved_file_order_) h.push_back(static_cast<float>(a));
  h.push_back(static_cast<float>(saved_adapters_.bits()));
  for (const SavedParam& sp : saved_) h.push_back(static_cast<float>(sp.rows));
  return at::tensor(h, at::kFloat);
}

// A peer that never saved reads rank 0's first file (as PEFT's load_adapter reads whatever the
// path holds; fsdpsim_upstream/op_checkpoints.py::run_load_adapters): the layout becomes its
// record of the save, with no values of its own to compare a reload with. Returns the floats
// the layout took (-1: not a file of this model).
int64_t PeftModel::adopt_file_layout(const at::Tensor& all) {
  const int64_t floats = layout_floats(all);
  if (floats < 0) return -1;
  const float* f = all.data_ptr<float>();
  const int64_t order = static_cast<int64_t>(f[0]), params = static_cast<int64_t>(params_->size());
  saved_file_order_.assign(f + 1, f + 1 + order);
  saved_adapters_ = AdapterSet::from_bits(static_cast<uint8_t>(f[order + 1]));
  saved_.assign(params_->size(), SavedParam{});
  for (int64_t p = 0; p < params; ++p) saved_[p].rows = static_cast<int64_t>(f[order + 2 + p]);
  return floats;
}

// The floats the layout at the head of a file takes (-1: too short to be one of this model's).
int64_t PeftModel::layout_floats(const at::Tensor& all) const {
  const int64_t n = all.numel();
  const float order = n > 0 ? all.data_ptr<float>()[0] : -1.0f;
  if (order < 0 || n < static_cast<int64_t>(order) + 2 + static_cast<int64_t>(params_->size())) return -1;
  return static_cast<int64_t>(order) + 2 + static_cast<int64_t>(params_->size());
}

// The saved file holds rank 0's local rows of p, not the full tensor.
bool PeftModel::saved_local_rows(size_t p) const {
  return saved_[p].rows >= 0 && saved_[p].rows != layout_->params[p].rows;
}

// PeftModel.load_adapter -> set_peft_model_state_dict -> load_state_dict (its
// pre-hook reshards), adapter by adapter, on rank 0's file (read here through
// Comm::read_rank0_file when it holds rank 0's local rows).
// save_and_load.py::_reshard_dtensor_values_for_load: a managed parameter takes
// its chunk of a tensor of the global shape, or a tensor of its own local shard
// shape as it is (rank r > 0 then holds rank 0's rows); any other shape meets
// module.py::_load_from_state_dict's size mismatch, raised after the adapter's
// fitting tensors were copied. reload_diff: S against what S held at save time;
// reload_coincident: rank 0's rows taken in, or an optimizer step since the save, equal to this
// rank's own by value.
void PeftModel::load_adapters(OpResult* res) {
  // A save that selected no adapter still wrote a file (of none): only a rank that never saved has
  // no record of one. Rank 0 then has no file; a peer reads rank 0's first.
  const bool recorded = saves_ > 0;
  const int world = layout_->world, rank = pg_->rank();
  if (!recorded && (rank == 0 || world == 1)) throw OpError(Status::ValueError, "no adapters were saved (save_adapters first)");
  // Rank 0's file, in parameter order after its layout: its local rows, and its full tensors,
  // which differ from this rank's own once per-rank data trained a replica no group reduces apart
  // (beyond-seeds B1).
  at::Tensor all;
  int64_t from = 0;  // where the values start in `all`
  if (rank > 0) {
    all = pg_->comm->read_rank0_file(std::max(saves_, 1));  // a peer that never saved reads rank 0's first
    from = !all.defined() ? -1 : recorded ? layout_floats(all) : adopt_file_layout(all);
    if (from < 0) throw OpError(Status::ValueError, "no adapters were saved (save_adapters first)");
  }
  // peft utils/save_and_load.py::set_peft_model_state_dict, once per saved adapter in the file's
  // order, reads peft_config[adapter_name] first: an adapter deleted since the save raises KeyError
  // there, after the adapters before it loaded (each load_state_dict's FSDP pre-hook reshards).
  // the file's first adapter loads (and reshards)
  if (!saved_file_order_.empty() && present_.contains(saved_file_order_.front())) fsdp_->reshard_all();
  std::vector<at::Tensor> file0(params_->size());
  int64_t file_floats = 0;
  std::vector<at::Tensor> mine;
  for (size_t p = 0; p < params_->size(); ++p)
    if (saved_[p].rows >= 0) {
      file_floats += saved_[p].rows * layout_->params[p].cols;
      if (rank == 0) mine.push_back(saved_[p].file.reshape({-1}).to(at::kFloat));
    }
  if (rank == 0 && file_floats > 0) all = at::cat(mine);
  // a peer's own save wrote other shapes than rank 0's: not the file it expects
  if (rank > 0 && all.numel() - from != file_floats) throw OpError(Status::ValueError, "no adapters were saved (save_adapters first)");
  for (size_t p = 0; p < params_->size() && all.defined(); ++p) {
    if (saved_[p].rows < 0) continue;
    const int64_t n = saved_[p].rows * layout_->params[p].cols;
    file0[p] = all.narrow(0, from, n);
    from += n;
  }
  at::NoGradGuard ng;
  std::vector<bool> foreign(params_->size(), false);  // this rank's rows of p now hold rank 0's
  // What the load raises: thrown once reload_diff and reload_coincident are read, as the tensors
  // copied before the raise stay copied.
  std::optional<OpError> raised;
  for (size_t i = 0; i < saved_file_order_.size() && !raised; ++i) {
    const int a = saved_file_order_[i];
    if (!present_.contains(a)) {
      raised.emplace(Status::KeyError, "KeyError: '" + layout_->adapters[a].name + "'");
      break;
    }
    for (size_t p = 0; p < params_->size(); ++p) {
      const ParamSpec& ps = layout_->params[p];
      // a half-added adapter's tensors were saved in every adapter's state dict;
      // set_peft_model_state_dict maps them back to its own: the first adapter loaded brings them
      const bool half_added = ps.adapter >= 0 && !saved_adapters_.contains(ps.adapter) && i == 0;
      if ((ps.adapter != a && !half_added) || saved_[p].rows < 0 || !params_->registered(p).defined()) continue;
      at::Tensor v;
      // _reshard_dtensor_values_for_load finds no parameter under a checkpointed layer's stripped key
      // (named_parameters keeps `_checkpoint_wrapped_module.`): the plain tensor meets the DTensor
      // in _load_from_state_dict, a size mismatch or copy_'s mixed-tensor error, collected; nothing copied
      const bool refused = params_->group_of(static_cast<int>(p)) >= 0 && layout_->layers[ps.layer].checkpoint;
      if (refused) {
        if (!raised) raised.emplace(Status::Exception, "RuntimeError: Error(s) in loading state_dict for FSDPPeftModel:");
        continue;
      }
      if (!saved_local_rows(p)) {  // the full tensor: this rank's padded chunk of it (a plain tensor takes it whole)
        // an unmanaged replica takes rank 0's copy; a managed full tensor is the same on every rank
        v = params_->group_of(static_cast<int>(p)) < 0 || !recorded ? file0[p] : saved_[p].file;
        foreign[p] = rank != 0 && params_->group_of(static_cast<int>(p)) < 0;
        if (params_->group_of(static_cast<int>(p)) >= 0 && world > 1) {
          at::Tensor flat = v.contiguous().reshape({-1});
          v = dtensor_->chunk_of(std::vector<float>(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel()), ps);
        }
      } else if (params_->group_of(static_cast<int>(p)) >= 0 && saved_[p].rows == ps.local_rows(rank)) {
        // DTensor.from_local of rank 0's rows, padded as S is (a plain tensor re-added since takes no shard)
        v = at::zeros({ps.chunk_rows * ps.cols});
        v.narrow(0, 0, file0[p].numel()).copy_(file0[p]);
        foreign[p] = rank != 0 && ps.local_rows(rank) > 0;
      } else {
        if (!raised)
          // torch nn/modules/module.py::Module.load_state_dict: every size mismatch of the call is
          // collected, then one RuntimeError whose first line names the module class.
          raised.emplace(Status::Exception, "RuntimeError: Error(s) in loading state_dict for FSDPPeftModel:");
        continue;
      }
      (*params_)[p].leaf.s.variable_data().copy_(v.reshape((*params_)[p].leaf.s.sizes()));
    }
  }
  // A rank that kept no record of the save has nothing to compare with (the upstream pool's
  // reload_expect is empty there).
  for (size_t p = 0; p < params_->size() && recorded; ++p) {
    if (saved_[p].rows < 0 || !params_->registered(p).defined()) continue;
    if (!at::equal((*params_)[p].leaf.s.detach(), saved_[p].values)) res->reload_diff.push_back(layout_->params[p].name);
    // rank 0's rows, or an AdamW step since the save (bf16 can round an lr-sized update away), equal by value
    else if (foreign[p] || (*params_)[p].leaf.adam_step != saved_[p].adam_step) res->reload_coincident.push_back(layout_->params[p].name);
  }
  if (raised) throw *raised;
}

}  // namespace fsdpsim::real
