// Why this key covers everything that affects future behaviour:
//
// A rank is its RankState plus per-op scratch (OpResult, collectives,
// digests) that RankModel::apply clears before every op, so the key walks every field
// of RankState except memory.peak/peak_groups (reset from memory.now at
// the start of each op). The static_asserts below fail when a field is added
// to the state, so this file is revisited then.
//
// Versions (ver_s, ver_u, ghost_ver, saved_ver, and the A/B versions packed
// in a merged delta id, see version::delta_id) are object ids: the model
// compares them for equality (same parameter, across ranks, inside delta ids),
// tests B's against 0 (B still zero under init=zero), assigns constants (0 and
// 0x100 when a deferred adapter is added or loaded, kMixedVersion to a mixed
// U), and an optimizer step turns a counter (ver_s, or a ghost's ghost_ver)
// into counter + 1, meant as fresh values. Those constants stay as they are
// for the parameters they apply to.
// They are renamed per parameter, over all ranks, order-preserving (the k-th
// smallest non-constant value becomes k), so states that differ only by how
// many steps ran merge. The renaming is exact when every value of the
// parameter is <= each of its counters: then counter + 1 equals no value held
// anywhere, in either state, and the bijection extends to the successors.
// Otherwise (a reload rewound a counter below a copy, or ranks stepped
// differently) that parameter keeps its raw values, and a mode word records
// which rule applied. A delta id of a mixed A or B (ranks contributed different
// rows: a hash of raw versions) keeps the whole state raw. Wrap-around at
// 0xffff needs 65535 steps and is out of any explored depth.
#include "model/machine/state_key.hpp"

#include <algorithm>

#include "model/machine/version_token.hpp"

namespace fsdpsim {

static_assert(sizeof(WeightContent) == 80, "WeightContent changed: extend append_state_key");
// FsdpParam::u_edit is left out: the unshard that starts a gather clears it, and only that
// gather's pairing reads it (DTensor::replay_u_edits), in the same op.
static_assert(sizeof(FsdpParam) == 208, "FsdpParam changed: extend append_state_key");
static_assert(sizeof(FsdpParamGroup) == 40, "FsdpParamGroup changed: extend append_state_key");
static_assert(sizeof(LoraLayer) == 24, "LoraLayer changed: extend append_state_key");
static_assert(sizeof(Optimizer) == 80, "Optimizer changed: extend append_state_key");
static_assert(sizeof(UnshardedMemory) == 24, "UnshardedMemory changed: extend append_state_key");
static_assert(sizeof(PendingGraph) == 152, "PendingGraph changed: extend append_state_key");
static_assert(sizeof(RankState) == 560, "RankState changed: extend append_state_key");
static_assert(sizeof(ModelStateEntry) == 96, "ModelStateEntry changed: extend append_state_key");

namespace {

using version::kLoaded;

// U's fields (ver_u, w_u, rg_u) are read only while the group is
// UNSHARDED (is_registered_u); each unshard rewrites them from S first
// (FsdpParamGroup::unshard), so while SHARDED they are dead and left out. grad_u
// is not: an unsynced backward leaves it on the resharded U (post_backward).
bool u_live(const Observer& m, size_t p) {
  const int g = m.group_of(static_cast<int>(p));
  return g >= 0 && m.state().groups[g].unsharded();
}

struct Renamer {
  const Topology& topo;
  std::vector<std::vector<uint32_t>> values;  // per param: every value held
  std::vector<uint8_t> raw;                   // per param: keep raw values
  std::vector<uint8_t> zero_fixed, loaded_fixed;  // per param: 0 / 0x100 mean something
  bool all_raw = false;

  explicit Renamer(const Topology& t)
      : topo(t), values(t.params.size()), raw(t.params.size(), 0), zero_fixed(t.params.size(), 0), loaded_fixed(t.params.size(), 0) {
    for (size_t p = 0; p < t.params.size(); ++p) {
      const ParamInfo& pi = t.params[p];
      if (pi.adapter < 0) continue;
      const AdapterDecl& a = t.adapters[pi.adapter];
      zero_fixed[p] = a.deferred || (pi.kind == ParamKind::LoraB && a.init == LoraInit::Zero);
      loaded_fixed[p] = a.deferred;
    }
  }
  bool fixed_version(size_t p, uint32_t v) const {
    return v == kMixedVersion || (v == 0 && zero_fixed[p]) || (v == kLoaded && loaded_fixed[p]);
  }

