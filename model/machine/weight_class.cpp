// The weight classes the observation reports (model/vocab/observation.hpp::WeightClass): what
// a layer's stored shard and its registered object hold against W0 plus the deltas of its
// merged adapters, computed from the current A and B (a shard's peers' too, after a run).
#include "model/machine/observer.hpp"

namespace fsdpsim {

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
WeightClass Observer::classify_stored(int layer) const {
  const LayerInfo& li = topo_->layers[layer];
  if (!holds_rows(li.weight, rank_)) return WeightClass::Exact;
  if (plain_w0(st_->params[li.weight].w_s, st_->layers[layer])) return WeightClass::Exact;
  std::array<DeltaId, kMaxAdapters> cur{};
  for (int a = 0; a < topo_->n_adapters(); ++a)
    if (li.A[a] >= 0) cur[a] = dtensor().delta_id(a, st_->params[li.A[a]].ver_s, st_->params[li.B[a]].ver_s, dtensor().magnitude_version(layer, a));
  return classify(st_->params[li.weight].w_s, st_->layers[layer], cur, topo_->n_adapters());
}

// The object the module holds now (U while unsharded) against the same sum.
WeightClass Observer::classify_registered(int layer) const {
  const LayerInfo& li = topo_->layers[layer];
  const FsdpParam& w = st_->params[li.weight];
  if (!is_registered_u(li.weight) && !holds_rows(li.weight, rank_)) return WeightClass::Exact;
  const WeightContent& held = is_registered_u(li.weight) ? w.w_u : w.w_s;
  if (plain_w0(held, st_->layers[layer])) return WeightClass::Exact;
  std::array<DeltaId, kMaxAdapters> cur{};
  auto ver = [&](int p) { return st_->params[p].registered_version(is_registered_u(p)); };
  const DTensor dt = dtensor();
  for (int a = 0; a < topo_->n_adapters(); ++a)
    if (li.A[a] >= 0) cur[a] = dt.delta_id(a, ver(li.A[a]), ver(li.B[a]), li.M[a] >= 0 ? ver(li.M[a]) : 0);
  return classify(held, st_->layers[layer], cur, topo_->n_adapters());
}

void Observer::stored_snapshot_into(StoredSnapshot& s) const {
  const size_t n = st_->params.size();
  s.ver_s.resize(n);
  s.replica.resize(n);
  s.replica_kind.resize(n);
  for (size_t p = 0; p < n; ++p) {
    const FsdpParam& ps = st_->params[p];
    s.ver_s[p] = ps.ver_s;
    const ParamInfo& pi = topo_->params[p];
    const bool adapter_tensor = st_->prepared && ps.present && pi.adapter >= 0;
    const bool whole = adapter_tensor && group_of(static_cast<int>(p)) < 0;
    // A peer's managed shard of the name is what a replica is compared with too: all the rows
    // (rank 0 of a tensor with fewer rows than a chunk) are the same values, fewer never are.
    const bool rows = adapter_tensor && !whole && pi.rows_on(rank_);
    s.replica[p] = whole || rows ? (uint64_t{1} << 63) | uint64_t{ps.ver_s} << 32 | ps.drift : 0;
    s.replica_kind[p] = whole ? StoredSnapshot::kWhole : !rows ? StoredSnapshot::kNone
                        : pi.local_rows(rank_) == pi.dim0 ? StoredSnapshot::kAllRows : StoredSnapshot::kSomeRows;
  }
  s.w_s.resize(topo_->layers.size());
  for (size_t l = 0; l < topo_->layers.size(); ++l) s.w_s[l] = st_->params[topo_->layers[l].weight].w_s;
  s.layers.assign(st_->layers.begin(), st_->layers.end());
}

WeightClass Observer::classify_stored(const StoredSnapshot& own, const std::vector<std::pair<int, const StoredSnapshot*>>& peers,
                                       int layer) const {
  const LayerInfo& li = topo_->layers[layer];
  if (!holds_rows(li.weight, rank_)) return WeightClass::Exact;
  if (plain_w0(own.w_s[layer], own.layers[layer])) return WeightClass::Exact;
  std::array<DeltaId, kMaxAdapters> cur{};
  for (int a = 0; a < topo_->n_adapters(); ++a) {
    if (li.A[a] < 0) continue;
    // The parameter every rank would contribute now, in rank order: A, or B for an experts
    // einsum sharded on the experts (experts_gather_b).
    const DTensor dt = dtensor();
    const bool b_gathered = dt.experts_gather_b(layer, a);
    auto across_ranks = [&](int param) {  // the version of the full tensor the ranks hold
      uint32_t v_g = own.ver_s[param];
      if (group_of(param) < 0) return v_g;
      thread_local std::vector<uint32_t> v;  // a buffer: this runs per layer, adapter and observation
      v.assign(topo_->world, kNoRows);
      if (holds_rows(param, rank_)) v[rank_] = v_g;
      for (const auto& [rank, p] : peers)
        if (holds_rows(param, rank)) v[rank] = p->ver_s[param];
      return version::mix_version(v);
    };
    const uint32_t v_g = across_ranks(b_gathered ? li.B[a] : li.A[a]);
    const uint32_t v_b = dt.full_b_delta(layer, a) ? across_ranks(li.B[a]) : own.ver_s[li.B[a]];
    const uint32_t v_m = li.M[a] >= 0 ? own.ver_s[li.M[a]] : 0;  // this rank's magnitude rows scale its weight rows
    cur[a] = b_gathered ? dt.delta_id(a, own.ver_s[li.A[a]], v_g, v_m) : dt.delta_id(a, v_g, v_b, v_m);
  }
  return classify(own.w_s[layer], own.layers[layer], cur, topo_->n_adapters());
}

bool Observer::any_merged() const {
  for (const auto& l : st_->layers)
    if (l.any_merged()) return true;
  return false;
}

}  // namespace fsdpsim
