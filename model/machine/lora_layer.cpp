// LoRA layer behaviour (peft/tuners/lora/layer.py::Linear and
// peft/tuners/tuners_utils.py::BaseTunerLayer). Every edit lands on whichever
// object the module holds now: the shard S, or FSDP's temporary copy U.
#include "model/machine/rank_model.hpp"

namespace fsdpsim {

void WeightContent::add(int adapter, DeltaId version, int sign) {
  if (version == kZeroDelta) return;  // adding or subtracting zero changes nothing
  int8_t& c = coeff[adapter];
  if (c != 0 && ver[adapter] != version) {
    corrupt = true;  // +delta(v1) - delta(v2): not W0 plus any set of current deltas
    return;
  }
  c = static_cast<int8_t>(c + sign);
  ver[adapter] = c == 0 ? 0 : version;
}

// The delta B @ A * scaling is recomputed from the current A and B at every
// merge and unmerge (lora/layer.py::Linear.get_delta_weight); nothing is cached.
DeltaId RankModel::delta_version(int layer, int adapter) const {
  const LayerInfo& li = topo_->layers[layer];
  auto ver = [&](int p) { return st_.params[p].registered_version(is_registered_u(p)); };
  return delta_id(adapter, ver(li.A[adapter]), ver(li.B[adapter]));
}

// B stays exactly zero under init=zero (PEFT's default, lora/layer.py::
// reset_lora_parameters) until an update or a load changes it: B @ A is zero then.
DeltaId RankModel::delta_id(int adapter, uint32_t ver_a, uint32_t ver_b) const {
  if (ver_b == 0 && topo_->adapters[adapter].init == LoraInit::Zero) return kZeroDelta;
  return (static_cast<DeltaId>(ver_a & 0x7fffffffu) << 32) | ver_b;
}

// Which parameter, and what this rank's shard of it holds, as a digest.
uint64_t RankModel::digest_of(int param) const { return param_digest(*topo_, st_.params, param, rank_); }

// The gathered value is rows of different ranks' differing shards: a base weight
// that is W0 plus no set of deltas, LoRA values no rank has.
void RankModel::mark_mixed(const CollRecord& c, int i) {
  if (c.into != CollRecord::kIntoU) return;  // a merge's mix is in its delta (apply_gathered_delta)
  FsdpParam& ps = st_.params[topo_->groups[c.target].params[i]];
  if (ps.detached) return;  // the ghost's U: no module registers it
  const uint32_t local = ps.ver_u;
  ps.mark_u_mixed();
  rebase_u_delta(topo_->groups[c.target].params[i], local);
}

// The op's edit of U (a disabled forward's unmerge, peft lora/layer.py::Linear.forward, after
// torch _fsdp_param_group.py::FSDPParamGroup.pre_forward's all-gather) read the gathered A and B
// (lora/layer.py::Linear.get_delta_weight): it holds (cu - cs) deltas of the gathered version.
void RankModel::rebase_u_delta(int p, uint32_t local_ver) {
  const ParamInfo& pi = topo_->params[p];
  if (!is_lora(pi.kind) || pi.layer < 0 || pi.adapter < 0) return;
  const LayerInfo& li = topo_->layers[pi.layer];
  const int a = pi.adapter;
  if (li.experts != 0 || li.weight < 0 || li.A[a] < 0 || li.B[a] < 0) return;
  FsdpParam& w = st_.params[li.weight];
  if (topo_->params[li.weight].group != pi.group || w.detached) return;
  const int8_t cs = w.w_s.coeff[a], cu = w.w_u.coeff[a];
  if (cs == cu && w.w_s.ver[a] == w.w_u.ver[a]) return;  // the op left this adapter's delta on U alone
  const bool is_b = li.B[a] == p;
  const uint32_t other = st_.params[is_b ? li.A[a] : li.B[a]].ver_u;
  const DeltaId local = is_b ? delta_id(a, other, local_ver) : delta_id(a, local_ver, other);
  const DeltaId gathered = is_b ? delta_id(a, other, st_.params[p].ver_u) : delta_id(a, st_.params[p].ver_u, other);
  if (local == gathered) return;
  const bool was_corrupt = w.w_u.corrupt;
  w.w_u.coeff[a] = cs;
  w.w_u.ver[a] = w.w_s.ver[a];
  w.w_u.corrupt = false;
  w.w_u.add(a, gathered, cu - cs);
  w.w_u.corrupt = w.w_u.corrupt || was_corrupt;
}

void RankModel::mark_part_filled(const CollRecord& broadcast) {
  FsdpParam& ps = st_.params[log_.member(broadcast, 0)];
  if (topo_->params[log_.member(broadcast, 0)].adapter < 0) {
    ps.w_s.corrupt = true;
  } else {
    ps.ver_s = kMixedVersion;
  }
}

bool RankModel::concatenated_u(const std::vector<const RankModel*>& ranks, const std::vector<const CollRecord*>& colls,
                               int i, uint32_t* ver, WeightContent* w) {
  const RankModel& m0 = *ranks[0];
  const int p = m0.log_.member(*colls[0], i);
  const Topology& topo = *m0.topo_;
  const ParamInfo& pi = topo.params[p];
  thread_local std::vector<uint32_t> vers;  // buffers: this runs per differing parameter of a matched all-gather
  thread_local std::vector<const WeightContent*> rows;
  vers.assign(ranks.size(), kNoRows);
  rows.assign(ranks.size(), nullptr);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankModel& m = *ranks[r];
    const FsdpParam& ps = m.st_.params[p];
    if (ps.detached || colls[r]->into != CollRecord::kIntoU) return false;
    const uint64_t d = m.log_.digest(*colls[r], i);
    if (d == 0) continue;  // padding only
    // Changed since it was contributed (a later edit in the same op): not what was gathered.
    if (m.digest_of(p) != d || ps.ver_u != ps.ver_s || ps.w_u != ps.w_s) return false;
    vers[r] = ps.ver_s;
    rows[r] = &ps.w_s;
  }
  *ver = global_a_version(vers);
  *w = WeightContent{};
  if (pi.kind != ParamKind::Weight) return true;
  const LayerInfo* li = nullptr;
  for (const auto& l : topo.layers)
    if (l.weight == p) li = &l;
  const WeightContent* first = nullptr;
  for (const WeightContent* x : rows)
    if (x && !first) first = x;
  if (!li || !first) return false;
  for (const WeightContent* x : rows)
    if (x && (x->corrupt || x->coeff != first->coeff)) return false;
  *w = *first;
  for (int a = 0; a < topo.n_adapters(); ++a) {
    if (first->coeff[a] == 0) continue;
    // peft lora/layer.py::Linear.get_delta_weight on a Shard(0) B: each rank's rows are B_r @ A.
    if (li->B[a] < 0 || topo.params[li->B[a]].dim0 != pi.dim0) return false;
    thread_local std::vector<uint32_t> b;
    b.assign(ranks.size(), kNoRows);
    const DeltaId id0 = first->ver[a];
    bool same = true;
    for (size_t r = 0; r < rows.size(); ++r) {
      if (!rows[r]) continue;
      const DeltaId id = rows[r]->ver[a];
      same = same && id == id0;
      if (id == kZeroDelta || (id & kTransposedDelta) || (id >> 32) != (id0 >> 32)) return false;  // no common A
      b[r] = static_cast<uint32_t>(id);
    }
    if (!same) w->ver[a] = m0.delta_id(a, static_cast<uint32_t>(id0 >> 32), global_a_version(b));
  }
  return true;
}

