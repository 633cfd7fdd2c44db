// Activation checkpointing on libtorch: the layer's forward notes what autograd saves
// for it, and when the backward reaches the layer's output a tensor hook runs the
// layer's forward again on the kept input, with PEFT's state and the parameters as
// they are then, and compares the two lists the way torch/utils/checkpoint.py does.
#include "real_backend/activation_checkpoint.hpp"

#include <ATen/core/grad_mode.h>

#include "real_backend/activation_dtype.hpp"
#include "real_backend/op_raised.hpp"

namespace fsdpsim::real {

void CheckpointWrapper::reset() {
  layers_.assign(layout_->layers.size(), Layer{});
  saving_ = nullptr;
  outputs_.clear();
}

// torch's mm derivative keeps the weight (transposed) for the input's gradient and the
// input for the weight's, each only when that gradient is needed; the bias keeps nothing.
// Under a MixedPrecisionPolicy each operand is read in its real dtype (U's: the policy's cast) and
// the activation carries its own, so at::linear raises torch's dtype errors itself.
at::Tensor CheckpointWrapper::linear(const at::Tensor& x, at::ScalarType x_dtype, int w, int b) {
  const bool mp = layout_->mixed_precision;
  const at::Tensor& wt = params_->registered(w);
  const at::ScalarType w_dtype = mp ? params_->forward_dtype(w) : params_->param_dtype(w);
  if (saving_ && at::GradMode::is_enabled()) {
    if (x.requires_grad()) saving_->push_back({{wt.size(1), wt.size(0)}, w_dtype});
    if (wt.requires_grad()) saving_->push_back({x.sizes().vec(), mp ? x.scalar_type() : x_dtype});
  }
  if (!mp) return b >= 0 ? at::linear(x, wt, params_->registered(b)) : at::linear(x, wt);
  try {
    const at::Tensor w_in = wt.to(w_dtype);
    return b >= 0 ? at::linear(x, w_in, params_->registered(b).to(params_->forward_dtype(b))) : at::linear(x, w_in);
  } catch (const c10::Error& e) {
    raise_op_error(e);  // aten/src/ATen/native/LinearAlgebra.cpp: addmm's / mm's dtype checks
  }
}

void CheckpointWrapper::begin_forward() {
  outputs_.clear();
  for (Layer& ly : layers_) ly.saved.clear();
}

void CheckpointWrapper::forward(int layer, const at::Tensor& in, const at::Tensor& out) {
  if (!at::GradMode::is_enabled() || !out.requires_grad()) {
    layers_[layer].saved.clear();
    return;
  }
  layers_[layer].input = in.detach().requires_grad_(in.requires_grad());
  outputs_.emplace_back(layer, out);
}

// On one output tensor FSDP's pre-backward hooks fire first, as autograd reaches the
// layer's nodes only after every hook on its output ran.
void CheckpointWrapper::register_hooks(RunLayer run_layer) {
  for (auto& [layer, out] : outputs_) {
    const int l = layer;
    out.register_hook([this, l, run_layer](const at::Tensor&) { recompute(l, run_layer); });
  }
  outputs_.clear();
}

// The recompute reads what the group's pre_backward registered (U) and raises
// _CheckpointFrame.check_recomputed_tensors_match's errors; it stops once it saved as
// many tensors as the forward did, so only a shorter list is a count error.
void CheckpointWrapper::recompute(int layer, const RunLayer& run_layer) {
  const LayerSpec& ls = layout_->layers[layer];
  std::vector<std::pair<int, at::Tensor>> swapped;
  auto use_u = [&](int p) {
    if (p < 0 || params_->group_of(p) < 0) return;
    FsdpParam& fp = (*params_)[p];
    if (!fp.leaf.u.defined() || fp.registered.is_same(fp.leaf.u)) return;
    swapped.emplace_back(p, fp.registered);
    fp.registered = fp.leaf.u;
  };
  use_u(ls.weight);
  use_u(ls.bias);
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    for (int p : ls.adapter_params(static_cast<int>(a))) use_u(p);
  }
  std::vector<SavedTensor> got;
  {
    // put back what the module held, however the recompute ends
    struct Restore {
      CheckpointWrapper& c;
      std::vector<std::pair<int, at::Tensor>>& swapped;
      ~Restore() {
        c.saving_ = nullptr;
        for (auto& [p, t] : swapped) (*c.params_)[p].registered = t;
      }
    } restore{*this, swapped};
    saving_ = &got;
    at::AutoGradMode grad(true);
    run_layer(layer, layers_[layer].input);
  }
  const std::vector<SavedTensor>& saved = layers_[layer].saved;
  const char* error = nullptr;
  if (got.size() < saved.size()) {
    error = "A different number of tensors was saved during the original forward and recomputation.";
  } else {
    for (size_t i = 0; i < saved.size() && !error; ++i)
      if (!(saved[i] == got[i])) error = "Recomputed values for the following tensors have different metadata than during the forward pass.";
  }
  if (!error) return;
  raised_ = layer;
  throw OpError(Status::Exception, std::string("CheckpointError: torch.utils.checkpoint: ") + error);
}

}  // namespace fsdpsim::real
