// The optimizer accelerate's prepare builds on one rank (torch/optim/adamw.py::AdamW), and its
// DCP checkpoints (accelerate utils/fsdp_utils.py::save_fsdp_optimizer / load_fsdp_optimizer over
// torch/distributed/checkpoint/state_dict.py): which parameter objects it holds, which have AdamW
// state, and what the last checkpoint saved; its transitions find the objects among the registered
// ones through an OptimizerPort (optimizer.cpp). Same file and class as real_backend/optimizer.hpp.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/machine/fsdp_param.hpp"
#include "model/machine/op_raised.hpp"
#include "model/machine/topology.hpp"

namespace fsdpsim {

// A parameter's name under the PeftModel as torch and DCP print it ("base_model.model.lin0.lora_A.a.weight").
std::string fqn_of(const ParamInfo& pi);

struct Topology;
class FsdpState;
class Provenance;

// What the optimizer's transitions reach on one rank: the parameters (which object each name
// registers now, and its grad), FSDP's state (which copy a parameter registers now, U while its
// group is unsharded; the patched profile reshards every module before a checkpoint) and the
// provenance (a raise's site).
struct OptimizerPort {
  const Topology& topo;
  int rank;
  std::vector<FsdpParam>& params;
  const FsdpState& fsdp;
  Provenance* prov;

  bool is_registered_u(int p) const;  // FsdpState::is_registered_u
  // The module registers p's sharded object S now, and it is the object created at prepare.
  bool s_registered(int p) const;
};

// An optimizer finds its object by identity among model.named_parameters(): the module registers
// the sharded object S (`u_registered`: it registers U instead), and it is the object created at
// prepare (a re-added adapter's is new).
inline bool s_registered(const FsdpParam& ps, bool u_registered) { return ps.present && !ps.recreated && !u_registered; }

struct Optimizer {
  std::vector<int> objects;  // param indices whose S objects the optimizer holds, in pid order
  // Positions in `objects` with AdamW state, in creation order (Optimizer.state's insertion
  // order, which Optimizer.state_dict keeps).
  std::vector<int> state;
  bool has_ckpt = false;
  std::vector<int> saved_state;  // param indices whose FQN had optimizer state in the last checkpoint

  // Optimizer.state is keyed by the object: an object held at two positions (a ram-efficient
  // rank's optimizer, Optimizer::map_by_data_ptr) has one state, at its first.
  bool has_state(int i) const {
    return std::any_of(state.begin(), state.end(), [&](int j) { return objects[j] == objects[i]; });
  }
  // torch/optim/optimizer.py::Optimizer.state_dict numbers an object held twice by its last
  // position (a later entry overwrites the id -> index map): the index a DCP KeyError names.
  int last_position_of(int i) const {
    int last = i;
    for (size_t j = 0; j < objects.size(); ++j)
      if (objects[j] == objects[i]) last = static_cast<int>(j);
    return last;
  }
  // torch/optim/adamw.py::AdamW._init_group: state is created once per object.
  void create_state(int i) {
    if (!has_state(i)) state.push_back(i);
  }
  bool saved(int param) const { return std::find(saved_state.begin(), saved_state.end(), param) != saved_state.end(); }
  // The checkpoint keeps the FQNs of the objects with state.
  void checkpoint() {
    has_ckpt = true;
    saved_state.clear();
    for (int i : state) saved_state.push_back(objects[i]);
  }
  bool object_has_grad(int i, const std::vector<FsdpParam>& params) const;  // position i: its object's .grad is not None
  void init_state(const std::vector<FsdpParam>& params);

  // accelerate/utils/fsdp_utils.py::fsdp2_switch_optimizer_parameters: the S objects registered now.
  void prepare(const OptimizerPort& port);
  // accelerate/accelerator.py::Accelerator._prepare_fsdp2: the data_ptr() map's meta entries
  // (`meta`: the parameters on meta before prepare, in named_parameters() order).
  void map_by_data_ptr(const std::vector<int>& meta);
  // torch/optim/adamw.py::AdamW.step
  void step(const OptimizerPort& port);
  // torch/optim/optimizer.py::Optimizer.zero_grad, then torch/nn/modules/module.py::Module.zero_grad
  void zero_grad(const OptimizerPort& port);
  // accelerate utils/fsdp_utils.py::save_fsdp_optimizer (state_dict.py::_get_optim_state_dict);
  // *index: the optimizer index a KeyError names, *missing: objects not registered.
  [[nodiscard]] Raise save(const OptimizerPort& port, int64_t* index, int* missing);
  // accelerate utils/fsdp_utils.py::load_fsdp_optimizer (state_dict.py::_split_optim_state_dict).
  [[nodiscard]] Raise load(const OptimizerPort& port, int64_t* index, int* missing);
  // Objects not among model.named_parameters() now, compared by identity; *first: the first one's
  // position. is_registered_u(p): the module registers p's unsharded copy U now.
  template <class IsRegisteredU>
  int missing(const std::vector<FsdpParam>& params, const IsRegisteredU& is_registered_u, int* first) const {
    int n = 0;
    *first = -1;
    for (size_t i = 0; i < objects.size(); ++i) {
      const int p = objects[i];
      if (s_registered(params[p], is_registered_u(p))) continue;
      if (*first < 0) *first = static_cast<int>(i);
      ++n;
    }
    return n;
  }
};

// A whole unmanaged replica's gradient differs between the ranks (optimizer.cpp).
bool grad_is_rank_specific(const Topology& topo, const std::vector<FsdpParam>& params, int p);

}  // namespace fsdpsim