void RankModel::set_gathered(const CollRecord& c, int i, uint32_t ver, const WeightContent& w) {
  const int p = log_.member(c, i);
  FsdpParam& ps = st_.params[p];
  if (topo_->params[p].kind != ParamKind::Weight) {
    const uint32_t local = ps.ver_u;
    ps.ver_u = ver;
    rebase_u_delta(p, local);
    return;
  }
  // U was S's copy at the unshard (FsdpParam::to_unsharded); what the op did to U since, before
  // this gather paired (a disabled forward's unmerge, peft lora/layer.py::Linear.forward), lands on
  // the gathered rows (a rank holding padding only takes every row from its peers).
  WeightContent got = w;
  for (int a = 0; a < topo_->n_adapters(); ++a) {
    const int8_t cs = ps.w_s.coeff[a], cu = ps.w_u.coeff[a];
    if (cs == cu && ps.w_s.ver[a] == ps.w_u.ver[a]) continue;
    if (cs == 0) got.add(a, ps.w_u.ver[a], cu);
    else if (cu == 0) got.add(a, ps.w_s.ver[a], -cs);
    else if (ps.w_s.ver[a] == ps.w_u.ver[a]) got.add(a, ps.w_u.ver[a], cu - cs);
    else got.corrupt = true;  // a delta replaced by another version's: no symbolic difference
  }
  got.corrupt = got.corrupt || (ps.w_u.corrupt && !ps.w_s.corrupt);
  ps.w_u = got;
}

