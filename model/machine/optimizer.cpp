// The optimizer's object list and DCP optimizer checkpoints.
#include "model/machine/rank_model.hpp"

#include <algorithm>
#include <fmt/format.h>

namespace fsdpsim {

namespace {
// The FQN DCP names a LoRA parameter by: the lora_A/lora_B Linear's weight under the PeftModel
// (a modules_to_save copy's name already ends in .weight or .bias).
std::string fqn_of(const ParamInfo& pi) {
  return fmt::format("base_model.model.{}{}", pi.name.str(), is_lora(pi.kind) ? ".weight" : "");
}
}  // namespace

// accelerate/accelerator.py::Accelerator._prepare_fsdp2 ->
// fsdp_utils.py::fsdp2_switch_optimizer_parameters: the optimizer ends up holding
// the S objects registered right after prepare, in model.parameters() order.
void RankModel::prepare_optimizer() {
  st_.optimizer.objects.clear();
  st_.optimizer.state.clear();
  for (int p : topo_->state_dict_order) {  // model.parameters(): lora_A/lora_B in injection order
    FsdpParam& ps = st_.params[p];
    ps.recreated = false;
    if (!ps.present) continue;
    bool take = topo_->optimizer == OptimizerParams::Trainable ? ps.rg_s : topo_->params[p].adapter >= 0;
    if (take) st_.optimizer.objects.push_back(p);
  }
}

// accelerate/accelerator.py::Accelerator._prepare_fsdp2 keys its old -> new map by each
// parameter's data_ptr(), and every meta tensor's is 0 (a ram-efficient rank > 0): the one key
// 0 is written last for the last meta parameter in named_parameters() order (a frozen base
// weight too), and fsdp2_switch_optimizer_parameters hands every meta entry that object.
// torch's AdamW then steps it once per entry (state keyed by the object).
void RankModel::map_meta_entries_to_last_meta(const std::vector<int>& meta) {
  if (meta.empty()) return;
  for (int& p : st_.optimizer.objects)
    if (std::find(meta.begin(), meta.end(), p) != meta.end()) p = meta.back();
}

// torch/optim AdamW.step: updates, in place, each held object that has a grad
// (an object replaced by a re-added adapter is in no graph; torch/optim/adamw.py::AdamW.step still
// updates the ghost shard it holds when that kept a grad from before the delete).
void Optimizer::step(const Topology& topo, int rank, std::vector<FsdpParam>& params) {
  for (size_t i = 0; i < objects.size(); ++i) {
    const int p = objects[i];
    // torch/optim/adamw.py::AdamW._init_group: state is created for each object with a grad.
    if (object_has_grad(static_cast<int>(i), params)) {
      create_state(static_cast<int>(i));
      if (grad_is_rank_specific(topo, params, p))  // a different update on each rank: the replicas part
        params[p].drift = (params[p].drift * 2654435761u + 0x10000u * static_cast<uint32_t>(rank + 1)) | 1u;
    }
    params[p].optimizer_update();
  }
}

// A whole unmanaged replica's grad is this rank's own: no FSDP group reduce-scatters it
// (torch _fsdp_init.py::_get_managed_states ran at fully_shard, before the adapter existed,
// and PEFT's BaseTuner.inject_adapter registers no hook). It differs between ranks when
// their batches do, unless it is zero: lora_A's grad is B^T-weighted, so zero while its
// layer's lora_B still holds PEFT's zero init (peft lora/layer.py::LoraLayer.reset_lora_parameters).
bool grad_is_rank_specific(const Topology& topo, const std::vector<FsdpParam>& params, int p) {
  const ParamInfo& pi = topo.params[p];
  if (topo.data != Data::PerRank || topo.world < 2 || pi.adapter < 0 || managing_group(topo, params, p) >= 0) return false;
  if (pi.kind != ParamKind::LoraA) return true;
  const FsdpParam& b = params[topo.layers[pi.layer].B[pi.adapter]];
  const bool b_zero = topo.adapters[pi.adapter].init == LoraInit::Zero && b.ver_s == 0 && b.drift == 0;
  return !b_zero;
}

// A training loop's two calls, and nothing more: torch/optim/optimizer.py::Optimizer.zero_grad
// (set_to_none) over the objects the optimizer holds (a detached name's ghost; not a recreated
// name's new object), then torch/nn/modules/module.py::Module.zero_grad over the objects the
// modules register now (U while a group is unsharded). A shard no optimizer holds keeps its
// grad while its group is unsharded, and a later optimizer that holds it steps it.
void RankModel::op_zero_grad() {
  const std::vector<int>& held = st_.optimizer.objects;
  for (size_t i = 0; i < st_.params.size(); ++i) {
    const int p = static_cast<int>(i);
    FsdpParam& ps = st_.params[i];
    const bool u = observer().is_registered_u(p);
    if (std::find(held.begin(), held.end(), p) != held.end()) {
      if (ps.detached) {
        ps.ghost_grad = false;
      } else if (!ps.recreated) {
        ps.grad_s = false;
      }
    }
    if (ps.present && !u) ps.grad_s = false;
    if (u) ps.grad_u = false;
  }
}

bool Optimizer::object_has_grad(int i, const std::vector<FsdpParam>& params) const { return params[objects[i]].optimizer_grad(); }

// torch/distributed/checkpoint/state_dict.py::_init_optim_state (save and load
// both start with it): an optimizer with no state and no grad takes one step with
// zero grads and lr 0 on every object that requires grad, so each gets state and
// keeps its values; zero_grad(set_to_none=True) then drops those zero grads.
void Optimizer::init_state(const std::vector<FsdpParam>& params) {
  if (!state.empty()) return;
  for (size_t i = 0; i < objects.size(); ++i)
    if (object_has_grad(static_cast<int>(i), params)) return;
  for (size_t i = 0; i < objects.size(); ++i)
    if (params[objects[i]].rg_s) create_state(static_cast<int>(i));
}

// torch/distributed/checkpoint/state_dict.py::_get_optim_state_dict: maps each
// optimizer object to an FQN through model.named_parameters() at call time,
// first the state's keys (creation order), then every param group's; an object
// that is not registered raises a bare KeyError with its index.
Raise RankModel::op_save_optimizer() {
  if (topo_->profile.get(Switch::OptimizerCkptReshard) == sw::kOn) fsdp().module_reshard_all();
  st_.optimizer.init_state(st_.params);
  int first = -1;
  res_.opt_missing = observer().optimizer_missing(&first);
  if (res_.opt_missing > 0) {
    for (int i : st_.optimizer.state)
      if (!observer().is_registered_s(st_.optimizer.objects[i])) {
        first = i;
        break;
      }
    // torch/optim/optimizer.py::Optimizer.state_dict: the dict comprehension over a param group
    // keeps each object's last position, the index of its state key and of every param-group
    // entry that holds it (no state: the first missing entry's object)
    first = st_.optimizer.last_position_of(first);
    res_.index = first;
    return raise(Status::KeyError, fmt::format("KeyError: {}", first));
  }
  st_.optimizer.checkpoint();
  return {};
}

// state_dict.py::_split_optim_state_dict: per optimizer object in param-group
// order, the FQN through the mapping captured at call entry (a missing object
// raises KeyError: <tensor>); an object that requires grad and has no saved state
// raises under the default strict=True (a checkpoint with no state at all is
// loaded as is). Optimizer.load_state_dict then keeps the saved state of the
// objects that require grad, in param-group order.
Raise RankModel::op_load_optimizer() {
  Optimizer& opt = st_.optimizer;
  if (!opt.has_ckpt) return raise(Status::ValueError, "no optimizer checkpoint to load (save_optimizer first)");
  if (topo_->profile.get(Switch::OptimizerCkptReshard) == sw::kOn) fsdp().module_reshard_all();
  st_.optimizer.init_state(st_.params);
  int first = -1;
  res_.opt_missing = observer().optimizer_missing(&first);
  // A checkpoint with no state at all is returned as is (no lookup, nothing raises).
  for (size_t i = 0; i < opt.objects.size() && !opt.saved_state.empty(); ++i) {
    const int p = opt.objects[i];
    if (!observer().is_registered_s(p)) {
      res_.index = static_cast<int64_t>(i);
      return raise(Status::KeyError, fmt::format("KeyError: <sharded parameter {}>", topo_->params[p].name.str()));
    }
    if (st_.params[p].rg_s && !opt.saved(p))
      return raise(Status::Exception, fmt::format("RuntimeError: Missing optimizer state for parameter '{}' in checkpoint. The "
                                                  "parameter requires gradients but has no saved optimizer state. To load "
                                                  "anyway, use StateDictOptions(strict=False).",
                                                  fqn_of(topo_->params[p])));
  }
  opt.state.clear();
  for (size_t i = 0; i < opt.objects.size(); ++i)
    if (st_.params[opt.objects[i]].rg_s && opt.saved(opt.objects[i])) opt.create_state(static_cast<int>(i));
  return {};
}

}  // namespace fsdpsim
