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
#include "real_backend/activation_checkpoint.hpp"
#include "real_backend/comm.hpp"
#include "real_backend/dtensor.hpp"
#include "real_backend/fsdp_state.hpp"
#include "real_backend/layout.hpp"
#include "real_backend/loading.hpp"
#include "real_backend/op_raised.hpp"
#include "real_backend/optimizer.hpp"
#include "real_backend/peft_model.hpp"
#include "real_backend/rank_report.hpp"

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
  // The op switch: each op is one call into the classes below.
  void dispatch(const Op& op);
  // `loss = model(x)`: the module tree's forward under FSDP's hooks; forward_hooks is its body,
  // forward restores the graph flags on a raise.
  void forward(bool grad_enabled);
  void forward_hooks(bool grad_enabled);
  // `generate N`: N no_grad forwards, each fed the previous output where it has the batch's shape.
  void generate(int steps);
  // loss.backward(): autograd, then FSDP's hooks in the order they fired.
  void backward();
  RankReport report(const Op& op, int step);

  const Layout* layout_;
  uint64_t seed_;
  Comm* comm_;
  // The module's classes, each reaching the others only through the ports it was given.
  Parameters params_;   // module._parameters, per parameter name (layout_->params)
  ProcessGroup pg_;     // this rank's Comm and the op's step
  FsdpState fsdp_;      // fully_shard's state: the groups
  DTensor dtensor_;     // the LoRA math's reads of sharded parameters
  Optimizer optimizer_;
  Accelerator accelerator_;
  CheckpointWrapper ckpt_;
  PeftModel peft_;
  // the autograd graph of the last forward
  at::Tensor loss_;
  bool have_output_ = false;
  // generate's next input (the last step's output), undefined outside a generate
  at::Tensor feed_, out_;
  OpResult res_;  // this op's outcome (apply starts it afresh, report reads it)
};

}  // namespace fsdpsim::real
