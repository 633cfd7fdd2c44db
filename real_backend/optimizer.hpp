// The optimizer accelerate's prepare builds on the real module: torch.optim.AdamW over
// the S objects (torch/optim/adamw.py), and its DCP checkpoints
// (accelerate utils/fsdp_utils.py::save_fsdp_optimizer / load_fsdp_optimizer over
// torch/distributed/checkpoint/state_dict.py), finding those objects by identity among the
// registered ones. Same file and class as model/machine/optimizer.hpp.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "real_backend/fsdp_state.hpp"

namespace fsdpsim::real {

class Optimizer {
 public:
  Optimizer(const Layout& layout, Parameters& params, FsdpState& fsdp) : layout_(&layout), params_(&params), fsdp_(&fsdp) {}
  // No optimizer (before accelerate's prepare builds it) and no checkpoint.
  void reset();
  // accelerate's fsdp2_switch_optimizer_parameters: the S objects registered now.
  void prepare();
  // _prepare_fsdp2's switch of an optimizer built before prepare: each entry held then is mapped by
  // its tensor's data_ptr() then (meta: 0) to the object registered under that key now.
  void map_by_data_ptr(const std::vector<int>& held_before, const std::vector<int64_t>& data_ptr_before);
  const std::vector<int>& held() const { return held_; }
  // A fresh torch.optim.AdamW built as prepare builds it (after prepare only).
  void renew();
  void step();
  void zero_grad();
  // save_fsdp_optimizer / load_fsdp_optimizer; *index: the optimizer index a KeyError names.
  void save(int64_t* index);
  void load(int64_t* index);
  // Optimizer objects not among model.named_parameters() now, compared by identity.
  int missing(int* first, std::vector<std::string>* names) const;
  int size() const { return static_cast<int>(held_.size()); }

 private:
  ParamTensors* state_of(size_t i);  // the state slot of optimizer position i (nullptr: an object no module holds)
  void init_state();

  const Layout* layout_;
  Parameters* params_;
  FsdpState* fsdp_;
  std::vector<int> held_;               // the parameter index of each object held, in pid order
  std::vector<at::Tensor> objects_;     // the S objects held (by identity)
  bool has_ckpt_ = false;
  int64_t adam_clock_ = 0;  // stamps each new AdamW state (adam_created)
  std::vector<std::pair<std::string, std::vector<at::Tensor>>> ckpt_;
};

}  // namespace fsdpsim::real