  template <typename F>
  void each_delta(const Observer& m, F f) const {
    const RankState& st = m.state();
    for (const auto& li : topo.layers) {
      const bool u = u_live(m, static_cast<size_t>(li.weight));
      for (const WeightContent* w : {&st.params[li.weight].w_s, &st.params[li.weight].w_u}) {
        if (w == &st.params[li.weight].w_u && !u) continue;
        for (int a = 0; a < topo.n_adapters(); ++a)
          if (w->coeff[a] != 0 && li.A[a] >= 0) f(li.A[a], li.B[a], w->ver[a]);
      }
    }
  }

  void collect(const std::vector<Observer>& ranks) {
    std::vector<uint32_t> min_counter(topo.params.size(), 0xffffffffu);
    for (const auto& m : ranks) {
      const RankState& st = m.state();
      for (size_t p = 0; p < st.params.size(); ++p) {
        const FsdpParam& ps = st.params[p];
        values[p].push_back(ps.ver_s);
        if (u_live(m, p)) values[p].push_back(ps.ver_u);
        if (u_live(m, p)) values[p].push_back(ps.ver_s_at_gather);
        if (ps.detached) values[p].push_back(ps.ghost_ver);
        if (st.saved_rows[p] >= 0) values[p].push_back(st.saved_ver[p]);
        for (const auto* file : {&st.model_sd.full, &st.model_sd.sharded})
          if (!file->empty()) values[p].push_back((*file)[p].ver);
        min_counter[p] = std::min(min_counter[p], ps.ver_s);
        if (ps.detached) min_counter[p] = std::min(min_counter[p], ps.ghost_ver);
      }
      each_delta(m, [&](int a, int b, DeltaId id) {
        const uint32_t va = version_a(id), vb = static_cast<uint32_t>(id);
        if (va > 0xffffu || vb > 0xffffu) all_raw = true;  // a mix of several ranks' rows
        values[a].push_back(va);
        values[b].push_back(vb);
      });
    }
    for (size_t p = 0; p < values.size(); ++p) {
      auto& v = values[p];
      // A value above a counter, or one load_adapters derived by arithmetic on a saved version
      // (a rank > 0's rows: saved + 0x8000 + rank, PeftModel::load_adapters), keeps raw values.
      for (uint32_t x : v)
        if (x != kMixedVersion && (x > min_counter[p] || (version::maybe_foreign_rows(x) && !fixed_version(p, x)))) raw[p] = 1;
      v.erase(std::remove_if(v.begin(), v.end(), [&](uint32_t x) { return fixed_version(p, x); }), v.end());
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
    }
  }