uint32_t RankModel::global_a_version(const std::vector<uint32_t>& v) {
  uint32_t first = kNoRows;
  bool same = true;
  uint64_t h = 1469598103934665603ull;
  for (uint32_t x : v) {
    if (x == kNoRows) continue;
    if (first == kNoRows) first = x;
    same = same && x == first;
    h = (h ^ x) * 1099511628211ull;
  }
  if (first == kNoRows) return 0;
  if (same) return first;
  return 0x10000u + static_cast<uint32_t>(h % 0xfffe0000ull);
}

// ---------------------------------------------------------------------------
// Note: the deferred shard merge (completed by the simulator)
//
// A merge or unmerge while the group is SHARDED computes its delta through a
// DTensor all-gather of A (or, for an experts einsum sharded on the experts,
// of B): the delta is made of the rows every rank contributed, which one rank
// cannot know alone. So gather_one records the all-gather with into =
// kIntoShard, the adapter and the sign, and leaves the shard untouched. Once
// the simulator has
// matched that all-gather across the ranks (sim/core/simulator.cpp::
// Simulator::apply_gathered_deltas) it works out the version of the A (or B)
// the ranks actually gathered (global_a_version: a mix id when they differ or
// a peer packed another tensor) and calls apply_gathered_delta, which adds
// the delta into this rank's W shard. There is no other path: the unit tests
// run their ops through a simulator too (properties/test_util.hpp::OneRank),
// and on a 1-rank mesh there is no all-gather at all (the delta applies now).
// ---------------------------------------------------------------------------
void RankModel::apply_gathered_delta(const CollRecord& c, uint32_t version, uint32_t other_version) {
  const LayerInfo& li = topo_->layers[c.target];
  const int a = li.A[c.adapter], b = li.B[c.adapter];
  // The experts einsum sharded on the experts gathers B and keeps this rank's A; with
  // delta_weight_gather=on B's gather follows A's, whose version the simulator passes (param_wrapper.cpp).
  const DeltaId id = log_.members().empty() || c.member_count == 0 || log_.member(c, 0) != b
                         ? delta_id(c.adapter, version, other_version != kNoRows ? other_version : st_.params[b].ver_s)
                         : delta_id(c.adapter, other_version != kNoRows ? other_version : st_.params[a].ver_s, version);
  st_.params[li.weight].w_s.add(c.adapter, id, c.sign);
  note_deferred(c);
}

// DTensor's matmul all-gathers one parameter (A) for a delta.
void RankModel::gather_one(int param, CollRecord::Into into, int layer, int adapter, int sign, int64_t count, DType wire) {
  CollRecord c{CollOp::AllGather, topo_->params[param].group, count >= 0 ? count : topo_->params[param].shard_numel,
               into, layer, log_.next_contribution(), adapter};
  c.sign = static_cast<int8_t>(sign);
  c.dtype = wire;
  // torch 2.13 distributed/tensor/_redistribute.py::redistribute_local_tensor: on a 1-rank mesh
  // Shard -> Replicate is the local tensor itself, no functional all-gather; the delta applies now.
  c.member_begin = log_.next_member();
  c.member_count = 1;
  log_.pack(param);
  if (topo_->world == 1) {
    if (sign != 0) apply_gathered_delta(c, st_.params[param].ver_s);
    log_.unpack_last();
    return;
  }
  // The merge below changes only the layer's weight, never the gathered A or B: its digest holds.
  log_.contribute(digest_of(param), holds_rows(param, rank_) ? st_.params[param].ver_s : kNoRows);
  if (sign != 0 && prov_) prov_->deferred.emplace_back(layer, prov_->stamp());
  log_.issue(c);
}

WeightContent& RankModel::registered_weight(int layer) {
  int w = topo_->layers[layer].weight;
  return st_.params[w].registered_weight(is_registered_u(w));
}

