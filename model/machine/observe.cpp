// Builds the vocabulary's Observation from one rank's abstract state.
#include "model/machine/rank_model.hpp"
#include "model/vocab/refill.hpp"

namespace fsdpsim {

bool RankModel::in_some_layer(int adapter) const {
  for (const auto& li : topo_->layers)
    if (li.A[adapter] >= 0 && st_.params[li.A[adapter]].present) return true;
  return false;
}

Observation RankModel::observe(int step, const Op& op, const OpResult& r, const CollRecord* colls, size_t n_colls) const {
  Observation o;
  observe_into(o, step, op, r, colls, n_colls);
  return o;
}

// Every field is written: `o` may hold an earlier observation (recycle, sim/core/simulator.hpp), whose
// strings and lists are overwritten in place (model/vocab/refill.hpp) to keep their buffers.
void RankModel::observe_into(Observation& o, int step, const Op& op, const OpResult& r, const CollRecord* colls,
                             size_t n_colls, bool spec_fields_only) const {
  const Topology& t = *topo_;
  o.step = step;
  o.rank = rank_;
  op_text_into(op, o.op);
  o.status = r.status;
  o.message = r.message;
  o.index = r.index;
  if (r.has_grads) {
    if (!o.grads) o.grads.emplace();
    Refill<Name> g(*o.grads);
    // Only adapters with tensors in the model's layers can be seen holding a gradient (a
    // deleted one's FSDPParam may still receive its reduce-scatter); that includes the
    // layers an add_adapter injected before it raised, whose config PEFT dropped.
    for (int a = 0; a < t.n_adapters(); ++a)
      if (r.grads.contains(a) && in_some_layer(a)) g.next() = t.adapter_names[a];
  } else {
    o.grads.reset();
  }
  {
    Refill<Name> active(o.active);
    for (int a = 0; a < t.n_adapters(); ++a)
      if (st_.active.contains(a)) active.next() = t.adapter_names[a];
  }
  o.disabled = st_.disabled;
  {
    Refill<Name> unregistered(o.opt_unregistered);
    for (int p : st_.optimizer.objects)
      if (!is_registered_s(p)) unregistered.next() = t.params[p].name;
  }
  o.opt_missing = static_cast<int>(o.opt_unregistered.size());
  o.opt_total = static_cast<int>(st_.optimizer.objects.size());
  // Before prepare (an explicit `prepare` op) there is no FSDP: no groups, no group of any parameter or layer.
  const bool fsdp = st_.prepared;
  {
    Refill<GroupObs> groups(o.groups);
    for (size_t g = 0; g < t.groups.size() && fsdp; ++g) {
      GroupObs& go = groups.next();
      go.name = t.groups[g].name;
      go.state = st_.groups[g].sharded;
    }
  }
  {
    Refill<ParamObs> params(o.params);
    for (size_t p = 0; p < t.params.size(); ++p) {
      const ParamInfo& pi = t.params[p];
      const FsdpParam& ps = st_.params[p];
      if (pi.adapter < 0 || !ps.present) continue;
      ParamObs& po = params.next();
      po.name = pi.name;
      const int g = group_of(static_cast<int>(p));
      if (g >= 0 && fsdp) po.group = t.groups[g].name;
      else po.group.clear();
      po.rg_s = ps.rg_s;
      po.rg_u = (g >= 0 && st_.groups[g].has_u) ? static_cast<int8_t>(ps.rg_u) : int8_t{-1};
      po.device = ps.device;
      po.dtype = ps.dtype;
    }
  }
  observe_layers_into(o.layers);
  {
    Refill<Collective> collectives(o.collectives);
    for (size_t i = 0; i < n_colls && !spec_fields_only; ++i) collective_into(colls[i], collectives.next());
  }
  {
    Refill<DeltaObs> deltas(o.deltas);
    for (int i = 0; i < kMaxAdapters && r.deltas.at(i) >= 0; ++i) {  // in the order delta_weight computed them
      const int a = r.deltas.at(i);
      DeltaObs& d = deltas.next();
      d.adapter = t.adapter_names[a];
      d.value = r.corrupt_deltas.contains(a) ? WeightClass::Corrupt : WeightClass::Exact;
    }
  }
  {
    Refill<Name> reload_diff(o.reload_diff);
    for (int p : r.reload_diff) reload_diff.next() = t.params[p].name;
  }
  {
    Refill<SavedObs> saved(o.saved);
    if (op.kind == OpKind::SaveAdapters && r.status == Status::Ok) {
      for (size_t p = 0; p < t.params.size(); ++p) {
        if (st_.saved_rows[p] < 0) continue;
        // A half-added adapter's tensor is in every saved adapter's state dict (op_save_adapters):
        // one entry per dict (peft utils/save_and_load.py::get_peft_model_state_dict, per adapter).
        const int a = t.params[p].adapter;
        const int copies = a >= 0 && !st_.present.contains(a) ? st_.saved_adapters.count() : 1;
        for (int c = 0; c < copies; ++c) {
          SavedObs& so = saved.next();
          so.name = t.params[p].name;
          so.rows = saved_rows(*topo_, st_.params, static_cast<int>(p), rank_);
          so.full_rows = t.params[p].dim0;
          so.dtype = st_.params[p].dtype;
        }
      }
    }
  }
  o.reload_coincident.clear();  // value backends only
  o.replica_diff.clear();       // the simulator's judge_replicas, after the run
  if (spec_fields_only) {
    o.sharded_bytes.clear();
    o.peak_unsharded.clear();
  } else {
    sharded_bytes_into(*topo_, st_.params, st_.prepared, o.sharded_bytes);
    peak_unsharded_into(*topo_, st_.memory, o.peak_unsharded);
  }
}

std::vector<LayerObs> RankModel::observe_layers() const {
  std::vector<LayerObs> out;
  observe_layers_into(out);
  return out;
}

void RankModel::observe_layers_into(std::vector<LayerObs>& out) const {
  Refill<LayerObs> layers(out);
  for (size_t l = 0; l < topo_->layers.size(); ++l) {
    LayerObs& lo = layers.next();
    lo.name = topo_->layers[l].name;
    if (st_.prepared) lo.group = topo_->groups[topo_->layers[l].group].name;
    else lo.group.clear();
    {
      Refill<Name> merged(lo.merged);
      for (int i = 0; i < st_.layers[l].n_merged; ++i) merged.next() = topo_->adapter_names[st_.layers[l].merged[i]];
    }
    if (peer_judged_) {  // set_peer_judged: the simulator writes what is left Exact here
      const bool held_shard = !st_.prepared || !st_.groups[topo_->layers[l].group].unsharded();
      lo.stored = WeightClass::Exact;
      lo.registered = held_shard ? WeightClass::Exact : classify_registered(static_cast<int>(l));
    } else {
      lo.stored = classify_stored(static_cast<int>(l));
      lo.registered = classify_registered(static_cast<int>(l));
    }
    lo.stored_alt = lo.registered_alt = 0;
  }
}

}  // namespace fsdpsim
