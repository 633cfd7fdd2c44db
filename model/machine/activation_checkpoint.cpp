// Activation checkpointing (`checkpoint LAYER`, hazard B7): the layer sits in a
// checkpoint_wrapper (accelerate/utils/fsdp_utils.py::fsdp2_apply_ac, before
// fully_shard), so its forward keeps only its input and backward runs the layer's
// forward again. torch/utils/checkpoint.py (non-reentrant) then compares what the
// recompute saved for backward with what the original forward saved, tensor by
// tensor, and raises CheckpointError on a shorter list or on other metadata. The
// recompute reads PEFT's state at backward time (lora/layer.py::Linear.forward reads
// active_adapters, merged and disable_adapters when called) and the parameters the
// group's pre_backward registered, so a flag change between forward and backward
// changes what it saves.
#include "model/machine/activation_checkpoint.hpp"

#include "model/machine/provenance.hpp"

namespace fsdpsim {

namespace {

// The rows of every backend's batch (real_backend/values.hpp, the upstream session's BATCH).
constexpr int64_t kBatchRows = 3;

constexpr const char* kCountMessage =
    "CheckpointError: torch.utils.checkpoint: A different number of tensors was saved during the original forward "
    "and recomputation.";
constexpr const char* kMetadataMessage =
    "CheckpointError: torch.utils.checkpoint: Recomputed values for the following tensors have different metadata "
    "than during the forward pass.";

}  // namespace

// What autograd saves for the layer's forward. A linear y = x W^T saves W^T when x needs
// grad and x when W does (torch's mm derivative saves only what a needed gradient reads);
// the bias, PEFT's scaling and the sum save nothing. PEFT's Linear.forward runs the base
// layer, then per active adapter lora_B(lora_A(x)) on x cast to lora_A's dtype
// (peft lora/layer.py::Linear.forward, _cast_input_dtype); merged or disabled, the base only.
void CheckpointWrapper::saves(bool input_rg, std::vector<SavedMeta>* out) const {
  out->clear();
  const LayerInfo& li = c_.own.info();
  const LoraLayer& lp = module_;
  auto dims = [&](int p) { return std::pair<int64_t, int64_t>(c_.own.topo.params[p].dim0, c_.own.topo.params[p].rest); };
  auto linear = [&](int w, bool x_rg, DType x_dtype) {
    auto [rows, cols] = dims(w);  // (out, in)
    if (x_rg) out->push_back({cols, rows, c_.own.params[w].dtype});
    if (c_.own.registered_rg(w)) out->push_back({kBatchRows, cols, x_dtype});
  };
  linear(li.weight, input_rg, c_.own.params[li.weight].dtype);
  if (lp.disabled || lp.any_merged()) return;
  for (int a : lp.active) {
    const int pa = li.A[a], pb = li.B[a];
    if (pa < 0 || !c_.own.params[pa].present) continue;
    const DType dt = c_.own.params[pa].dtype;
    linear(pa, input_rg, dt);
    linear(pb, input_rg || c_.own.registered_rg(pa), dt);
  }
}

void CheckpointWrapper::forward(bool input_rg) {
  saves(input_rg, &graph_.ckpt_saved[c_.own.layer]);
  graph_.ckpt_input_rg[c_.own.layer] = input_rg;
}

// The recompute when autograd reaches the layer in backward. Disabled and merged, it
// unmerges first, as the forward does.
Raise CheckpointWrapper::recompute() {
  TrScope scope(c_.scope, Tr::CheckpointRecompute);
  const std::vector<SavedMeta>& forward = graph_.ckpt_saved[c_.own.layer];
  if (module_.disabled && module_.any_merged())
    if (Raise r = module_.unmerge(c_)) return r;
  thread_local std::vector<SavedMeta> recomputed;
  saves(graph_.ckpt_input_rg[c_.own.layer], &recomputed);
  // torch/utils/checkpoint.py::_CheckpointFrame.check_recomputed_tensors_match: the recompute
  // stops once it saved as many as the forward did, so only a shorter list is a count error.
  if (recomputed.size() < forward.size()) return c_.raise(Status::Exception, kCountMessage);
  for (size_t i = 0; i < forward.size(); ++i)
    if (forward[i] != recomputed[i]) return c_.raise(Status::Exception, kMetadataMessage);
  return {};
}

}  // namespace fsdpsim