Raise RankModel::layer_merge(int layer, int adapter) {
  const int a = topo_->layers[layer].A[adapter];
  return st_.layers[layer].merge(adapter, a >= 0 && st_.params[a].present,
                                 [&](int ad, int sign) { return get_delta_weight(layer, ad, sign); });
}

Raise RankModel::layer_unmerge(int layer) {
  return st_.layers[layer].unmerge([&](int ad, int sign) { return get_delta_weight(layer, ad, sign); });
}

LayerContext RankModel::layer_context(int layer) {
  return LayerContext{*topo_, layer, st_.params, st_.groups, st_.layers, prov_, st_.inference_mode};
}

// tuners_utils.py::BaseTunerLayer.set_adapter: requires_grad = (a in names) and
// not inference_mode on every adapter's A and B, through
// utils/other.py::_set_layer_requires_grad (which only sees registered objects).
void LoraLayer::set_adapter(const LayerContext& c, AdapterSet names, bool inference_mode) {
  const LayerInfo& li = c.topo.layers[c.layer];
  for (int a = 0; a < c.topo.n_adapters(); ++a) {
    if (li.A[a] < 0 || !c.params[li.A[a]].present) continue;
    bool rg = names.contains(a) && !inference_mode;
    set_registered_rg(c.topo, c.params, c.groups, li.A[a], rg);
    set_registered_rg(c.topo, c.params, c.groups, li.B[a], rg);
  }
  active = names;
}

// lora/layer.py::LoraLayer.update_layer (the adapter injected here) ends with the layer's own
// set_adapter(its active adapters, the new config's inference_mode); a new LoRA layer is active
// on the new adapter, frozen (lora/model.py::LoraModel._create_and_replace).
void LoraLayer::update_layer(const LayerContext& c, int adapter, bool inference_mode) {
  if (tuner) return set_adapter(c, active, inference_mode);
  tuner = true;
  set_adapter(c, AdapterSet::of(adapter), inference_mode);
  const LayerInfo& li = c.topo.layers[c.layer];
  set_registered_rg(c.topo, c.params, c.groups, li.A[adapter], false);
  set_registered_rg(c.topo, c.params, c.groups, li.B[adapter], false);
}

// tuners_utils.py::BaseTunerLayer.enable_adapters: disabling freezes every
// adapter (no unmerge); enabling calls the layer's set_adapter(active), which
// ignores inference_mode upstream (#3447) and honours it when patched (#3453).
// A ModulesToSaveWrapper has its own (wrapper_enable_adapters).
void LoraLayer::enable_adapters(const LayerContext& c, bool enabled) {
  if (wrapper) return wrapper_enable_adapters(c, enabled);
  const LayerInfo& li = c.topo.layers[c.layer];
  if (!enabled) {
    for (int a = 0; a < c.topo.n_adapters(); ++a) {
      if (li.A[a] < 0 || !c.params[li.A[a]].present) continue;
      set_registered_rg(c.topo, c.params, c.groups, li.A[a], false);
      set_registered_rg(c.topo, c.params, c.groups, li.B[a], false);
    }
    disabled = true;
    return;
  }
  TrScope scope({c.prov, &c.params, &c.layers}, Tr::EnableAdapters);
  bool respect = c.topo.profile.get(Switch::EnableInferenceMode) == sw::kRespect;
  for (int a = 0; a < c.topo.n_adapters(); ++a) {
    if (li.A[a] < 0 || !c.params[li.A[a]].present) continue;
    bool rg = active.contains(a) && !(respect && c.inference_mode.contains(a));
    set_registered_rg(c.topo, c.params, c.groups, li.A[a], rg);
    set_registered_rg(c.topo, c.params, c.groups, li.B[a], rg);
  }
  disabled = false;
}

// lora/layer.py::Linear.forward: disabled and merged -> unmerge first, base
// only; merged -> base only; otherwise base plus every active adapter.
// Records which registered objects autograd will give a gradient. Returns
// false when the forward raised (an E == 1 ParamWrapper, below).
// peft lora/layer.py::Linear.forward: `result = result + lora_B(lora_A(x)) * scaling` for each
// active adapter, unless disabled or merged (then the base output is the layer's output).
bool RankModel::lora_adds_output(int layer) const {
  const LoraLayer& lp = st_.layers[layer];
  return lp.tuner && !lp.disabled && !lp.any_merged() && lora_active_count(layer) > 0;
}

