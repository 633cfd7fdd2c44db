#include "model/spec/s1_grads_checker.hpp"

#include <fmt/format.h>

namespace fsdpsim::spec {

void S1GradsChecker::observe(const SpecContext& ctx, const Op& op, const Observation& o, std::vector<Finding>& out) {
  intent_.observe(ctx, op, o);
  judge(ctx, op, o, intent_.intended(o.rank), out);
}

void S1GradsChecker::judge(const SpecContext& ctx, const Op& op, const Observation& o, Mask intended,
                           std::vector<Finding>& out) {
  RankOutput& r = ranks_[o.rank];
  if (op.kind == OpKind::GradientSync) r.sync_off = !op.sync;
  if (op.is_training()) {
    // A backward of an eval output fails by design; one whose forward ran before
    // the user changed adapters answers to no set_adapter in particular.
    const bool from_eval = op.kind == OpKind::Backward && (r.eval_output || r.flags_since_forward);
    r.eval_output = false;
    // An unsynced micro-batch sends no gradient to any shard by design; the synced step after it
    // is judged against the adapters active then, so a gradient U kept from an earlier
    // micro-batch of another adapter is a finding there.
    if (!r.sync_off) check(ctx, o, intended, from_eval, out);
  }
  if (op.kind == OpKind::Forward || op.kind == OpKind::Eval || op.kind == OpKind::Generate) {
    r.eval_output = op.kind != OpKind::Forward;  // generate: its last no_grad forward's output
    r.flags_since_forward = false;
  }
  if (sets_flags(op.kind)) r.flags_since_forward = true;
}

void S1GradsChecker::check(const SpecContext& ctx, const Observation& o, Mask intended, bool from_eval,
                           std::vector<Finding>& out) const {
  // FSDP's uniform-dtype AssertionError at lazy init (beyond-seeds B2) stops a legal training
  // step before any gradient, like no_grad_fn: X's shards get none.
  if (o.status != Status::Ok && o.status != Status::NoGradFn && o.status != Status::AssertionError) return;
  if (from_eval || o.disabled) return;  // disabled trains nothing
  for (const auto& l : o.layers)
    if (!l.merged.empty()) return;  // merged layers skip the LoRA path by design
  const Mask want = intended & ctx.present_in(o);
  const Mask got = o.status == Status::Ok && o.grads ? ctx.mask_of(*o.grads) : 0;
  if (want == got) return;
  std::string detail = fmt::format("{}, got {}", want ? "expected gradients on " + ctx.text(want) : "expected no gradients",
                                   o.status != Status::Ok ? std::string(status_name(o.status)) : ctx.text(got));
  const Mask wrong = want ^ got;
  for (const auto& p : o.params)
    if (ctx.owner_mask(p.name) & wrong) {
      fmt::format_to(std::back_inserter(detail), "; {}", param_detail(o, p.name));
      break;
    }
  out.push_back(finding("S1", o.step, o.rank, detail));
  out.back().kind = got & ~want ? "extra" : "missing";
}

void S1GradsChecker::pack_key(const SpecContext& ctx, KeyWriter& key) const {
  for (int rank = 0; rank < ctx.world(); ++rank) {
    const RankOutput& r = ranks_[rank];
    key.word(intent_.key_bits(rank) | (r.eval_output ? 1u << 24 : 0) | (r.flags_since_forward ? 1u << 25 : 0) |
             (r.sync_off ? 1u << 27 : 0));
  }
}

}  // namespace fsdpsim::spec
