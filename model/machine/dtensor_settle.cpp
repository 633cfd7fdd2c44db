// A matched DTensor all-gather settled on every rank: what each rank's slot-by-slot result
// holds, and what a merge's or a delta_weight read's delta is made of (dtensor.hpp).
#include "model/machine/dtensor.hpp"

#include <algorithm>

namespace fsdpsim {

namespace {

// Ranks r and q's gathers pack the same parameters.
bool same_members(const std::vector<MatchedGather>& g, size_t r, size_t q) {
  const CollRecord& a = *g[r].coll;
  const CollRecord& b = *g[q].coll;
  if (a.member_count != b.member_count) return false;
  const int* ma = g[r].dt.log().members().data() + a.member_begin;
  return std::equal(ma, ma + a.member_count, g[q].dt.log().members().data() + b.member_begin);
}

}  // namespace

void DTensor::settle_deltas(std::vector<MatchedGather>& g, std::vector<uint32_t>& gathered_a, std::vector<GatherSettled>& out) {
  const size_t n = g.size();
  const Topology& topo = *g[0].dt.topo_;
  out.assign(n, GatherSettled{});
  thread_local std::vector<uint32_t> own, versions;  // buffers: this runs per matched all-gather
  own.assign(n, 0);
  versions.assign(n, 0);
  for (size_t r = 0; r < n; ++r) {
    const CollRecord& c = *g[r].coll;
    own[r] = c.digest_begin < 0 ? kNoRows : g[r].dt.log().gathered_versions()[c.digest_begin];
  }
  auto member0 = [&](size_t j) { return g[j].dt.log().members()[g[j].coll->member_begin]; };
  // Rank j posted one B that still holds PEFT's zero init (an all-zero tensor whoever's it is).
  auto posted_zero_b = [&](size_t j) {
    const CollRecord& cj = *g[j].coll;
    if (cj.member_count != 1 || cj.target < 0 || cj.adapter < 0) return false;
    return member0(j) == topo.layers[cj.target].B[cj.adapter] && g[j].dt.b_is_zero(cj.target, cj.adapter);
  };
  for (size_t r = 0; r < n; ++r) {
    const CollRecord& pc = *g[r].coll;
    const DTensor& dr = g[r].dt;
    // What rank r got, slot by slot: a peer's rows where that peer holds rows of r's parameter
    // (elsewhere its slot is padding r drops). A peer that gathered another parameter (ranks out
    // of step, or another adapter's A) filled its slot with rows of that one: a mix.
    const int param = pc.member_count == 1 ? member0(r) : -1;
    const bool for_delta = pc.target >= 0 && pc.adapter >= 0;
    bool foreign = false;
    for (size_t j = 0; j < n; ++j) {
      if (j == r || param < 0) versions[j] = own[j];
      else if (!dr.holds_rows(param, static_cast<int>(j))) versions[j] = kNoRows;
      // a slot this rank's delta never reads (another rank's experts' A rows): what it would hold
      else if (for_delta && !dr.delta_reads_slot(pc.target, pc.adapter, param, static_cast<int>(j)))
        versions[j] = g[j].dt.shard_version(param);
      else if (own[j] != kNoRows && same_members(g, j, r)) versions[j] = own[j];
      // a peer posting a B that is still PEFT's zero init in place of rows that are zero too: equal values
      else if (for_delta && param == topo.layers[pc.target].B[pc.adapter] && posted_zero_b(j) &&
               g[j].dt.b_is_zero(pc.target, pc.adapter))
        versions[j] = 0;
      else {
        // which parameter j packed matters too: two foreign A at one version are still two tensors
        const CollRecord& cj = *g[j].coll;
        const uint32_t pj = cj.member_count > 0 ? static_cast<uint32_t>(member0(j)) + 1 : 0;
        foreign = true;
        versions[j] = version::foreign_slot(own[j] == kNoRows ? 0u : own[j], j, pj);
      }
    }
    // A Partial delta (a Linear with fewer out rows than ranks and r >= world: B moved to Shard(1))
    // is the sum of every rank's local B[:, its columns of r] @ its rows of A (torch 2.13
    // distributed/tensor/_ops/_matrix_ops.py, mm's Shard(1) x Shard(0) -> Partial strategy): a peer
    // holding columns that made another adapter's local adds that one, whatever its slot held.
    if (for_delta && !foreign && dr.delta_is_partial(pc.target, pc.adapter, param))
      for (size_t j = 0; j < n; ++j) {
        const CollRecord& cj = *g[j].coll;
        if (j != r && dr.partial_columns(pc.adapter, static_cast<int>(j)) && (cj.target != pc.target || cj.adapter != pc.adapter))
          foreign = true;
      }
    // with more than one parameter packed the slots are not one parameter's rows
    if (param < 0)
      for (size_t j = 0; j < n; ++j)
        if (versions[j] != kNoRows) versions[j] = version::packed_slot(versions[j], j);
    uint32_t a_version = version::mix_version(versions);
    if (foreign) a_version = version::foreign_mix(a_version);  // one peer's foreign rows
    // A delta_weight read through a DTensor all-gather in which a peer packed another tensor
    // (ranks out of step, or another adapter's A): the delta it returns is no adapter's. Peers'
    // differing shards of this A are the full A itself, so their delta is exact.
    // With B's local rows still zero the product is zero whatever A's slots held (crosscheck
    // --draw checkpoint=100 seed 410121: the real backends read such a delta as exact).
    // Whether the delta this rank returns cannot show the foreign slots. A Linear whose B keeps
    // Shard(0) reads only this rank's B rows: zero rows give a zero delta, and a rank holding none
    // (its out rows all on lower ranks) an empty one, no opinion (peft lora/layer.py::
    // Linear.get_delta_weight; crosscheck seed 36920976). With fewer out rows than ranks B is
    // gathered too (param_wrapper.cpp): the product reads every rank's packed B, so only B zero on
    // every rank makes it zero (crosscheck seed 37010510).
    // An experts delta kept to this rank's chunk of W (delta_weight_gather=on) is empty on a rank
    // holding no expert, and an experts einsum sharded on out keeps B's rows as a Linear does
    // (param_wrapper.cpp); elsewhere B is gathered too (and zero only where every rank posted a
    // zero B in place of zero rows).
    auto blind_to_slots = [&] {
      if (pc.target < 0) return false;  // a gather for no layer (save_adapters' full state dict)
      const int layer = pc.target, ad = pc.adapter;
      const LayerInfo& li = topo.layers[layer];
      if (dr.delta_keeps_b_rows(layer, ad)) {
        const int b = li.B[ad];
        return dr.b_is_zero(layer, ad) || (b >= 0 && !dr.holds_rows(b, static_cast<int>(r)));
      }
      if (dr.delta_chunk_empty(layer, ad)) return true;
      for (size_t j = 0; j < n; ++j) {
        const CollRecord& cj = *g[j].coll;
        if (cj.into != CollRecord::kNowhere || cj.adapter < 0 || !g[j].dt.b_is_zero(cj.target, cj.adapter) ||
            !g[j].dt.b_is_zero(layer, ad))
          return false;
      }
      return true;
    };
    // NaN rows (a part-filled load's tail, DTensor::mark_part_filled) in a slot this rank reads, or
    // in the B rows it keeps: B @ A is NaN wherever they enter, zero factors included (0 * NaN),
    // so only an empty delta (no B rows, no chunk of W here) escapes (crosscheck seeds 40431, 50021).
    auto reads_nan = [&] {
      if (param < 0 || !for_delta) return false;
      const LayerInfo& li = topo.layers[pc.target];
      if (dr.delta_keeps_b_rows(pc.target, pc.adapter)) {
        const int b = li.B[pc.adapter];
        if (b < 0 || !dr.holds_rows(b, static_cast<int>(r))) return false;
        if ((*dr.params_)[b].nan_rows) return true;
      }
      if (dr.delta_chunk_empty(pc.target, pc.adapter)) return false;
      for (size_t j = 0; j < n; ++j) {
        const bool its_rows = j == r || (dr.holds_rows(param, static_cast<int>(j)) && own[j] != kNoRows && same_members(g, j, r));
        if (its_rows && dr.delta_reads_slot(pc.target, pc.adapter, param, static_cast<int>(j)) && (*g[j].dt.params_)[param].nan_rows)
          return true;
      }
      return false;
    };
    const bool nan_read = reads_nan();
    out[r].corrupt_delta = pc.into == CollRecord::kNowhere && pc.sign == 0 && pc.adapter >= 0 && ((foreign && !blind_to_slots()) || nan_read);
    const bool gathered_a_here = for_delta && param == topo.layers[pc.target].A[pc.adapter];
    if (gathered_a_here) gathered_a[r] = a_version;
    if (pc.into != CollRecord::kIntoShard) continue;
    // The other factor: an experts delta redistributed over W's experts (param_wrapper.cpp), or a
    // Conv1D's transposed delta redistributed over W's input rows (lora_layer.cpp), carries every
    // rank's B rows; one built from the full A and B reads the A gathered just before
    // this B. (a_version above is the version of whichever factor this gather carried.)
    uint32_t other = kNoRows;
    if (!gathered_a_here && dr.full_b_delta(pc.target, pc.adapter)) {
      other = gathered_a[r];
    } else if (dr.full_b_delta(pc.target, pc.adapter)) {
      const int b = topo.layers[pc.target].B[pc.adapter];
      std::vector<uint32_t> bv(n, kNoRows);
      for (size_t j = 0; j < n; ++j)
        if (dr.holds_rows(b, static_cast<int>(j))) bv[j] = g[j].dt.shard_version(b);
      other = version::mix_version(bv);
    }
    g[r].dt.settle(pc, a_version, other);
    // a peer's NaN rows of A gathered into this rank's merge (crosscheck seed 40481, world 2)
    const int w = topo.layers[pc.target].weight;
    if (nan_read && dr.holds_rows(w, static_cast<int>(r))) (*g[r].dt.params_)[w].w_s.corrupt = true;
    out[r].settled = true;
  }
}

}  // namespace fsdpsim
