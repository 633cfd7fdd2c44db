// The DTensor port: one rank's DTensor all-gathers, and what a matched gather leaves in this
// rank's parameters (dtensor.hpp says how a shard merge settles).
#include "model/machine/dtensor.hpp"

#include <fmt/format.h>

#include "model/machine/provenance.hpp"

namespace fsdpsim {

// torch 2.13 distributed/tensor/_ops/utils.py::expand_to_full_mesh_op_strategy: an in-place
// `W.data += delta` (`-=` on unmerge) whose input placement no strategy keeps.
std::string DTensor::inplace_placement_error(int sign) {
  return fmt::format("RuntimeError: aten.{}.Tensor: in-place operations that require placement changes are not supported. The "
                     "input has placement (Shard(dim=0),), but no valid strategy preserves this placement. Please use the "
                     "out-of-place version of this operation instead.",
                     sign > 0 ? "add_" : "sub_");
}

// torch 2.13 distributed/tensor/_dispatch.py::OpDispatcher.unwrap_to_op_info: a DTensor op
// given a plain tensor too.
std::string DTensor::mixed_tensor_error(const std::string& aten_op) {
  return fmt::format("RuntimeError: aten.{} got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor "
                     "before calling distributed operators!",
                     aten_op);
}

// DTensor's matmul all-gathers one parameter (A) for a delta.
void DTensor::all_gather(int param, CollRecord::Into into, int layer, int adapter, int sign, int64_t count, DType wire) {
  CollRecord c{CollOp::AllGather, topo_->params[param].group, count >= 0 ? count : topo_->params[param].shard_numel,
               into, layer, log_->next_contribution(), adapter};
  c.sign = static_cast<int8_t>(sign);
  c.dtype = wire;
  // torch 2.13 distributed/tensor/_redistribute.py::redistribute_local_tensor: on a 1-rank mesh
  // Shard -> Replicate is the local tensor itself, no functional all-gather; the delta applies now.
  c.member_begin = log_->next_member();
  c.member_count = 1;
  log_->pack(param);
  if (topo_->world == 1) {
    if (sign != 0) settle(c, (*params_)[param].ver_s);
    log_->unpack_last();
    return;
  }
  // The merge below changes only the layer's weight, never the gathered A or B: its digest holds.
  log_->contribute(digest_of(param), holds_rows(param, rank_) ? (*params_)[param].ver_s : kNoRows);
  if (sign != 0 && prov_) prov_->deferred.emplace_back(layer, prov_->stamp());
  log_->issue(c);
}

void DTensor::reduce(CollOp op, int param, int64_t count) {
  if (topo_->world == 1) return;
  CollRecord c{op, topo_->params[param].group, count};
  c.dtensor_reduce = true;
  c.member_begin = log_->next_member();
  c.member_count = 1;
  log_->pack(param);
  log_->issue(c);
}

void DTensor::settle(const CollRecord& c, uint32_t version, uint32_t other_version) {
  const LayerInfo& li = topo_->layers[c.target];
  const int a = li.A[c.adapter], b = li.B[c.adapter];
  std::vector<FsdpParam>& params = *params_;
  // The experts einsum sharded on the experts gathers B and keeps this rank's A; with
  // delta_weight_gather=on B's gather follows A's, whose version the simulator passes (param_wrapper.cpp).
  const DeltaId id = log_->members().empty() || c.member_count == 0 || log_->member(c, 0) != b
                         ? delta_id(c.adapter, version, other_version != kNoRows ? other_version : params[b].ver_s,
                                    magnitude_version(c.target, c.adapter))
                         : delta_id(c.adapter, other_version != kNoRows ? other_version : params[a].ver_s, version,
                                    magnitude_version(c.target, c.adapter));
  params[li.weight].w_s.add(c.adapter, id, c.sign);
  // B's own rows times A: NaN rows of B (a part-filled broadcast's tail) make this rank's weight rows
  // NaN, which no merge or unmerge undoes (crosscheck seed 40120, world 2)
  if (params[b].nan_rows) params[li.weight].w_s.corrupt = true;
  note_deferred(c);
}

void DTensor::note_deferred(const CollRecord& c) {
  if (!prov_) return;
  Provenance& pv = *prov_;
  const int w = topo_->layers[c.target].weight;
  for (auto it = pv.deferred.begin(); it != pv.deferred.end(); ++it)
    if (it->first == c.target) {
      Stamp s = it->second;
      s.seq = pv.next_seq();
      pv.params[w].w_s = s;
      pv.deferred.erase(it);
      return;
    }
}

bool DTensor::b_is_zero(int layer, int adapter) const {
  if (layer < 0) return false;
  const LayerInfo& li = topo_->layers[layer];
  return li.B[adapter] >= 0 && delta_id(adapter, 0, (*params_)[li.B[adapter]].ver_s, magnitude_version(layer, adapter)) == kZeroDelta;
}

bool DTensor::experts_gather_b(int layer, int adapter) const {
  const LayerInfo& li = topo_->layers[layer];
  return li.experts > 1 && topo_->world > 1 && topo_->profile.get(Switch::DeltaWeightGather) != sw::kOn &&
         experts_einsum(*topo_, layer, adapter) == ExpertsEinsum::kShardExperts;
}

bool DTensor::full_b_delta(int layer, int adapter) const {
  const LayerInfo& li = topo_->layers[layer];
  if (li.conv1d) return topo_->world > 1;
  return li.experts > 1 && topo_->world > 1 && !experts_gather_b(layer, adapter);
}

// The delta cut to this rank's chunk of W: delta_weight_gather=on over W's shard (the real
// backend's chunk_of_w, peft lora/layer.py::ParamWrapper.get_delta_weight with the #3102 fix).
namespace {
bool cut_to_w_chunk(const Topology& topo, const DTensor& d, const LayerInfo& li) {
  return li.experts > 1 && topo.world > 1 && topo.profile.get(Switch::DeltaWeightGather) == sw::kOn && d.group_of(li.weight) >= 0 &&
         !d.is_registered_u(li.weight);
}
}  // namespace

bool DTensor::delta_reads_slot(int layer, int adapter, int param, int peer) const {
  const LayerInfo& li = topo_->layers[layer];
  if (param != li.A[adapter] || !cut_to_w_chunk(*topo_, *this, li)) return true;
  // A.reshape(E, -1, in): expert e reads A's rows e*r..(e+1)*r (lora/layer.py::ParamWrapper.get_delta_weight)
  const ParamInfo &w = topo_->params[li.weight], &a = topo_->params[param];
  const int64_t r = topo_->adapters[adapter].r;
  const int64_t e0 = int64_t{w.chunk_rows} * rank_, e1 = e0 + w.local_rows(rank_);
  const int64_t a0 = int64_t{a.chunk_rows} * peer, a1 = a0 + a.local_rows(peer);
  return e0 * r < a1 && a0 < e1 * r;
}

bool DTensor::delta_chunk_empty(int layer, int) const {
  const LayerInfo& li = topo_->layers[layer];
  return cut_to_w_chunk(*topo_, *this, li) && !holds_rows(li.weight, rank_);
}

bool DTensor::delta_keeps_b_rows(int layer, int adapter) const {
  const LayerInfo& li = topo_->layers[layer];
  const bool gather_fix = topo_->profile.get(Switch::DeltaWeightGather) == sw::kOn;
  if (li.experts == 0) return topo_->params[li.weight].dim0 >= topo_->world;
  if (li.experts == 1) return !gather_fix && topo_->params[li.B[adapter]].dim0 >= topo_->world;
  return !gather_fix && experts_einsum(*topo_, layer, adapter) == ExpertsEinsum::kShardOut;
}

bool DTensor::delta_is_partial(int layer, int adapter, int param) const {
  const LayerInfo& li = topo_->layers[layer];
  return li.experts == 0 && param == li.B[adapter] && topo_->params[li.weight].dim0 < topo_->world &&
         topo_->adapters[adapter].r >= topo_->world;
}

bool DTensor::partial_columns(int adapter, int peer) const {
  const int64_t r = topo_->adapters[adapter].r, w = topo_->world;
  return peer * ((r + w - 1) / w) < r;
}

// The gathered value is rows of different ranks' differing shards: a base weight
// that is W0 plus no set of deltas, LoRA values no rank has.
void DTensor::mark_mixed(const CollRecord& c, int i) {
  if (c.into != CollRecord::kIntoU) return;  // a merge's mix is in its delta (settle)
  FsdpParam& ps = (*params_)[topo_->groups[c.target].params[i]];
  if (ps.detached) return;  // the ghost's U: no module registers it
  const uint32_t local = ps.ver_u;
  ps.mark_u_mixed();
  rebase_u_delta(topo_->groups[c.target].params[i], local);
}

// The op's edit of U (a disabled forward's unmerge, peft lora/layer.py::Linear.forward, after
// torch _fsdp_param_group.py::FSDPParamGroup.pre_forward's all-gather) read the gathered A and B
// (lora/layer.py::Linear.get_delta_weight): where the gather gave U's A or B other values than the
// local ones the edit was first made of, the edit is the gathered delta.
void DTensor::rebase_u_delta(int p, uint32_t local_ver) {
  const ParamInfo& pi = topo_->params[p];
  if (!is_lora(pi.kind) || pi.kind == ParamKind::LoraM || pi.layer < 0 || pi.adapter < 0) return;
  const LayerInfo& li = topo_->layers[pi.layer];
  const int a = pi.adapter;
  if (li.experts != 0 || li.weight < 0 || li.A[a] < 0 || li.B[a] < 0) return;
  FsdpParam& w = (*params_)[li.weight];
  if (topo_->params[li.weight].group != pi.group || w.detached) return;
  if (w.u_edit[a] == 0 || (*params_)[p].ver_u == local_ver) return;  // the op left this adapter's delta on U alone
  // U's rows are S's (the ranks' weight rows agreed); a weight whose gathered rows were a mix stays one.
  WeightContent base = w.w_s;
  base.corrupt = base.corrupt || w.ver_u == kMixedVersion;
  replay_u_edits(li.weight, base);
}

void DTensor::replay_u_edits(int weight, const WeightContent& gathered) {
  FsdpParam& w = (*params_)[weight];
  const LayerInfo& li = topo_->layers[topo_->params[weight].layer];
  auto ver = [&](int p) { return (*params_)[p].registered_version(is_registered_u(p)); };
  WeightContent got = gathered;
  for (int a = 0; a < topo_->n_adapters(); ++a)
    if (w.u_edit[a] != 0) got.add(a, delta_id(a, ver(li.A[a]), ver(li.B[a]), li.M[a] >= 0 ? ver(li.M[a]) : 0), w.u_edit[a]);
  got.corrupt = got.corrupt || w.u_edit_corrupt;
  w.w_u = got;
}

void DTensor::mark_part_filled(const CollRecord& broadcast, int64_t sent_bytes) {
  const int p = log_->member(broadcast, 0);
  FsdpParam& ps = (*params_)[p];
  if (topo_->params[p].adapter < 0) {
    ps.w_s.corrupt = true;
  } else {
    ps.ver_s = kMixedVersion;
    // accelerate utils/fsdp_utils.py::fsdp2_load_full_state_dict broadcasts the full tensor, then
    // distribute_tensor scatters rank 0's padded chunks (torch distributed/tensor/placement_types.py::
    // Shard._shard_tensor, src_data_rank 0) into a torch.empty chunk of this rank's dtype: the root's
    // chunk bytes come first, the empty tail after them (crosscheck seeds 40120 and 40481, world 2).
    // An element only part-written keeps the tail's high bytes: NaN.
    const ParamInfo& pi = topo_->params[p];
    const int64_t numel = std::max<int64_t>(1, int64_t{pi.dim0} * pi.rest);
    const int64_t chunk = int64_t{pi.chunk_rows} * pi.rest;
    const int64_t filled = chunk * sent_bytes / numel / dtype_bytes(broadcast.dtype);
    ps.nan_rows = pi.local_rows(rank_) > 0 && pi.local_rows(rank_) * pi.rest > filled;
  }
}

bool DTensor::concatenated_u(const std::vector<const DTensor*>& ranks, const std::vector<const CollRecord*>& colls, int i,
                             uint32_t* ver, WeightContent* w) {
  const DTensor& m0 = *ranks[0];
  const int p = m0.log_->member(*colls[0], i);
  const Topology& topo = *m0.topo_;
  const ParamInfo& pi = topo.params[p];
  thread_local std::vector<uint32_t> vers;  // buffers: this runs per differing parameter of a matched all-gather
  thread_local std::vector<const WeightContent*> rows;
  vers.assign(ranks.size(), kNoRows);
  rows.assign(ranks.size(), nullptr);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const DTensor& m = *ranks[r];
    const FsdpParam& ps = (*m.params_)[p];
    if (ps.detached || colls[r]->into != CollRecord::kIntoU) return false;
    const uint64_t d = m.log_->digest(*colls[r], i);
    if (d == 0) continue;  // padding only
    // Changed since it was contributed (a later edit in the same op): not what was gathered. A Linear
    // weight's U edits are the op's, made once the rows arrived (set_gathered replays them).
    if (m.digest_of(p) != d || ps.ver_u != ps.ver_s) return false;
    if (ps.w_u != ps.w_s && (pi.kind != ParamKind::Weight || topo.layers[pi.layer].experts != 0)) return false;
    vers[r] = ps.ver_s;
    rows[r] = &ps.w_s;
  }
  *ver = version::mix_version(vers);
  *w = WeightContent{};
  if (pi.kind != ParamKind::Weight) return true;
  int layer = -1;
  for (size_t l = 0; l < topo.layers.size(); ++l)
    if (topo.layers[l].weight == p) layer = static_cast<int>(l);
  const WeightContent* first = nullptr;
  for (const WeightContent* x : rows)
    if (x && !first) first = x;
  if (layer < 0 || !first) return false;
  const LayerInfo& li = topo.layers[layer];
  for (const WeightContent* x : rows)
    if (x && x->corrupt) return false;
  *w = *first;
  for (int a = 0; a < topo.n_adapters(); ++a) {
    // The rows that hold a delta name its A; a rank whose rows hold none may still hold B_r @ A
    // for a B_r that is zero now (a merge of PEFT's zero-init B adds nothing, WeightContent::add).
    const WeightContent* ref = nullptr;
    for (const WeightContent* x : rows)
      if (x && x->coeff[a] != 0 && !ref) ref = x;
    if (!ref) continue;
    // peft lora/layer.py::Linear.get_delta_weight on a Shard(0) B: each rank's rows are B_r @ A.
    if (li.B[a] < 0 || topo.params[li.B[a]].dim0 != pi.dim0) return false;
    thread_local std::vector<uint32_t> b;
    b.assign(ranks.size(), kNoRows);
    const DeltaId id0 = ref->ver[a];
    bool same = true;
    for (size_t r = 0; r < rows.size(); ++r) {
      if (!rows[r]) continue;
      if (rows[r]->coeff[a] == 0 && ref->coeff[a] == 1 && ranks[r]->b_is_zero(layer, a)) {
        // B_r zero now: these rows are W0's, which B_r @ A at B_r's version 0 adds nothing to.
        same = false;
        b[r] = 0;
        continue;
      }
      if (rows[r]->coeff[a] != ref->coeff[a]) return false;
      const DeltaId id = rows[r]->ver[a];
      same = same && id == id0;
      if (id == kZeroDelta || (id & kTransposedDelta) || (id >> 32) != (id0 >> 32)) return false;  // no common A
      b[r] = static_cast<uint32_t>(id);
    }
    w->coeff[a] = ref->coeff[a];
    if (!same) w->ver[a] = m0.delta_id(a, static_cast<uint32_t>(id0 >> 32), version::mix_version(b));
  }
  return true;
}

void DTensor::set_gathered(const CollRecord& c, int i, uint32_t ver, const WeightContent& w) {
  const int p = log_->member(c, i);
  FsdpParam& ps = (*params_)[p];
  if (topo_->params[p].kind != ParamKind::Weight) {
    const uint32_t local = ps.ver_u;
    ps.ver_u = ver;
    rebase_u_delta(p, local);
    return;
  }
  // U was S's copy at the unshard (FsdpParam::to_unsharded); what the op did to U since, before
  // this gather paired (a disabled forward's unmerge, peft lora/layer.py::Linear.forward), lands on
  // the gathered rows (a rank holding padding only takes every row from its peers), made of the
  // gathered A and B.
  if (topo_->layers[topo_->params[p].layer].experts == 0) return replay_u_edits(p, w);
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

}  // namespace fsdpsim
