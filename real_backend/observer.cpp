// Turns the ranks' reports into the vocabulary's Observations. The one field
// a rank cannot fill alone is what its stored base weight holds: that needs
// the full A of each adapter, whose rows live on every rank. The observer
// assembles it from every rank's state at that moment (model/vocab/peer_view.hpp) and compares values
// (W - W0 against sums of B @ A * scaling, or of per-expert deltas for an
// (E, in, out) experts weight), within a float tolerance.
#include "real_backend/observer.hpp"

#include <cstdint>
#include <cstring>
#include <functional>

#include <algorithm>
#include <cmath>

#include "model/vocab/peer_view.hpp"
#include "real_backend/values.hpp"

namespace fsdpsim::real {
namespace {

using Mat = std::vector<float>;  // row-major

Mat matmul(const Mat& a, const Mat& b, int64_t n, int64_t k, int64_t m) {
  Mat out(static_cast<size_t>(n * m), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t x = 0; x < k; ++x) {
      float v = a[i * k + x];
      if (v == 0.0f) continue;
      for (int64_t j = 0; j < m; ++j) out[i * m + j] += v * b[x * m + j];
    }
  return out;
}

// lora/layer.py::ParamWrapper.get_delta_weight, expert by expert, as an
// (E, in, out) row-major value: delta[e, i, o] = sum_k B[o, k*E + e] * A[e*r + k, i].
Mat experts_delta(const Mat& b, const Mat& a, int64_t experts, int64_t r, int64_t in, int64_t out) {
  Mat d(static_cast<size_t>(experts * in * out), 0.0f);
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t k = 0; k < r; ++k)
      for (int64_t i = 0; i < in; ++i) {
        float av = a[(e * r + k) * in + i];
        for (int64_t o = 0; o < out; ++o) d[(e * in + i) * out + o] += b[o * r * experts + k * experts + e] * av;
      }
  return d;
}

// Full value of a managed parameter from every rank's chunk (padding dropped).
Mat assemble(const ParamSpec& p, const std::vector<const Mat*>& chunks) {
  Mat full;
  for (const Mat* c : chunks) full.insert(full.end(), c->begin(), c->end());
  full.resize(static_cast<size_t>(p.rows * p.cols));
  return full;
}

Mat rows_of(const Mat& full, const ParamSpec& p, int rank) {
  Mat out(static_cast<size_t>(p.chunk_rows * p.cols), 0.0f);
  int64_t start = rank * p.chunk_rows;
  int64_t have = p.local_rows(rank);
  std::copy(full.begin() + start * p.cols, full.begin() + (start + have) * p.cols, out.begin());
  return out;
}

// Within 1e-4 of the largest delta in play, plus float noise of W0 + a few
// adds (~1e-6): a delta far below 1 (a B driven near zero) still counts. An
// unsharded copy all-gathered in bf16 (`magnitude` > 0: the weight's largest |W0|)
// is W0 + delta rounded to 8 bits of mantissa (relative error <= 2^-9): that
// rounding is allowed on top. (S keeps fp32 values here and is judged without it.)
bool close(const Mat& d, const Mat& sum, float delta_scale, float magnitude) {
  const float tol = 1e-4f * delta_scale + (magnitude > 0 ? 4e-3f * (magnitude + delta_scale) : 0.0f) + 2e-6f;
  // written so that NaN (a part-filled broadcast's tail merged in) is close to nothing, as the
  // upstream judge's `<=` reads it
  for (size_t i = 0; i < d.size(); ++i)
    if (!(std::fabs(d[i] - sum[i]) <= tol)) return false;
  return true;
}

// fp32 -> bf16 -> fp32 as torch casts it (round to nearest even; c10/util/BFloat16.h round_to_nearest_even).
float bf16_cast(float x) {
  if (std::isnan(x)) return x;
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  bits &= 0xFFFF0000u;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// `u` is `whole` cast to bf16 and back, element for element.
bool equals_bf16_cast(const Mat& whole, const Mat& u) {
  if (whole.size() != u.size()) return false;
  for (size_t i = 0; i < u.size(); ++i)
    if (bf16_cast(whole[i]) != u[i]) return false;
  return true;
}

// What a DoRA merge's rescaling needs to be replayed on D's rows: W0 there, the row width, and per
// delta its factor rows (empty: plain LoRA).
struct DoraRows {
  Mat w0;
  int64_t cols = 1;
  std::vector<Mat> factors;
  // > 0: the magnitude came through bf16 (a bf16 base: dora.py computes its norm in the base's dtype),
  // so each factor is off by up to 2^-8 of 1: that rounding of W0's largest |W0| is allowed.
  float rounding = 0.0f;
};

// D = W - W0 against the merged deltas: exact; else the subset of the layer's
// adapters D does equal decides missing (fewer) / extra (more) / corrupt.
// *alt: the other classes D fits as well (a delta in play that is zero on these
// rows: a B row no step moved), which the values cannot tell from the first;
// `corrupt` among them when the delta of an adapter merged now or before (`ever`,
// a bit per adapter) is zero on these rows.
// A DoRA adapter's merge (`dora`: per delta, its rows' magnitude / ||W0 + delta|| factor, empty for
// plain LoRA) rescales W + delta row by row (variants.py::DoraLinearVariant.merge_unsafe), so a set
// of merged adapters is replayed in merge order (the merged ones first, then the rest by index).
WeightClass classify(const Mat& d, const std::vector<int>& merged, const std::vector<std::pair<int, Mat>>& deltas,
                     float magnitude, uint8_t* alt, uint32_t ever, const DoraRows& dora = {}) {
  for (const Mat& f : dora.factors)
    if (!f.empty()) magnitude = std::max(magnitude, dora.rounding);
  std::vector<size_t> order;
  for (int a : merged)
    for (size_t i = 0; i < deltas.size(); ++i)
      if (deltas[i].first == a && std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
  for (size_t i = 0; i < deltas.size(); ++i)
    if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
  auto sum_of = [&](uint32_t mask) {
    Mat s(d.size(), 0.0f);
    for (size_t i : order) {
      if (!((mask >> i) & 1)) continue;
      const Mat* f = i < dora.factors.size() && !dora.factors[i].empty() ? &dora.factors[i] : nullptr;
      for (size_t k = 0; k < s.size(); ++k) {
        s[k] += deltas[i].second[k];
        // W0 + s -> f (W0 + s): as a difference from W0, s -> f (W0 + s) - W0
        if (f) s[k] = (*f)[k / dora.cols] * (dora.w0[k] + s[k]) - dora.w0[k];
      }
    }
    return s;
  };
  uint32_t want = 0;
  for (size_t i = 0; i < deltas.size(); ++i)
    if (std::find(merged.begin(), merged.end(), deltas[i].first) != merged.end()) want |= 1u << i;
  float scale = 0.0f;
  for (const auto& x : deltas)
    for (float v : x.second) scale = std::max(scale, std::fabs(v));
  const bool exact = close(d, sum_of(want), scale, magnitude);
  bool missing = false, extra = false;
  for (uint32_t m = 0; m < (1u << deltas.size()); ++m) {
    if (m == want || !close(d, sum_of(m), scale, magnitude)) continue;
    if ((m & want) == m) missing = true;
    else if ((m & want) == want) extra = true;
  }
  // An adapter merged now or at some step before whose delta is zero on these rows (a B row no
  // step moved, as a ReLU unit dead for the whole batch leaves it): a copy of it W kept from that
  // merge, stale since, is zero here too (an unmerge a reshard dropped), so the values cannot rule
  // out the stale-merge reading, `corrupt`. An adapter never merged here left no copy to be stale.
  const Mat zero(d.size(), 0.0f);
  bool blind = false;
  for (size_t i = 0; i < deltas.size(); ++i)
    if (((want >> i) & 1) || ((ever >> deltas[i].first) & 1))
      blind = blind || close(zero, deltas[i].second, scale, magnitude);  // over D's elements, as sum_of
  const WeightClass c = exact     ? WeightClass::Exact
                        : missing ? WeightClass::MissingDelta
                        : extra   ? WeightClass::ExtraDelta
                                  : WeightClass::Corrupt;
  auto bit = [](WeightClass w) { return static_cast<uint8_t>(1u << static_cast<int>(w)); };
  *alt = static_cast<uint8_t>(((exact ? bit(WeightClass::Exact) : 0) | (missing ? bit(WeightClass::MissingDelta) : 0) |
                               (extra ? bit(WeightClass::ExtraDelta) : 0) | (blind ? bit(WeightClass::Corrupt) : 0)) & ~bit(c));
  return c;
}

// This rank's part of dimension `dim` of a row-major value of `shape`: FSDP2's chunk
// (ceil(size / world) per rank, the last ones short or empty), unpadded, as a Shard(dim)
// DTensor's local value holds it.
Mat shard_of(const Mat& full, const std::vector<int64_t>& shape, size_t dim, int world, int rank) {
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < shape.size(); ++i) (i < dim ? outer : inner) *= i == dim ? 1 : shape[i];
  const int64_t size = shape[dim], chunk = (size + world - 1) / world;
  const int64_t start = std::min<int64_t>(size, rank * chunk), n = std::min<int64_t>(chunk, size - start);
  Mat out;
  for (int64_t o = 0; o < outer; ++o) {
    auto from = full.begin() + (o * size + start) * inner;
    out.insert(out.end(), from, from + n * inner);
  }
  return out;
}

// delta_weight: each value get_delta_weight returned against the full B @ A * scaling of every
// rank's shards at that moment (`full(p)`): per expert for an experts weight (E, in, out), as
// lora/layer.py::ParamWrapper.get_delta_weight computes it. A value of another shape is not the
// layer's delta (E == 1's (out, in) B @ A); else it is compared on the part it holds (DeltaForm),
// a Partial value as the sum over the ranks' (upstream's judge.py does the same). An empty part
// (a rank holding no experts) is judged too: against the empty slice.
template <typename Full>
void judge_deltas(const Layout& layout, const std::vector<std::vector<RankReport>>& per_rank, int r, const RankReport& rep,
                  Full full, Observation& o) {
  if (rep.delta_layer < 0) return;
  const LayerSpec& ls = layout.layers[rep.delta_layer];
  const ParamSpec& wspec = layout.params[ls.weight];
  const std::vector<int64_t> shape =
      ls.experts > 0 ? std::vector<int64_t>{ls.experts, ls.in, ls.out} : std::vector<int64_t>{ls.out, ls.in};
  for (size_t k = 0; k < rep.deltas.size() && k < rep.delta_values.size(); ++k) {
    const DeltaValue& v = rep.delta_values[k];
    if (v.shape != shape) {
      o.deltas[k].value = WeightClass::Corrupt;
      continue;
    }
    const int a = layout.adapter_named(rep.deltas[k].adapter);
    const int pa = ls.lora_a[a], pb = ls.lora_b[a];
    Mat want = ls.experts > 0 ? experts_delta(full(pb), full(pa), ls.experts, layout.params[pa].rows / ls.experts, ls.in, ls.out)
                              : matmul(full(pb), full(pa), ls.out, layout.params[pa].rows, ls.in);
    for (auto& x : want) x *= lora_scaling(layout, a);
    Mat got = v.values;
    if (v.form == kDeltaChunk) want = rows_of(want, wspec, r);
    if (v.form == kDeltaRows) want = shard_of(want, shape, 0, layout.world, r);
    if (v.form == kDeltaColumns) want = shard_of(want, shape, shape.size() - 1, layout.world, r);
    if (v.form == kDeltaPartial) {  // every rank's local value at this step
      got.assign(want.size(), 0.0f);
      bool summed = true;
      for (const auto& reports : per_rank) {
        auto it = std::find_if(reports.begin(), reports.end(), [&](const RankReport& q) { return q.step == rep.step; });
        if (it == reports.end() || k >= it->delta_values.size() || it->delta_values[k].values.size() != want.size()) {
          summed = false;  // a peer holds no local of this op (it stopped before, or is in another op)
          break;
        }
        for (size_t i = 0; i < got.size(); ++i) got[i] += it->delta_values[k].values[i];
      }
      // The sum that is the delta cannot be formed: unjudged, as upstream's judge.py::judge_deltas leaves it.
      if (!summed) {
        o.deltas[k].value = WeightClass::Unjudged;
        continue;
      }
    }
    float scale = 0.0f;
    for (float x : want) scale = std::max(scale, std::fabs(x));
    // bf16 adapter weights: B @ A of bf16 values, rounded once more than this fp32 product.
    const bool bf16 = std::any_of(rep.params.begin(), rep.params.end(), [&](const ParamObs& q) {
      return q.dtype == DType::BF16 && (q.name == layout.params[pa].name || q.name == layout.params[pb].name);
    });
    // A or B registered as a policy's bf16 cast of its fp32 shard (torch _fsdp_param.py::
    // FSDPParam.init_dtype_attrs): each factor was rounded to bf16 before the product, so an element
    // is off by up to 2^-8 per factor of sum_k |B_ik| |A_kj| (upstream judge.py::judge_deltas).
    float products = 0.0f;
    if ((rep.u_registered[pa] && rep.u_cast[pa]) || (rep.u_registered[pb] && rep.u_cast[pb])) {
      Mat abs_a = full(pa), abs_b = full(pb);
      for (auto& x : abs_a) x = std::fabs(x);
      for (auto& x : abs_b) x = std::fabs(x);
      Mat p = ls.experts > 0 ? experts_delta(abs_b, abs_a, ls.experts, layout.params[pa].rows / ls.experts, ls.in, ls.out)
                             : matmul(abs_b, abs_a, ls.out, layout.params[pa].rows, ls.in);
      for (float x : p) products = std::max(products, x * std::fabs(lora_scaling(layout, a)));
    }
    const float magnitude = products > 0 ? 2 * products + scale : bf16 ? scale : 0.0f;
    const bool ok = got.size() == want.size() && close(got, want, scale, magnitude);
    o.deltas[k].value = ok ? WeightClass::Exact : WeightClass::Corrupt;
  }
}

}  // namespace

// replica_diff: a whole unmanaged adapter tensor (added after fully_shard: no group reduces its
// grad) whose values differ between this rank and a peer. Managed shards differ by design.
// replica_coincident: one an AdamW step moved yet equal on every peer (lr * sign(g) on the first
// step can leave per-rank data's replicas bit-identical): the values cannot tell it was not reduced.
static void judge_replicas(const Layout& layout, const RankReport& rep, const std::vector<const RankReport*>& peers, Observation& o) {
  if (rep.groups.empty()) return;  // before prepare every parameter is whole and nothing trains
  for (size_t p = 0; p < layout.params.size(); ++p) {
    const ParamSpec& ps = layout.params[p];
    if (ps.adapter < 0 || !(ps.group < 0 || rep.whole[p]) || !rep.present[p] || rep.s_values[p].empty()) continue;
    bool differ = false, compared = false;
    for (const RankReport* peer : peers) {
      const bool held = p < peer->present.size() && peer->present[p] && !peer->s_values[p].empty();
      compared = compared || held;
      differ = differ || (held && peer->s_values[p] != rep.s_values[p]);
    }
    if (differ) o.replica_diff.emplace_back(ps.name);
    else if (compared && p < rep.adam_steps.size() && rep.adam_steps[p] > 0) o.replica_coincident.emplace_back(ps.name);
  }
}

std::vector<Observation> observe(const Layout& layout, uint64_t seed, const std::vector<std::vector<RankReport>>& per_rank) {
  const int world = layout.world;
  // Initial chunks stand in for a rank that has not run anything yet.
  std::vector<RankReport> initial(world);
  for (int r = 0; r < world; ++r) {
    initial[r].s_values.resize(layout.params.size());
    for (size_t p = 0; p < layout.params.size(); ++p) {
      const ParamSpec& ps = layout.params[p];
      Mat full = initial_values(layout, seed, static_cast<int>(p));
      initial[r].s_values[p] = ps.group >= 0 ? rows_of(full, ps, r) : full;
    }
  }
  std::vector<std::vector<ReportMark>> marks(world);
  for (int r = 0; r < world; ++r) {
    size_t k = 0;
    for (const auto& rep : per_rank[r]) marks[r].push_back({rep.step, k += rep.collectives.size(), !rep.s_values.empty()});
  }
  auto view_of = [&](int j, int r, size_t i) -> const RankReport& {
    int m = peer_view(marks, j, r, i);
    return m < 0 ? initial[j] : per_rank[j][m];
  };
  std::vector<Observation> out;
  for (int r = 0; r < world; ++r) {
    std::vector<uint32_t> ever(layout.layers.size(), 0);  // per layer: adapters this rank merged at some step so far
    for (size_t ri = 0; ri < per_rank[r].size(); ++ri) {
      const RankReport& rep = per_rank[r][ri];
      Observation o = rep;  // the fields the rank read itself; layers are judged here
      if (!rep.s_values.empty()) {
        // The value of parameter p as the module sees it: U when registered,
        // else S (assembled from every rank's chunk when FSDP manages it).
        std::function<Mat(int, bool)> value = [&](int p, bool registered) -> Mat {
          const ParamSpec& ps = layout.params[p];
          // A factor U holds as a policy's bf16 cast that still equals its shard's cast is read from
          // the shard (a merge on the shard added the shard's delta; one on the copy is within the
          // bf16 bound of it); a stale copy (a step moved the shard since the gather) as it is.
          if (registered && rep.u_registered[p] && rep.u_cast[p] && ps.adapter >= 0) {
            Mat whole = value(p, false);
            return equals_bf16_cast(whole, rep.u_values[p]) ? whole : rep.u_values[p];
          }
          if (registered && rep.u_registered[p]) return rep.u_values[p];
          if (ps.group < 0 || rep.whole[p])  // a meta parameter reports no values
            return rep.s_values[p].empty() ? Mat(static_cast<size_t>(ps.rows * ps.cols), 0.0f) : rep.s_values[p];
          std::vector<const Mat*> chunks;
          for (int j = 0; j < world; ++j) chunks.push_back(j == r ? &rep.s_values[p] : &view_of(j, r, ri).s_values[p]);
          return assemble(ps, chunks);
        };
        for (size_t l = 0; l < layout.layers.size(); ++l) {
          const LayerSpec& ls = layout.layers[l];
          const ParamSpec& wspec = layout.params[ls.weight];
          LayerObs lo;
          lo.name = Name(ls.name);
          lo.group = rep.groups.empty() ? Name() : Name(layout.groups[ls.group].name);  // no groups: before prepare
          for (const auto& a : rep.merged[l]) lo.merged.emplace_back(a);
          std::vector<int> merged;
          for (const auto& name : lo.merged) merged.push_back(layout.adapter_named(name));
          for (int a : merged)
            if (a >= 0) ever[l] |= 1u << a;
          auto deltas_for = [&](bool registered, bool local_rows) {
            std::vector<std::pair<int, Mat>> ds;
            for (size_t a = 0; a < layout.adapters.size(); ++a) {
              int pa = ls.lora_a[a], pb = ls.lora_b[a];
              // Deleted adapters count too: a delta they left behind is an extra one.
              if (pa < 0 || rep.s_values[pa].empty()) continue;
              const ParamSpec& as = layout.params[pa];
              Mat d = ls.experts > 0 ? experts_delta(value(pb, registered), value(pa, registered), ls.experts,
                                                     as.rows / ls.experts, ls.in, ls.out)
                                     : matmul(value(pb, registered), value(pa, registered), ls.out, as.rows, ls.in);
              float s = lora_scaling(layout, static_cast<int>(a));
              for (auto& v : d) v *= s;
              ds.push_back({static_cast<int>(a), local_rows ? rows_of(d, wspec, r) : d});
            }
            return ds;
          };
          Mat w0 = initial_values(layout, seed, ls.weight);
          // dora.py: each DoRA adapter's magnitude over the row norms of W0 + its delta, on the rows
          // the deltas hold (the unmerged base weight is W0: the other merges are taken out first).
          auto dora_rows = [&](const std::vector<std::pair<int, Mat>>& dl, bool registered, const Mat& w0_part) {
            DoraRows dr{w0_part, ls.in, {}, 0.0f};
            if (layout.dtype == DType::BF16)
              for (float v : w0) dr.rounding = std::max(dr.rounding, std::fabs(v));
            for (const auto& [a, delta] : dl) {
              const int pm = ls.lora_m[a];
              Mat f;
              if (pm >= 0 && !rep.s_values[pm].empty()) {
                const Mat mag_full = value(pm, registered);
                const Mat mag = registered ? mag_full : rows_of(mag_full, layout.params[pm], r);
                f.assign(mag.size(), 0.0f);
                for (size_t row = 0; row < f.size() && (row + 1) * ls.in <= delta.size(); ++row) {
                  double n = 0.0;
                  for (int64_t c = 0; c < ls.in; ++c) {
                    const double x = static_cast<double>(w0_part[row * ls.in + c]) + delta[row * ls.in + c];
                    n += x * x;
                  }
                  f[row] = n > 0.0 ? static_cast<float>(mag[row] / std::sqrt(n)) : 1.0f;  // a padding row
                }
              }
              dr.factors.push_back(std::move(f));
            }
            return dr;
          };
          float magnitude = 0.0f;  // > 0: a bf16 base weight, whose U went through bf16
          // (or an fp32 base weight whose U is a MixedPrecisionPolicy's bf16 cast)
          if (layout.dtype == DType::BF16 || (rep.u_registered[ls.weight] && rep.u_cast[ls.weight]))
            for (float v : w0) magnitude = std::max(magnitude, std::fabs(v));
          Mat ds = rep.s_values[ls.weight];
          Mat w0_rows = rows_of(w0, wspec, r);
          for (size_t i = 0; i < ds.size(); ++i) ds[i] -= w0_rows[i];
          const auto stored_deltas = deltas_for(false, true);
          lo.stored = classify(ds, merged, stored_deltas, 0.0f, &lo.stored_alt, ever[l], dora_rows(stored_deltas, false, w0_rows));
          if (rep.u_registered[ls.weight]) {
            Mat du = rep.u_values[ls.weight];
            for (size_t i = 0; i < du.size(); ++i) du[i] -= w0[i];
            const auto whole_deltas = deltas_for(true, false);
            lo.registered = classify(du, merged, whole_deltas, magnitude, &lo.registered_alt, ever[l], dora_rows(whole_deltas, true, w0));
          } else {
            lo.registered = lo.stored;
            lo.registered_alt = lo.stored_alt;
          }
          o.layers.push_back(lo);
        }
        judge_deltas(layout, per_rank, r, rep, [&](int p) { return value(p, false); }, o);
        std::vector<const RankReport*> peers;
        for (int j = 0; j < world; ++j)
          if (j != r) peers.push_back(&view_of(j, r, ri));
        judge_replicas(layout, rep, peers, o);
      }
      out.push_back(std::move(o));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Observation& a, const Observation& b) {
    return a.step != b.step ? a.step < b.step : a.rank < b.rank;
  });
  return out;
}

}  // namespace fsdpsim::real
