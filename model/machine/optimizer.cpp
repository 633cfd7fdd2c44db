// The optimizer's object list and DCP optimizer checkpoints.
#include "model/machine/rank_model.hpp"

namespace fsdpsim {

// accelerate/accelerator.py::Accelerator._prepare_fsdp2 ->
// fsdp_utils.py::fsdp2_switch_optimizer_parameters: the optimizer ends up holding
// the S objects registered right after prepare, in model.parameters() order.
void RankModel::prepare_optimizer() {
  st_.optimizer.clear();
  for (size_t p = 0; p < topo_->params.size(); ++p) {
    ParamState& ps = st_.params[p];
    ps.recreated = false;
    if (!ps.present) continue;
    bool take = topo_->optimizer == OptimizerParams::Trainable ? ps.rg_s : topo_->params[p].adapter >= 0;
    if (take) st_.optimizer.push_back(static_cast<int>(p));
  }
}

// An optimizer object is found by identity among model.named_parameters() only
// while its S is the registered object; an adapter added again after a delete
// brings new Parameter objects the optimizer never saw.
bool RankModel::is_registered_s(int param) const {
  const ParamState& ps = st_.params[param];
  return ps.present && !ps.recreated && !is_registered_u(param);
}

int RankModel::optimizer_missing(int* first_index) const {
  int missing = 0;
  *first_index = -1;
  for (size_t i = 0; i < st_.optimizer.size(); ++i) {
    int p = st_.optimizer[i];
    if (is_registered_s(p)) continue;
    if (*first_index < 0) *first_index = static_cast<int>(i);
    ++missing;
  }
  return missing;
}

// torch/optim AdamW.step: updates, in place, each held object that has a grad
// (an object replaced by a re-added adapter is in no graph; torch/optim/adamw.py::AdamW.step still
// updates the ghost shard it holds when that kept a grad from before the delete).
void RankModel::op_step() {
  for (int p : st_.optimizer) {
    ParamState& ps = st_.params[p];
    if (ps.detached) {
      if (ps.ghost_grad) ps.ghost_ver = (ps.ghost_ver + 1) & 0xffffu;
    } else if (ps.grad_s && !ps.recreated) {
      ps.ver_s = (ps.ver_s + 1) & 0xffffu;
    }
  }
}

// Every shard's grad set to None (what the seed repro does before each step;
// optimizer.zero_grad(set_to_none=True) for the optimizer's own objects).
void RankModel::op_zero_grad() {
  for (auto& ps : st_.params) ps.grad_s = ps.grad_u = ps.ghost_grad = false;
}

// torch/distributed/checkpoint/state_dict.py::_get_optim_state_dict: maps each
// optimizer object to an FQN through model.named_parameters() at call time; an
// object that is not registered raises a bare KeyError with its index.
void RankModel::op_save_optimizer() {
  if (topo_->profile.get(Switch::OptimizerCkptReshard) == sw::kOn) reshard_all();
  int first = -1;
  res_.opt_missing = optimizer_missing(&first);
  if (res_.opt_missing > 0) {
    res_.index = first;
    error(Status::KeyError, "KeyError: " + std::to_string(first));
    return;
  }
  st_.has_opt_ckpt = true;
}

// state_dict.py::_split_optim_state_dict: the same identity lookup through the
// mapping captured at call entry; a missing object raises KeyError: <tensor>.
void RankModel::op_load_optimizer() {
  if (!st_.has_opt_ckpt) {
    error(Status::ValueError, "no optimizer checkpoint to load (save_optimizer first)");
    return;
  }
  if (topo_->profile.get(Switch::OptimizerCkptReshard) == sw::kOn) reshard_all();
  int first = -1;
  res_.opt_missing = optimizer_missing(&first);
  if (res_.opt_missing > 0) {
    res_.index = first;
    error(Status::KeyError, "KeyError: <sharded parameter " + topo_->params[st_.optimizer[first]].name + ">");
  }
}

}  // namespace fsdpsim
