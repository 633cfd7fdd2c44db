// Builds the vocabulary's Observation from one rank's abstract state (observer.hpp).
#include "model/machine/observer.hpp"

#include <array>

#include "model/vocab/refill.hpp"

namespace fsdpsim {

bool Observer::in_some_layer(int adapter) const {
  for (const auto& li : topo_->layers)
    if (li.A[adapter] >= 0 && st_->params[li.A[adapter]].present) return true;
  return false;
}

Observation Observer::observe(int step, const Op& op, const OpResult& r) const {
  Observation o;
  observe_into(o, step, op, r);
  return o;
}

// Every field is written: `o` may hold an earlier observation (recycle, sim/core/simulator.hpp), whose
// strings and lists are overwritten in place (model/vocab/refill.hpp) to keep their buffers.
void Observer::observe_into(Observation& o, int step, const Op& op, const OpResult& r, bool spec_fields_only) const {
  const Topology& t = *topo_;
  const RankState& st = *st_;
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
      if (st.active.contains(a)) active.next() = t.adapter_names[a];
  }
  o.disabled = st.disabled;
  {
    Refill<Name> unregistered(o.opt_unregistered);
    for (int p : st.optimizer.objects)
      if (!is_registered_s(p)) unregistered.next() = t.params[p].name;
  }
  o.opt_missing = static_cast<int>(o.opt_unregistered.size());
  o.opt_total = static_cast<int>(st.optimizer.objects.size());
  // Before prepare (an explicit `prepare` op) there is no FSDP: no groups, no group of any parameter or layer.
  const bool fsdp = st.prepared;
  {
    Refill<GroupObs> groups(o.groups);
    for (size_t g = 0; g < t.groups.size() && fsdp; ++g) {
      GroupObs& go = groups.next();
      go.name = t.groups[g].name;
      go.state = st.groups[g].sharded;
    }
  }
  {
    Refill<ParamObs> params(o.params);
    for (size_t p = 0; p < t.params.size(); ++p) {
      const ParamInfo& pi = t.params[p];
      const FsdpParam& ps = st.params[p];
      if (pi.adapter < 0 || !ps.present) continue;
      ParamObs& po = params.next();
      po.name = pi.name;
      const int g = group_of(static_cast<int>(p));
      if (g >= 0 && fsdp) po.group = t.groups[g].name;
      else po.group.clear();
      po.rg_s = ps.rg_s;
      po.rg_u = (g >= 0 && st.groups[g].has_u) ? static_cast<int8_t>(ps.rg_u) : int8_t{-1};
      po.device = ps.device;
      po.dtype = ps.dtype;
    }
  }
  observe_layers_into(o.layers);
  {
    Refill<Collective> collectives(o.collectives);
    const std::vector<CollRecord>& colls = log_->records();  // this op's
    for (size_t i = 0; i < colls.size() && !spec_fields_only; ++i) collective_into(colls[i], collectives.next());
  }
  {
    Refill<DeltaObs> deltas(o.deltas);
    for (int i = 0; i < kMaxAdapters && r.deltas.at(i) >= 0; ++i) {  // in the order delta_weight computed them
      const int a = r.deltas.at(i);
      DeltaObs& d = deltas.next();
      d.adapter = t.adapter_names[a];
      d.value = r.corrupt_deltas.contains(a) ? WeightClass::Corrupt : WeightClass::Exact;
      // The delta of a 4-bit layer: unjudged, as its weight (judge.py::judge_deltas).
      if (op.kind == OpKind::DeltaWeight && !op.names.empty())
        if (const int l = t.layer_index(op.names[0]); l >= 0 && t.layers[l].quant) d.value = WeightClass::Unjudged;
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
        if (st.saved_rows[p] < 0) continue;
        // A half-added adapter's tensor is in every saved adapter's state dict (op_save_adapters):
        // one entry per dict (peft utils/save_and_load.py::get_peft_model_state_dict, per adapter).
        const int a = t.params[p].adapter;
        const int copies = a >= 0 && !st.present.contains(a) ? st.saved_adapters.count() : 1;
        for (int c = 0; c < copies; ++c) {
          SavedObs& so = saved.next();
          so.name = t.params[p].name;
          so.rows = saved_rows(static_cast<int>(p), rank_);
          so.full_rows = t.params[p].dim0;
          so.dtype = st.params[p].dtype;
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
    sharded_bytes_into(o.sharded_bytes);
    peak_unsharded_into(o.peak_unsharded);
  }
}

void Observer::observe_layers_into(std::vector<LayerObs>& out) const {
  const RankState& st = *st_;
  Refill<LayerObs> layers(out);
  for (size_t l = 0; l < topo_->layers.size(); ++l) {
    LayerObs& lo = layers.next();
    lo.name = topo_->layers[l].name;
    const LayerInfo& li = topo_->layers[l];
    // A 4-bit weight accelerate left out of sharding (ignored_params) has no group managing it.
    // (On meta, where a RAM-efficient rank > 0 never quantized it, the weight is a float that fully_shard takes.)
    const bool ignored = li.quant && group_of(li.weight) < 0 && st.params[li.weight].device != Device::Meta;
    if (st.prepared && !ignored) lo.group = topo_->groups[li.group].name;
    else lo.group.clear();
    {
      Refill<Name> merged(lo.merged);
      for (int i = 0; i < st.layers[l].n_merged; ++i) merged.next() = topo_->adapter_names[st.layers[l].merged[i]];
    }
    if (peer_judged_) {  // the simulator writes what is left Exact here
      const bool held_shard = !st.prepared || !st.groups[topo_->layers[l].group].unsharded();
      lo.stored = WeightClass::Exact;
      lo.registered = held_shard ? WeightClass::Exact : classify_registered(static_cast<int>(l));
    } else {
      lo.stored = classify_stored(static_cast<int>(l));
      lo.registered = classify_registered(static_cast<int>(l));
    }
    // A 4-bit weight holds packed codes that every merge requantizes (peft/tuners/lora/bnb.py::
    // Linear4bit.merge): its values are W0 + deltas only up to the quantization error, which the
    // value backends' fp32 checks do not read (judge.py leaves it unjudged), so no class is claimed.
    if (li.quant) lo.stored = lo.registered = WeightClass::Unjudged;
    lo.stored_alt = lo.registered_alt = 0;
  }
}

Collective Observer::collective_of(const CollRecord& c) const {
  Collective out;
  collective_into(c, out);
  return out;
}

void Observer::collective_into(const CollRecord& c, Collective& out) const {
  out.op = c.op;
  out.count = c.count;
  // A broadcast's dtype, and under a mixed_precision policy every collective's wire dtype (the
  // policy's param_dtype / reduce_dtype): a wrong cast is a divergence. Without a policy the wire
  // dtype follows from the parameters' own dtypes, observed already, and is left at fp32.
  out.dtype = c.op == CollOp::Broadcast || topo_->mixed_precision ? c.dtype : DType::F32;
  {
    Refill<CollPart> parts(out.parts);
    for (int i = 0; i < c.member_count; ++i) {
      const ParamInfo& pi = topo_->params[log_->member(c, i)];
      // A one-parameter all-gather (DTensor's redistribution) carries that tensor as sent, padding included.
      CollPart& part = parts.next();
      part.param = pi.name;
      part.numel = c.op == CollOp::Broadcast                               ? static_cast<int64_t>(pi.dim0) * pi.rest
                   : (c.op == CollOp::AllGather || c.dtensor_reduce) && c.member_count == 1 ? c.count
                                                                          : pi.shard_numel;
    }
  }
  out.group = c.op == CollOp::Broadcast ? out.parts[0].param : topo_->groups[c.group].name;
}

namespace {
void by_owner(const Topology& t, const std::array<int64_t, kMaxAdapters + 1>& v, std::vector<OwnerBytes>& out) {
  Refill<OwnerBytes> owners(out);
  for (int a = 0; a < t.n_adapters(); ++a)
    if (v[a] > 0) {
      OwnerBytes& ob = owners.next();
      ob.owner = t.adapter_names[a];
      ob.bytes = v[a];
    }
  if (v[kMaxAdapters] > 0) {
    OwnerBytes& ob = owners.next();
    static const Name base("base");
    ob.owner = base;
    ob.bytes = v[kMaxAdapters];
  }
}
}  // namespace

void Observer::sharded_bytes_into(std::vector<OwnerBytes>& out) const {
  std::array<int64_t, kMaxAdapters + 1> v{};
  for (size_t p = 0; p < topo_->params.size(); ++p) {
    const ParamInfo& pi = topo_->params[p];
    const FsdpParam& ps = st_->params[p];
    if (!ps.present || ps.device == Device::Meta) continue;
    // Until prepare runs fully_shard every parameter is whole.
    int64_t n = group_of(static_cast<int>(p)) >= 0 && st_->prepared ? pi.shard_numel : static_cast<int64_t>(pi.dim0) * pi.rest;
    v[pi.adapter < 0 ? kMaxAdapters : pi.adapter] += n * dtype_bytes(ps.dtype);
  }
  by_owner(*topo_, v, out);
}

void Observer::peak_unsharded_into(std::vector<OwnerBytes>& out) const {
  std::array<int64_t, kMaxAdapters + 1> v{};
  for (size_t g = 0; g < topo_->groups.size(); ++g) {
    if (!((st_->memory.peak_groups >> g) & 1)) continue;
    for (int p : topo_->groups[g].params) {
      int a = topo_->params[p].adapter;
      v[a < 0 ? kMaxAdapters : a] += topo_->params[p].shard_numel * topo_->world * 4;
    }
  }
  by_owner(*topo_, v, out);
}

}  // namespace fsdpsim
