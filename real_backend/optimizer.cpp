// AdamW over the S objects captured at prepare, and DCP-style optimizer
// checkpoints that find those objects by identity among the registered ones.
#include "real_backend/optimizer.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "real_backend/op_raised.hpp"

namespace fsdpsim::real {
namespace {
constexpr double kLr = 1e-2, kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8, kWeightDecay = 1e-2;  // torch.optim.AdamW defaults, lr 1e-2
}

void Optimizer::reset() {
  held_.clear();
  objects_.clear();
  has_ckpt_ = false;
  ckpt_.clear();
}

// accelerate's fsdp2_switch_optimizer_parameters: the optimizer holds the S
// objects registered right after prepare, in model.parameters() order.
void Optimizer::prepare() {
  held_.clear();
  objects_.clear();
  for (int p : layout_->state_dict_order) {  // model.parameters(): lora_A/lora_B in injection order
    if (!(*params_)[p].present()) continue;
    bool take = layout_->optimizer == OptimizerParams::Trainable ? (*params_)[p].leaf.s.requires_grad()
                                                                   : layout_->params[p].adapter >= 0;
    if (!take) continue;
    held_.push_back(static_cast<int>(p));
    objects_.push_back((*params_)[p].leaf.s);  // held, as torch's optimizer holds its Parameters
  }
}

// accelerate/accelerator.py::Accelerator._prepare_fsdp2: the optimizer built before prepare is
// switched by a map from each parameter's data_ptr() before prepare (named_parameters() order,
// a later name overwriting an equal key) to the object registered after it. A meta tensor's
// data_ptr() is 0, so on a ram-efficient rank > 0 every meta entry gets the last meta
// parameter's object; torch's AdamW steps that object once per entry.
void Optimizer::map_by_data_ptr(const std::vector<int>& held_before, const std::vector<int64_t>& data_ptr_before) {
  std::unordered_map<int64_t, int> by_ptr;
  for (int p : layout_->state_dict_order)
    if (data_ptr_before[p] >= 0) by_ptr[data_ptr_before[p]] = p;
  held_.clear();
  objects_.clear();
  for (int p : held_before) {
    const int now = by_ptr.at(data_ptr_before[p]);
    held_.push_back(now);
    objects_.push_back((*params_)[now].leaf.s);
  }
}

// A fresh torch.optim.AdamW built as prepare builds it: it holds the objects registered now
// (an adapter added after fully_shard among them) and no state yet.
void Optimizer::renew() {
  if (!fsdp_->prepared) return;
  for (bool ghost : {false, true})
    for (FsdpParam& slot : *params_) {
      ParamTensors& rp = ghost ? slot.ghost : slot.leaf;
      rp.adam_m = at::Tensor();
      rp.adam_v = at::Tensor();
      rp.adam_step = 0;
      rp.adam_created = 0;
    }
  prepare();
}

// torch/optim/adamw.py, in place on each held object that has a grad. An
// object the module no longer registers (its adapter deleted and added again)
// is outside every graph: no grad, no update.
void Optimizer::step() {
  at::NoGradGuard ng;
  for (size_t i = 0; i < held_.size(); ++i) {
    const int p = held_[i];
    ParamTensors& rp = (*params_)[p].fsdp_objects();  // torch/optim/adamw.py::AdamW.step: a ghost shard it holds is stepped too
    if (!objects_[i].is_same(rp.s)) continue;
    const at::Tensor& g = rp.s.grad();
    if (!g.defined()) continue;
    if (!rp.adam_m.defined()) {
      rp.adam_m = at::zeros_like(rp.s);
      rp.adam_v = at::zeros_like(rp.s);
      rp.adam_created = ++adam_clock_;
    }
    ++rp.adam_step;
    at::Tensor w = rp.s.variable_data();
    w.mul_(1 - kLr * kWeightDecay);
    rp.adam_m.mul_(kBeta1).add_(g, 1 - kBeta1);
    rp.adam_v.mul_(kBeta2).addcmul_(g, g, 1 - kBeta2);
    double bc1 = 1 - std::pow(kBeta1, static_cast<double>(rp.adam_step));
    double bc2 = 1 - std::pow(kBeta2, static_cast<double>(rp.adam_step));
    w.addcdiv_(rp.adam_m, (rp.adam_v / bc2).sqrt_().add_(kEps), -kLr / bc1);
  }
}

// A training loop's two calls, and nothing more: torch/optim/optimizer.py::Optimizer.zero_grad
// (set_to_none) over the optimizer's objects, then torch/nn/modules/module.py::Module.zero_grad
// over the registered ones (U while its group is unsharded). A shard no optimizer holds keeps
// its grad while its group is unsharded; an unsynced grad on a resharded U stays as well.
void Optimizer::zero_grad() {
  for (at::Tensor& t : objects_)
    if (t.grad().defined()) t.mutable_grad().reset();
  for (FsdpParam& slot : *params_)
    if (slot.registered.defined() && slot.registered.grad().defined()) slot.registered.mutable_grad().reset();
}

// Optimizer objects not among model.named_parameters() now, compared by identity.
int Optimizer::missing(int* first, std::vector<std::string>* names) const {
  std::unordered_set<const at::TensorImpl*> live;
  for (int p = 0; p < static_cast<int>(params_->size()); ++p)
    if ((*params_)[p].present()) live.insert((*params_)[p].registered.unsafeGetTensorImpl());
  int missing = 0;
  *first = -1;
  for (size_t i = 0; i < objects_.size(); ++i) {
    if (live.count(objects_[i].unsafeGetTensorImpl())) continue;
    if (*first < 0) *first = static_cast<int>(i);
    ++missing;
    if (names) names->push_back(layout_->params[held_[i]].name);
  }
  return missing;
}

ParamTensors* Optimizer::state_of(size_t i) {
  ParamTensors& rp = (*params_)[held_[i]].fsdp_objects();
  return objects_[i].is_same(rp.s) ? &rp : nullptr;
}

// torch/distributed/checkpoint/state_dict.py::_init_optim_state (save and load
// start with it): no state and no grad anywhere -> one AdamW step with zero grads
// and lr 0 on every held object that requires grad (state m = v = 0, step 1;
// the values stay), then zero_grad(set_to_none=True).
void Optimizer::init_state() {
  for (size_t i = 0; i < held_.size(); ++i) {
    ParamTensors* rp = state_of(i);
    if ((rp && rp->adam_m.defined()) || objects_[i].grad().defined()) return;
  }
  for (size_t i = 0; i < held_.size(); ++i) {
    ParamTensors* rp = state_of(i);
    // an object held twice (a ram-efficient rank's data_ptr map) gets its state once, at its first position
    if (!rp || !objects_[i].requires_grad() || rp->adam_m.defined()) continue;
    rp->adam_m = at::zeros_like(rp->s);
    rp->adam_v = at::zeros_like(rp->s);
    rp->adam_step = 1;
    rp->adam_created = ++adam_clock_;
  }
}

// torch/distributed/checkpoint/state_dict.py::_get_optim_state_dict: the
// object -> FQN lookup, over the state's keys in creation order and then over
// the param groups, raises a bare KeyError with the optimizer index.
void Optimizer::save(int64_t* index) {
  if (layout_->profile.get(Switch::OptimizerCkptReshard) == sw::kOn) fsdp_->module_reshard_all();
  init_state();
  int first = -1;
  std::vector<std::string> missing;
  if (this->missing(&first, &missing) > 0) {
    int64_t oldest = 0;
    for (size_t i = 0; i < held_.size(); ++i) {
      ParamTensors* rp = state_of(i);
      const bool gone = std::find(missing.begin(), missing.end(), layout_->params[held_[i]].name) != missing.end();
      if (gone && rp && rp->adam_m.defined() && (oldest == 0 || rp->adam_created < oldest)) {
        oldest = rp->adam_created;
        first = static_cast<int>(i);
      }
    }
    // torch/optim/optimizer.py::Optimizer.state_dict numbers an object held twice by its last
    // position in its param group: the state's key, or (no state) the first missing entry's.
    for (size_t i = 0; i < held_.size(); ++i)
      if (objects_[i].is_same(objects_[first])) first = static_cast<int>(i);
    *index = first;
    throw OpError(Status::KeyError, "KeyError: " + std::to_string(first));
  }
  ckpt_.clear();
  for (size_t i = 0; i < held_.size(); ++i) {
    const ParamTensors* rp = state_of(i);
    std::vector<at::Tensor> st;
    if (rp && rp->adam_m.defined())
      st = {rp->adam_m.clone(), rp->adam_v.clone(), at::scalar_tensor(static_cast<double>(rp->adam_step))};
    ckpt_.push_back({layout_->params[held_[i]].name, st});
  }
  has_ckpt_ = true;
}

// state_dict.py::_split_optim_state_dict: per object in param-group order the
// same lookup (KeyError: <tensor>), and under strict=True an object that
// requires grad with no saved state raises; a checkpoint with no state at all
// is taken as is. Optimizer.load_state_dict keeps the saved state of the
// objects that require grad and drops every other.
void Optimizer::load(int64_t* index) {
  if (!has_ckpt_) throw OpError(Status::ValueError, "no optimizer checkpoint to load (save_optimizer first)");
  if (layout_->profile.get(Switch::OptimizerCkptReshard) == sw::kOn) fsdp_->module_reshard_all();
  init_state();
  bool any_saved = false;
  for (const auto& c : ckpt_) any_saved = any_saved || !c.second.empty();
  std::vector<std::string> missing;
  int first = -1;
  this->missing(&first, &missing);
  for (size_t i = 0; i < held_.size() && any_saved; ++i) {
    const std::string& name = layout_->params[held_[i]].name;
    if (std::find(missing.begin(), missing.end(), name) != missing.end()) {
      *index = static_cast<int64_t>(i);
      throw OpError(Status::KeyError, "KeyError: <sharded parameter " + name + ">");
    }
    if (objects_[i].requires_grad() && (i >= ckpt_.size() || ckpt_[i].second.empty())) {
      // DCP's FQN: a LoRA parameter is its lora_A/lora_B Linear's weight (a DoRA magnitude its DoraLinearLayer's); a modules_to_save copy's name ends in .weight/.bias.
      const Role role = layout_->params[held_[i]].role;
      const bool lora = role == Role::LoraA || role == Role::LoraB || role == Role::LoraM;
      throw OpError(Status::Exception, "RuntimeError: Missing optimizer state for parameter 'base_model.model." + name +
                                           (lora ? ".weight" : "") + "' in checkpoint. The parameter requires gradients but has no saved "
                                           "optimizer state. To load anyway, use StateDictOptions(strict=False).");
    }
  }
  for (size_t i = 0; i < held_.size(); ++i) {
    ParamTensors* rp = state_of(i);
    if (!rp) continue;
    const bool keep = any_saved && i < ckpt_.size() && !ckpt_[i].second.empty() && objects_[i].requires_grad();
    if (!keep) {
      rp->adam_m = rp->adam_v = at::Tensor();
      rp->adam_step = 0;
      continue;
    }
    const auto& st = ckpt_[i].second;
    rp->adam_m = st[0].clone();
    rp->adam_v = st[1].clone();
    rp->adam_step = static_cast<int64_t>(st[2].item<double>());
    rp->adam_created = ++adam_clock_;
  }
}

}  // namespace fsdpsim::real
