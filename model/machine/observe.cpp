// Builds the vocabulary's Observation from one rank's abstract state.
#include "model/machine/rank_model.hpp"

namespace fsdpsim {

bool RankModel::in_some_layer(int adapter) const {
  for (const auto& li : topo_->layers)
    if (li.A[adapter] >= 0 && st_.params[li.A[adapter]].present) return true;
  return false;
}

Observation RankModel::observe(int step, const Op& op, const OpResult& r, const CollRecord* colls, size_t n_colls) const {
  Observation o;
  o.step = step;
  o.rank = rank_;
  o.op = op_text(op);
  o.status = r.status;
  o.message = r.message;
  o.index = r.index;
  if (r.has_grads) {
    std::vector<std::string> g;
    // Only adapters with tensors in the model's layers can be seen holding a gradient (a
    // deleted one's FSDPParam may still receive its reduce-scatter); that includes the
    // layers an add_adapter injected before it raised, whose config PEFT dropped.
    for (int a = 0; a < topo_->n_adapters(); ++a)
      if (r.grads.contains(a) && in_some_layer(a)) g.push_back(topo_->adapters[a].name);
    o.grads = std::move(g);
  }
  // Reserved up front: observe runs after every op of every rank, and growing these costs it most.
  o.active.reserve(topo_->adapters.size());
  o.params.reserve(topo_->params.size());
  o.collectives.reserve(n_colls);
  for (int a = 0; a < topo_->n_adapters(); ++a)
    if (st_.active.contains(a)) o.active.push_back(topo_->adapters[a].name);
  o.disabled = st_.disabled;
  for (int p : st_.optimizer.objects)
    if (!is_registered_s(p)) o.opt_unregistered.push_back(topo_->params[p].name);
  o.opt_missing = static_cast<int>(o.opt_unregistered.size());
  o.opt_total = static_cast<int>(st_.optimizer.objects.size());
  // Before prepare (an explicit `prepare` op) there is no FSDP: no groups, no group of any parameter or layer.
  const bool fsdp = st_.prepared;
  for (size_t g = 0; g < topo_->groups.size() && fsdp; ++g) o.groups.push_back({topo_->groups[g].name, st_.groups[g].sharded});
  for (size_t p = 0; p < topo_->params.size(); ++p) {
    const ParamInfo& pi = topo_->params[p];
    const FsdpParam& ps = st_.params[p];
    if (pi.adapter < 0 || !ps.present) continue;
    ParamObs po;
    po.name = pi.name;
    const int g = group_of(static_cast<int>(p));
    po.group = g >= 0 && fsdp ? topo_->groups[g].name : "";
    po.rg_s = ps.rg_s;
    po.rg_u = (g >= 0 && st_.groups[g].has_u) ? static_cast<int8_t>(ps.rg_u) : int8_t{-1};
    po.device = ps.device;
    po.dtype = ps.dtype;
    o.params.push_back(po);
  }
  o.layers = observe_layers();
  for (size_t i = 0; i < n_colls; ++i) o.collectives.push_back(collective_of(colls[i]));
  for (int a = 0; a < topo_->n_adapters(); ++a)
    if (r.deltas.contains(a))
      o.deltas.push_back({topo_->adapters[a].name, r.corrupt_deltas.contains(a) ? WeightClass::Corrupt : WeightClass::Exact});
  for (int p : r.reload_diff) o.reload_diff.push_back(topo_->params[p].name);
  if (op.kind == OpKind::SaveAdapters && r.status == Status::Ok) {
    for (size_t p = 0; p < topo_->params.size(); ++p) {
      if (st_.saved_rows[p] < 0) continue;
      o.saved.push_back({topo_->params[p].name, saved_rows(static_cast<int>(p), rank_), topo_->params[p].dim0,
                         st_.params[p].dtype});
    }
  }
  o.sharded_bytes = sharded_bytes();
  o.peak_unsharded = peak_unsharded();
  return o;
}

std::vector<LayerObs> RankModel::observe_layers() const {
  std::vector<LayerObs> out;
  out.reserve(topo_->layers.size());
  for (size_t l = 0; l < topo_->layers.size(); ++l) {
    LayerObs lo;
    lo.name = topo_->layers[l].name;
    lo.group = st_.prepared ? topo_->groups[topo_->layers[l].group].name : "";
    for (int i = 0; i < st_.layers[l].n_merged; ++i) lo.merged.push_back(topo_->adapters[st_.layers[l].merged[i]].name);
    lo.stored = classify_stored(static_cast<int>(l));
    lo.registered = classify_registered(static_cast<int>(l));
    out.push_back(lo);
  }
  return out;
}

}  // namespace fsdpsim