  uint32_t map(size_t p, uint32_t v) const {
    if (all_raw || raw[p] || fixed_version(p, v)) return v;
    // Labels start above the constants so a label never reads as one.
    return static_cast<uint32_t>(std::lower_bound(values[p].begin(), values[p].end(), v) - values[p].begin()) + 0x10000u;
  }
  static uint32_t version_a(DeltaId id) { return static_cast<uint32_t>(id >> 32) & 0x7fffffffu; }
  void push_delta(int a, int b, DeltaId id, std::vector<uint32_t>& out) const {
    out.push_back((id & kTransposedDelta) ? 1u : 0u);
    out.push_back(map(a, version_a(id)));
    out.push_back(map(b, static_cast<uint32_t>(id)));
  }
};

void push_weight(const Renamer& rn, const Topology& t, int layer, const WeightContent& w, std::vector<uint32_t>& out) {
  const LayerInfo& li = t.layers[layer];
  uint32_t flags = w.corrupt ? 1u : 0u;
  for (int a = 0; a < t.n_adapters(); ++a) flags = flags << 2 | static_cast<uint8_t>(w.coeff[a] + 1);
  out.push_back(flags);  // first: it says which adapters' delta words follow
  for (int a = 0; a < t.n_adapters(); ++a)
    if (w.coeff[a] != 0 && li.A[a] >= 0) rn.push_delta(li.A[a], li.B[a], w.ver[a], out);
}

}  // namespace

void append_state_key(const std::vector<Observer>& ranks, std::vector<uint32_t>& out) {
  if (ranks.empty()) return;
  const Topology& t = ranks[0].topology();
  Renamer rn(t);
  rn.collect(ranks);
  out.push_back(rn.all_raw ? 1u : 0u);
  for (uint8_t r : rn.raw) out.push_back(r);
  std::vector<int> weight_layer(t.params.size(), -1);
  for (size_t l = 0; l < t.layers.size(); ++l) weight_layer[t.layers[l].weight] = static_cast<int>(l);
  for (const auto& m : ranks) {
    const RankState& st = m.state();
    out.push_back(st.present.bits() | st.active.bits() << 8 | st.inference_mode.bits() << 16 | (st.disabled ? 1u << 24 : 0) |
                  (st.prepared ? 1u << 25 : 0) | (st.optimizer.has_ckpt ? 1u << 26 : 0) |
                  (st.final_callback_queued ? 1u << 27 : 0));
    out.push_back(st.saved_adapters.bits() | static_cast<uint32_t>(static_cast<uint8_t>(st.peft_active)) << 8 |
                  static_cast<uint32_t>(std::min(st.saves, 255)) << 16);
    out.push_back(st.config_order.bits());  // which adapter a load or save meets first
    out.push_back(st.saved_order.bits());
    // only where it is not declaration order, so the keys of every other state stay as they were
    if (st.active_order != AdapterOrder::in_declaration_order(st.active_order.set())) out.push_back(st.active_order.bits());
    for (size_t p = 0; p < st.params.size(); ++p) {
      const FsdpParam& ps = st.params[p];
      const bool u = u_live(m, p);
      out.push_back(ps.present | ps.recreated << 1 | ps.detached << 2 | (ps.detached && ps.ghost_grad) << 3 | ps.rg_s << 4 |
                    (u && ps.rg_u) << 5 | ps.grad_s << 6 | ps.grad_u << 7 | u << 8 |
                    static_cast<uint32_t>(ps.device) << 12 | static_cast<uint32_t>(ps.dtype) << 16 |
                    static_cast<uint32_t>(ps.detached ? ps.ghost_dtype : DType::F32) << 20 | (ps.detached && ps.ghost_rg) << 24 | ps.nan_rows << 25);
      out.push_back(rn.map(p, ps.ver_s));
      out.push_back(ps.drift);
      if (u) out.push_back(rn.map(p, ps.ver_u));
      if (u) out.push_back(rn.map(p, ps.ver_s_at_gather));
      if (ps.detached) out.push_back(rn.map(p, ps.ghost_ver));
      out.push_back(static_cast<uint32_t>(st.saved_rows[p]));
      if (st.saved_rows[p] >= 0) out.push_back(rn.map(p, st.saved_ver[p]));
      if (st.saved_rows[p] >= 0) out.push_back(static_cast<uint32_t>(st.saved_own_rows[p]));
      if (st.saved_rows[p] >= 0) out.push_back(st.saved_drift[p] ^ static_cast<uint32_t>(st.saved_nan[p]) << 31);
      if (weight_layer[p] >= 0) {
        push_weight(rn, t, weight_layer[p], ps.w_s, out);
        if (u) push_weight(rn, t, weight_layer[p], ps.w_u, out);
      }
    }
    // save_model's dicts, only once one was saved (every other state keeps its key)
    for (const auto* file : {&st.model_sd.full, &st.model_sd.sharded}) {
      if (file->empty()) continue;
      out.push_back(file == &st.model_sd.full ? 0xf0u : 0xf1u);
      for (size_t p = 0; p < file->size(); ++p) {
        const ModelStateEntry& e = (*file)[p];
        out.push_back(static_cast<uint32_t>(e.present) | static_cast<uint32_t>(e.managed) << 1 | static_cast<uint32_t>(e.nan_rows) << 2);
        out.push_back(rn.map(p, e.ver));
        out.push_back(e.drift);
        if (weight_layer[p] >= 0) push_weight(rn, t, weight_layer[p], e.w, out);
      }
    }
    // Of the post-forward bookkeeping a backward reads only each group's last
    // index i, through post_forward_order[i - 1], and the next post_forward
    // appends after the order's last entry; the backward that reads them
    // clears both (FsdpParamGroup::backward_prefetch, FsdpState::post_backward_final_callback).
    // So a group's entry is that predecessor, and the order its last entry.
    for (size_t gi = 0; gi < st.groups.size(); ++gi) {
      const FsdpParamGroup& g = st.groups[gi];
      // _orig_dtype only acts on a gradient of the other dtype: keyed where the group holds both
      bool orig_acts = false;
      for (int p : t.groups[gi].params) orig_acts = orig_acts || (g.has_orig_dtype && st.params[p].dtype != g.orig_dtype);
      out.push_back(static_cast<uint32_t>(g.sharded) | static_cast<uint32_t>(g.training) << 4 | g.has_u << 8 |
                    g.lazy_inited << 9 | g.gather_pending << 10 | !g.reduce_grads << 11 | g.state_pre_backward << 12 |
                    (st.root_lazy_inited && !g.dtype_attrs) << 13 | g.state_dict_hooks << 16 |
                    static_cast<uint32_t>(orig_acts ? (g.orig_dtype == DType::BF16 ? 2 : 1) : 0) << 14);
      const auto& idx = g.post_forward_indices;
      out.push_back(idx.empty() ? 0xffffffffu : idx.back() == 0 ? 0xfffffffeu : static_cast<uint32_t>(st.post_forward_order[idx.back() - 1]));
    }
    for (const LoraLayer& l : st.layers) {
      uint32_t w = l.active.bits() | static_cast<uint32_t>(l.n_merged) << 8 | l.disabled << 16 | l.tuner << 17 |
                   l.wrapper << 18 | static_cast<uint32_t>(l.copies.bits()) << 19 | static_cast<uint32_t>(l.copy_active + 1) << 27;
      out.push_back(w);
      if (l.wrapper) out.push_back(l.trains.bits());
      for (int i = 0; i < l.n_merged; ++i) out.push_back(static_cast<uint32_t>(l.merged[i]));
    }
    const Optimizer& opt = st.optimizer;
    out.push_back(static_cast<uint32_t>(opt.objects.size()));
    for (int p : opt.objects) out.push_back(static_cast<uint32_t>(p));
    out.push_back(static_cast<uint32_t>(opt.state.size()));
    for (int i : opt.state) out.push_back(static_cast<uint32_t>(i));
    out.push_back(static_cast<uint32_t>(opt.saved_state.size()));
    for (int p : opt.saved_state) out.push_back(static_cast<uint32_t>(p));
    out.push_back(static_cast<uint32_t>(st.memory.now));
    out.push_back(static_cast<uint32_t>(st.memory.now >> 32));
    out.push_back(st.memory.groups);
    const PendingGraph& gr = st.graph;
    // An invalid graph is never read again (backward checks valid first, forward rebuilds it).
    out.push_back(gr.valid ? 1u | gr.loss_rg << 1 | static_cast<uint32_t>(gr.hooks.size()) << 8 : 0u);
    if (gr.valid) {
      for (uint8_t b : gr.grad) out.push_back(b);
      for (size_t g = 0; g < gr.group_out_rg.size(); ++g) out.push_back(gr.group_out_rg[g] | gr.group_in_rg[g] << 1);
      for (const auto& h : gr.hooks) out.push_back(static_cast<uint32_t>(h.first) << 16 | static_cast<uint32_t>(h.second));
      for (size_t l = 0; l < gr.ckpt_saved.size(); ++l) {
        if (gr.ckpt_saved[l].empty()) continue;
        out.push_back(static_cast<uint32_t>(l) << 16 | gr.ckpt_input_rg[l] << 15 | static_cast<uint32_t>(gr.ckpt_saved[l].size()));
        for (const SavedMeta& m : gr.ckpt_saved[l])
          out.push_back(static_cast<uint32_t>(m.d0) << 20 | static_cast<uint32_t>(m.d1) << 4 | static_cast<uint32_t>(m.dtype));
      }
    }
    out.push_back(st.post_forward_order.empty() ? 0xffffffffu : static_cast<uint32_t>(st.post_forward_order.back()));
  }
}

}  // namespace fsdpsim
