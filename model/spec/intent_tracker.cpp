#include "model/spec/intent_tracker.hpp"

namespace fsdpsim::spec {

IntentTracker::IntentTracker(const SpecContext& ctx) {
  const auto& ad = ctx.scenario().adapters;
  RankIntent start;
  start.intended = ad[0].inference_mode ? 0 : 1;
  for (size_t a = 0; a < ad.size(); ++a) {
    if (ad[a].inference_mode) start.inference_mode |= 1u << a;
    if (!ad[a].deferred) start.present |= 1u << a;
  }
  ranks_.assign(ctx.world(), start);
}

void IntentTracker::observe(const SpecContext& ctx, const Op& op, const Observation& o) {
  RankIntent& ri = ranks_[o.rank];
  // peft_model.py::PeftModel.load_adapter reads is_trainable only for a name not in peft_config:
  // a load into an existing adapter keeps its config's inference_mode.
  if (op.kind == OpKind::LoadAdapter && o.status == Status::Ok && !(ri.present & ctx.mask_of(op.names))) {
    const Mask m = ctx.mask_of(op.names);
    ri.inference_mode = op.trainable ? ri.inference_mode & ~m : ri.inference_mode | m;
  }
  if (op.kind == OpKind::AddAdapter || op.kind == OpKind::LoadAdapter || op.kind == OpKind::DeleteAdapter)
    ri.present = ctx.present_in(o);
  if (o.status != Status::Ok) return;
  switch (op.kind) {
    case OpKind::SetAdapter:
      ri.intended = ctx.mask_of(op.names);
      break;
    case OpKind::DisableEnter:
      ri.before_disable = ri.intended;
      ri.intended = 0;
      break;
    case OpKind::DisableExit:  // training resumes, but an adapter loaded for inference stays frozen
      ri.intended = ri.before_disable & ~ri.inference_mode;
      break;
    case OpKind::DeleteAdapter: {
      const Mask left = ri.intended & ctx.present_in(o);
      ri.intended = left ? left : (ri.intended ? ctx.mask_of(o.active) : 0);
      break;
    }
    default:
      break;
  }
}

uint32_t IntentTracker::key_bits(int rank) const {
  const RankIntent& r = ranks_[rank];
  return r.intended | r.before_disable << 8 | r.inference_mode << 16;
}

}  // namespace fsdpsim::spec
