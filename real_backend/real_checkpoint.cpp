// Activation checkpointing on libtorch (`checkpoint LAYER`, hazard B7): the layer's
// forward notes what autograd saves for it, and when the backward reaches the layer's
// output a tensor hook runs the layer's forward again on the kept input, with PEFT's
// state and the parameters as they are then, and compares the two lists the way
// torch/utils/checkpoint.py (non-reentrant, checkpoint_wrapper's default) does.
#include "real_backend/real_rank.hpp"

namespace fsdpsim::real {

// torch's mm derivative keeps the weight (transposed) for the input's gradient and the
// input for the weight's, each only when that gradient is needed; the bias keeps nothing.
at::Tensor RealRank::saving_linear(const at::Tensor& x, at::ScalarType x_dtype, int w, int b) {
  const at::Tensor& wt = registered(w);
  if (saving_ && at::GradMode::is_enabled()) {
    if (x.requires_grad()) saving_->push_back({{wt.size(1), wt.size(0)}, param_dtype(w)});
    if (wt.requires_grad()) saving_->push_back({x.sizes().vec(), x_dtype});
  }
  return b >= 0 ? at::linear(x, wt, registered(b)) : at::linear(x, wt);
}

// After the layer's forward: keep what it saved and its input while its output needs grad.
void RealRank::checkpoint_forward(int layer, const at::Tensor& in, const at::Tensor& out) {
  if (!at::GradMode::is_enabled() || !out.requires_grad()) {
    layers_[layer].ckpt_saved.clear();
    return;
  }
  layers_[layer].ckpt_input = in.detach().requires_grad_(in.requires_grad());
  ckpt_outputs_.emplace_back(layer, out);
}

// After the root's post-forward: the recompute hooks go on last, so on one output tensor
// FSDP's pre-backward hooks fire first, as autograd reaches the layer's nodes only after
// every hook on its output ran.
void RealRank::register_checkpoint_hooks() {
  for (auto& [layer, out] : ckpt_outputs_) {
    const int l = layer;
    out.register_hook([this, l](const at::Tensor&) { checkpoint_recompute(l); });
  }
  ckpt_outputs_.clear();
}

// The recompute reads what the group's pre_backward registered (U) and raises
// _CheckpointFrame.check_recomputed_tensors_match's errors; it stops once it saved as
// many tensors as the forward did, so only a shorter list is a count error.
void RealRank::checkpoint_recompute(int layer) {
  const LayerSpec& ls = layout_->layers[layer];
  std::vector<std::pair<int, at::Tensor>> swapped;
  auto use_u = [&](int p) {
    if (p < 0 || group_of(p) < 0 || !params_[p].leaf.u.defined() || registered(p).is_same(params_[p].leaf.u)) return;
    swapped.emplace_back(p, params_[p].registered);
    params_[p].registered = params_[p].leaf.u;
  };
  use_u(ls.weight);
  use_u(ls.bias);
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    use_u(ls.lora_a[a]);
    use_u(ls.lora_b[a]);
  }
  std::vector<SavedTensor> got;
  {
    // put back what the module held, however the recompute ends
    struct Restore {
      RealRank& r;
      std::vector<std::pair<int, at::Tensor>>& swapped;
      ~Restore() {
        r.saving_ = nullptr;
        for (auto& [p, t] : swapped) r.params_[p].registered = t;
      }
    } restore{*this, swapped};
    saving_ = &got;
    at::AutoGradMode grad(true);
    layer_forward(layer, layers_[layer].ckpt_input);
  }
  const std::vector<SavedTensor>& saved = layers_[layer].ckpt_saved;
  const char* error = nullptr;
  if (got.size() < saved.size()) {
    error = "A different number of tensors was saved during the original forward and recomputation.";
  } else {
    for (size_t i = 0; i < saved.size() && !error; ++i)
      if (!(saved[i] == got[i])) error = "Recomputed values for the following tensors have different metadata than during the forward pass.";
  }
  if (!error) return;
  ckpt_raised_ = layer;
  throw OpError(Status::Exception, std::string("CheckpointError: torch.utils.checkpoint: ") + error);
}

}  // namespace fsdpsim::real
