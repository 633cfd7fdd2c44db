// The optimizer's view on one rank: which parameter objects it holds, which have
// AdamW state, and what the last DCP optimizer checkpoint saved; its step and its
// state init on the parameters it is handed (optimizer.cpp). The methods that look
// the objects up in the module tree are RankModel's (optimizer.cpp).
#pragma once
#include <algorithm>
#include <vector>

namespace fsdpsim {

struct FsdpParam;
struct Topology;

struct Optimizer {
  std::vector<int> objects;  // param indices whose S objects the optimizer holds, in pid order
  // Positions in `objects` with AdamW state, in creation order (Optimizer.state's insertion
  // order, which Optimizer.state_dict keeps).
  std::vector<int> state;
  bool has_ckpt = false;
  std::vector<int> saved_state;  // param indices whose FQN had optimizer state in the last checkpoint

  // Optimizer.state is keyed by the object: an object held at two positions (a ram-efficient
  // rank's optimizer, RankModel::map_meta_entries_to_last_meta) has one state, at its first.
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
  void step(const Topology& topo, int rank, std::vector<FsdpParam>& params);
  void init_state(const std::vector<FsdpParam>& params);
};

// A whole unmanaged replica's gradient differs between the ranks (optimizer.cpp).
bool grad_is_rank_specific(const Topology& topo, const std::vector<FsdpParam>& params, int p);

}  // namespace fsdpsim
