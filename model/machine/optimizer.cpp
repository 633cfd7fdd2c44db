// The optimizer's object list, its step and zero_grad, and DCP optimizer checkpoints.
#include "model/machine/optimizer.hpp"

#include <fmt/format.h>

#include "model/machine/fsdp_state.hpp"
#include "model/machine/provenance.hpp"

namespace fsdpsim {

// The FQN DCP names a LoRA parameter by: the lora_A/lora_B Linear's weight under the PeftModel
// (a modules_to_save copy's name already ends in .weight or .bias).
std::string fqn_of(const ParamInfo& pi) {
  return fmt::format("base_model.model.{}{}", pi.name.str(), is_lora(pi.kind) ? ".weight" : "");
}

// accelerate/accelerator.py::Accelerator._prepare_fsdp2 ->
// fsdp_utils.py::fsdp2_switch_optimizer_parameters: the optimizer ends up holding
// the S objects registered right after prepare, in model.parameters() order.
void Optimizer::prepare(const OptimizerPort& port) {
  objects.clear();
  state.clear();
  for (int p : port.topo.state_dict_order) {  // model.parameters(): lora_A/lora_B in injection order
    FsdpParam& ps = port.params[p];
    ps.recreated = false;
    if (!ps.present) continue;
    bool take = port.topo.optimizer == OptimizerParams::Trainable ? ps.rg_s : port.topo.params[p].adapter >= 0;
    if (take) objects.push_back(p);
  }
}

// accelerate/accelerator.py::Accelerator._prepare_fsdp2 keys its old -> new map by each
// parameter's data_ptr(), and every meta tensor's is 0 (a ram-efficient rank > 0): the one key
// 0 is written last for the last meta parameter in named_parameters() order (a frozen base
// weight too), and fsdp2_switch_optimizer_parameters hands every meta entry that object.
// torch's AdamW then steps it once per entry (state keyed by the object).
void Optimizer::map_by_data_ptr(const std::vector<int>& meta) {
  if (meta.empty()) return;
  for (int& p : objects)
    if (std::find(meta.begin(), meta.end(), p) != meta.end()) p = meta.back();
}

bool OptimizerPort::is_registered_u(int p) const { return fsdp.is_registered_u(p); }
bool OptimizerPort::s_registered(int p) const { return fsdpsim::s_registered(params[p], is_registered_u(p)); }

// torch/optim AdamW.step: updates, in place, each held object that has a grad
// (an object replaced by a re-added adapter is in no graph; torch/optim/adamw.py::AdamW.step still
// updates the ghost shard it holds when that kept a grad from before the delete).
void Optimizer::step(const OptimizerPort& port) {
  const Topology& topo = port.topo;
  std::vector<FsdpParam>& params = port.params;
  for (size_t i = 0; i < objects.size(); ++i) {
    const int p = objects[i];
    // torch/optim/adamw.py::AdamW._init_group: state is created for each object with a grad.
    if (object_has_grad(static_cast<int>(i), params)) {
      create_state(static_cast<int>(i));
      if (grad_is_rank_specific(topo, params, p))  // a different update on each rank: the replicas part
        params[p].drift = (params[p].drift * 2654435761u + 0x10000u * static_cast<uint32_t>(port.rank + 1)) | 1u;
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
void Optimizer::zero_grad(const OptimizerPort& port) {
  const std::vector<int>& held = objects;
  for (size_t i = 0; i < port.params.size(); ++i) {
    const int p = static_cast<int>(i);
    FsdpParam& ps = port.params[i];
    const bool u = port.is_registered_u(p);
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
Raise Optimizer::save(const OptimizerPort& port, int64_t* index, int* n_missing) {
  if (port.topo.profile.get(Switch::OptimizerCkptReshard) == sw::kOn) port.fsdp.module_reshard_all();
  init_state(port.params);
  int first = -1;
  *n_missing = missing(port.params, [&port](int p) { return port.is_registered_u(p); }, &first);
  if (*n_missing > 0) {
    for (int i : state)
      if (!port.s_registered(objects[i])) {
        first = i;
        break;
      }
    // torch/optim/optimizer.py::Optimizer.state_dict: the dict comprehension over a param group
    // keeps each object's last position, the index of its state key and of every param-group
    // entry that holds it (no state: the first missing entry's object)
    first = last_position_of(first);
    *index = first;
    return raise_at(port.prov, Status::KeyError, fmt::format("KeyError: {}", first));
  }
  checkpoint();
  return {};
}

// state_dict.py::_split_optim_state_dict: per optimizer object in param-group
// order, the FQN through the mapping captured at call entry (a missing object
// raises KeyError: <tensor>); an object that requires grad and has no saved state
// raises under the default strict=True (a checkpoint with no state at all is
// loaded as is). Optimizer.load_state_dict then keeps the saved state of the
// objects that require grad, in param-group order.
Raise Optimizer::load(const OptimizerPort& port, int64_t* index, int* n_missing) {
  if (!has_ckpt) return raise_at(port.prov, Status::ValueError, "no optimizer checkpoint to load (save_optimizer first)");
  if (port.topo.profile.get(Switch::OptimizerCkptReshard) == sw::kOn) port.fsdp.module_reshard_all();
  init_state(port.params);
  int first = -1;
  *n_missing = missing(port.params, [&port](int p) { return port.is_registered_u(p); }, &first);
  // A checkpoint with no state at all is returned as is (no lookup, nothing raises).
  for (size_t i = 0; i < objects.size() && !saved_state.empty(); ++i) {
    const int p = objects[i];
    if (!port.s_registered(p)) {
      *index = static_cast<int64_t>(i);
      return raise_at(port.prov, Status::KeyError, fmt::format("KeyError: <sharded parameter {}>", port.topo.params[p].name.str()));
    }
    if (port.params[p].rg_s && !saved(p))
      return raise_at(port.prov, Status::Exception, fmt::format("RuntimeError: Missing optimizer state for parameter '{}' in checkpoint. The "
                                                  "parameter requires gradients but has no saved optimizer state. To load "
                                                  "anyway, use StateDictOptions(strict=False).",
                                                  fqn_of(port.topo.params[p])));
  }
  state.clear();
  for (size_t i = 0; i < objects.size(); ++i)
    if (port.params[objects[i]].rg_s && saved(objects[i])) create_state(static_cast<int>(i));
  return {};
}

}  // namespace fsdpsim