// The layer's active adapters that it holds (lora_A has them).
int RankModel::lora_active_count(int layer) const {
  const LayerInfo& li = topo_->layers[layer];
  int n = 0;
  for (int a : st_.layers[layer].active) n += li.A[a] >= 0 && st_.params[li.A[a]].present;
  return n;
}

Raise RankModel::layer_forward(int layer, bool grad_enabled, bool* path_rg) {
  const LayerInfo& li = topo_->layers[layer];
  LoraLayer& lp = st_.layers[layer];
  auto use = [&](int p) {
    if (p < 0 || !registered_rg(p)) return;  // p < 0: a ParamWrapper target has no bias
    *path_rg = true;
    if (grad_enabled) st_.graph.grad[p] = 1;
  };
  // other.py::AuxiliaryTrainingWrapper.forward: the running adapter's copy, else original_module.
  if (lp.wrapper && !lp.disabled && lp.copy_active >= 0 && lp.trains.contains(lp.copy_active)) {
    use(li.SW[lp.copy_active]);
    use(li.SB[lp.copy_active]);
    return {};
  }
  use(li.weight);
  use(li.bias);
  if (lp.wrapper) return {};
  if (lp.disabled) {
    // U is registered here (the group's pre_forward ran), so the unmerge reads no shard and cannot raise.
    TrScope scope(site(), Tr::DisabledForwardUnmerge);
    if (lp.any_merged()) return layer_unmerge(layer);
    return {};
  }
  if (lp.any_merged()) return {};
  for (int a : lp.active) {
    if (li.A[a] < 0 || !st_.params[li.A[a]].present) continue;
    // peft 0.21.2 lora/layer.py::ParamWrapper._activate_lora: with E == 1 it sums
    // get_delta_weight (Linear's (out, in) delta) and registers W + delta as the
    // parametrization of the (1, in, out) weight: torch's broadcasting error.
    if (li.experts == 1) {
      std::string err = one_expert_add_error(layer, a, false);
      if (!err.empty()) return raise(Status::ShapeError, err);
    }
    use(li.A[a]);
    use(li.B[a]);
  }
  return {};
}

namespace {

WeightClass classify(const WeightContent& c, const LoraLayer& lp, const std::array<DeltaId, kMaxAdapters>& cur, int n) {
  if (c.corrupt) return WeightClass::Corrupt;
  bool missing = false, extra = false, bad = false;
  for (int a = 0; a < n; ++a) {
    int want = lp.is_merged(a) ? 1 : 0;
    if (cur[a] == kZeroDelta) {
      bad = bad || c.coeff[a] != 0;  // a delta from older, non-zero values
    } else if (c.coeff[a] == want) {
      if (want && c.ver[a] != cur[a]) bad = true;
    } else if (c.coeff[a] == 0 && want == 1) {
      missing = true;
    } else if (c.coeff[a] == 1 && want == 0) {
      // Only a delta of the current values makes W0 + (a set of current deltas).
      if (c.ver[a] == cur[a]) extra = true;
      else bad = true;
    } else {
      bad = true;
    }
  }
  if (bad || (missing && extra)) return WeightClass::Corrupt;
  if (missing) return WeightClass::MissingDelta;
  if (extra) return WeightClass::ExtraDelta;
  return WeightClass::Exact;
}

// W0 itself, nothing merged: classify says exact whatever the current deltas are (every
// coefficient is 0 and none wanted), so they need not be worked out (most layers, most ops).
bool plain_w0(const WeightContent& c, const LoraLayer& lp) {
  if (c.corrupt || lp.n_merged > 0) return false;
  for (int8_t k : c.coeff)
    if (k != 0) return false;
  return true;
}

}  // namespace

// The stored shard against W0 + sum of merged deltas computed from the shards' A, B.
// A rank holding only padding rows of W stores nothing that can be wrong.
WeightClass RankModel::classify_stored(int layer) const {
  const LayerInfo& li = topo_->layers[layer];
  if (!holds_rows(li.weight, rank_)) return WeightClass::Exact;
  if (plain_w0(st_.params[li.weight].w_s, st_.layers[layer])) return WeightClass::Exact;
  std::array<DeltaId, kMaxAdapters> cur{};
  for (int a = 0; a < topo_->n_adapters(); ++a)
    if (li.A[a] >= 0) cur[a] = delta_id(a, st_.params[li.A[a]].ver_s, st_.params[li.B[a]].ver_s);
  return classify(st_.params[li.weight].w_s, st_.layers[layer], cur, topo_->n_adapters());
}

// The object the module holds now (U while unsharded) against the same sum.
WeightClass RankModel::classify_registered(int layer) const {
  const LayerInfo& li = topo_->layers[layer];
  const FsdpParam& w = st_.params[li.weight];
  if (!is_registered_u(li.weight) && !holds_rows(li.weight, rank_)) return WeightClass::Exact;
  const WeightContent& held = is_registered_u(li.weight) ? w.w_u : w.w_s;
  if (plain_w0(held, st_.layers[layer])) return WeightClass::Exact;
  std::array<DeltaId, kMaxAdapters> cur{};
  for (int a = 0; a < topo_->n_adapters(); ++a)
    if (li.A[a] >= 0) cur[a] = delta_version(layer, a);
  return classify(held, st_.layers[layer], cur, topo_->n_adapters());
}

StoredSnapshot RankModel::stored_snapshot() const {
  StoredSnapshot s;
  stored_snapshot_into(s);
  return s;
}

// Into a snapshot of an earlier run: assign keeps the lists' buffers.
void RankModel::stored_snapshot_into(StoredSnapshot& s) const {
  const size_t n = st_.params.size();
  s.ver_s.resize(n);
  s.replica.resize(n);
  for (size_t p = 0; p < n; ++p) {
    const FsdpParam& ps = st_.params[p];
    s.ver_s[p] = ps.ver_s;
    const bool whole = st_.prepared && ps.present && topo_->params[p].adapter >= 0 && group_of(static_cast<int>(p)) < 0;
    s.replica[p] = whole ? (uint64_t{1} << 63) | uint64_t{ps.ver_s} << 32 | ps.drift : 0;
  }
  s.w_s.resize(topo_->layers.size());
  for (size_t l = 0; l < topo_->layers.size(); ++l) s.w_s[l] = st_.params[topo_->layers[l].weight].w_s;
  s.layers.assign(st_.layers.begin(), st_.layers.end());
}

WeightClass RankModel::classify_stored(const StoredSnapshot& own, const std::vector<std::pair<int, const StoredSnapshot*>>& peers,
                                       int layer) const {
  const LayerInfo& li = topo_->layers[layer];
  if (!holds_rows(li.weight, rank_)) return WeightClass::Exact;
  if (plain_w0(own.w_s[layer], own.layers[layer])) return WeightClass::Exact;
  std::array<DeltaId, kMaxAdapters> cur{};
  for (int a = 0; a < topo_->n_adapters(); ++a) {
    if (li.A[a] < 0) continue;
    // The parameter every rank would contribute now, in rank order: A, or B for an experts
    // einsum sharded on the experts (experts_gather_b).
    const bool b_gathered = experts_gather_b(layer, a);
    auto across_ranks = [&](int param) {  // the version of the full tensor the ranks hold
      uint32_t v_g = own.ver_s[param];
      if (group_of(param) < 0) return v_g;
      thread_local std::vector<uint32_t> v;  // a buffer: this runs per layer, adapter and observation
      v.assign(topo_->world, kNoRows);
      if (holds_rows(param, rank_)) v[rank_] = v_g;
      for (const auto& [rank, p] : peers)
        if (holds_rows(param, rank)) v[rank] = p->ver_s[param];
      return global_a_version(v);
    };
    const uint32_t v_g = across_ranks(b_gathered ? li.B[a] : li.A[a]);
    const uint32_t v_b = experts_full_b_delta(layer, a) ? across_ranks(li.B[a]) : own.ver_s[li.B[a]];
    cur[a] = b_gathered ? delta_id(a, own.ver_s[li.A[a]], v_g) : delta_id(a, v_g, v_b);
  }
  return classify(own.w_s[layer], own.layers[layer], cur, topo_->n_adapters());
}

bool RankModel::any_merged() const {
  for (const auto& l : st_.layers)
    if (l.any_merged()) return true;
  return false;
}

}  // namespace fsdpsim
