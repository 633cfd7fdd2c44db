#include "model/spec/s5_agreement_checker.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "model/vocab/cross_paired.hpp"
#include "model/vocab/refill.hpp"
#include "model/vocab/text.hpp"

namespace fsdpsim::spec {
namespace {

// A described field; a stored weight's also carries its classes: its reading and, from a
// value backend, the others its values fit (0 for every other field).
struct Field {
  std::string name, value;
  uint8_t classes = 0;
};

void set(Field& f, const char* name_head, const std::string& name, const char* name_tail, const std::string& value,
         uint8_t classes = 0) {
  f.name.assign(name_head).append(name).append(name_tail);
  f.value.assign(value);
  f.classes = classes;
}

// A rank holding only padding of layer x's managed weight (FSDP2 chunks dim 0 by ceil(rows /
// world), torch _fsdp_param.py::FSDPParam._init_sharded_param): no rows, so no opinion on it.
bool holds_no_rows(const SpecContext& ctx, const Observation& o, size_t x) {
  if (o.layers[x].group.empty() || x >= ctx.layer_count()) return false;  // unmanaged: held whole
  const LayerDecl& l = ctx.scenario().layers[x];
  const int rows = l.experts > 0 ? l.experts : l.out, world = ctx.world();
  return static_cast<int64_t>((rows + world - 1) / world) * o.rank >= rows;
}

// The classes a stored weight's values fit: its reading and the alternatives; every class when
// the rank has no opinion (unjudged by a value backend, or no rows of the weight).
uint8_t stored_classes(const SpecContext& ctx, const Observation& o, size_t x) {
  const LayerObs& l = o.layers[x];
  if (l.stored == WeightClass::Unjudged || holds_no_rows(ctx, o, x)) return 0xFF;
  return static_cast<uint8_t>((1u << static_cast<int>(l.stored)) | l.stored_alt);
}

// Every field S5 compares, worded; built only once the ranks differ, into `f`'s
// buffers (Refill): ranks out of step differ at every step until they agree again.
void describe(const SpecContext& ctx, const Observation& o, std::vector<Field>& out) {
  Refill<Field> f(out);
  set(f.next(), "", "adapters in the model", "", ctx.text(ctx.present_in(o)));
  set(f.next(), "", "active adapters", "", names_set_text(o.active));
  set(f.next(), "", "disabled", "", o.disabled ? "true" : "false");
  for (size_t x = 0; x < o.layers.size(); ++x) {
    const LayerObs& l = o.layers[x];
    Field& m = f.next();
    m.name.assign(l.name).append(" merged");
    m.value.assign("[").append(join(l.merged)).append("]");
    m.classes = 0;
    Field& w = f.next();
    w.name.assign(l.name).append(" stored weight");
    w.value.assign(weight_class_name(l.stored));
    w.classes = stored_classes(ctx, o, x);
  }
  for (const auto& p : o.params) set(f.next(), "", p.name, " S.requires_grad", p.rg_s ? "true" : "false");
  for (const auto& p : o.params) set(f.next(), "", p.name, " dtype", dtype_name(p.dtype));
  for (const auto& sv : o.saved) set(f.next(), "saved ", sv.name, " dtype", dtype_name(sv.dtype));
}

// Field x of describe(o), as what its text depends on: compared without wording either side.
struct FieldKey {
  enum Kind : uint8_t { Present, Active, Disabled, Merged, Stored, RequiresGrad, DType, SavedDType } kind;
  uint64_t value = 0;                       // a mask, a flag or an enum
  const std::vector<Name>* names = nullptr;  // Active, Merged
  uint8_t classes = 0;                      // Stored: the classes its values fit
};

size_t field_count(const Observation& o) { return 3 + 2 * o.layers.size() + 2 * o.params.size() + o.saved.size(); }

FieldKey field_key(const SpecContext& ctx, const Observation& o, size_t x) {
  if (x == 0) return {FieldKey::Present, ctx.present_in(o)};
  if (x == 1) return {FieldKey::Active, 0, &o.active};
  if (x == 2) return {FieldKey::Disabled, o.disabled};
  x -= 3;
  if (x < 2 * o.layers.size()) {
    const LayerObs& l = o.layers[x / 2];
    if (x % 2 == 0) return {FieldKey::Merged, 0, &l.merged};
    return {FieldKey::Stored, static_cast<uint64_t>(l.stored), nullptr, stored_classes(ctx, o, x / 2)};
  }
  x -= 2 * o.layers.size();
  if (x < o.params.size()) return {FieldKey::RequiresGrad, o.params[x].rg_s};
  x -= o.params.size();
  if (x < o.params.size()) return {FieldKey::DType, static_cast<uint64_t>(o.params[x].dtype)};
  return {FieldKey::SavedDType, static_cast<uint64_t>(o.saved[x - o.params.size()].dtype)};
}

// describe's text of one field, for the comparisons the keys cannot settle alone.
std::string field_text(const SpecContext& ctx, const Observation& o, size_t x) {
  thread_local std::vector<Field> all;
  describe(ctx, o, all);
  return all[x].value;
}

// The first field whose texts differ between `a` and `b` and whose values fit no common class
// (describe's order, up to the shorter list): what after_step reports. -1 when there is none.
long first_proven_difference(const SpecContext& ctx, const Observation& a, const Observation& b) {
  const size_t n = std::min(field_count(a), field_count(b));
  for (size_t x = 0; x < n; ++x) {
    const FieldKey ka = field_key(ctx, a, x), kb = field_key(ctx, b, x);
    bool same;
    if (ka.kind != kb.kind) same = field_text(ctx, a, x) == field_text(ctx, b, x);  // lists of other lengths
    else if (ka.names) same = *ka.names == *kb.names || join(*ka.names) == join(*kb.names);
    else if (ka.kind == FieldKey::Present) same = ka.value == kb.value || ctx.text(ka.value) == ctx.text(kb.value);
    else same = ka.value == kb.value;  // flags and enums: one text per value
    if (same || (ka.classes & kb.classes)) continue;
    return static_cast<long>(x);
  }
  return -1;
}

}  // namespace

void S5AgreementChecker::observe(const SpecContext&, const Op&, const Observation& o, std::vector<Finding>& out) {
  // A cross-paired collective completed: the ranks exchanged bytes of different tensors. The op
  // went on, so the rank is not stuck; the first such pairing (or hang, or mismatch) is reported.
  if (is_cross_paired(o)) {
    if (!collective_reported_) out.push_back(finding("S5", o.step, -1, o.message));
    collective_reported_ = true;
    return;
  }
  if (!rank_stuck(o)) return;
  // the words the backends share: gloo's own text (upstream) stays in the observation
  if (!collective_reported_) out.push_back(finding("S5", o.step, -1, message_words(o.message)));
  collective_reported_ = true;
}

void S5AgreementChecker::after_step(const SpecContext& ctx, const Observation* obs, size_t n, std::vector<Finding>& out) {
  if (ctx.world() < 2 || n != static_cast<size_t>(ctx.world())) return;
  for (size_t k = 0; k < n; ++k)
    if (rank_stuck(obs[k])) return;
  // Replicas no FSDP group reduces (adapters added after fully_shard) that the ranks hold apart.
  const std::vector<Name>* apart = nullptr;
  for (size_t k = 0; k < n && !apart; ++k)
    if (!obs[k].replica_diff.empty()) apart = &obs[k].replica_diff;
  if (apart && !replica_reported_)
    out.push_back(finding("S5", obs[0].step, -1,
                          fmt::format("ranks hold different values of {} (no FSDP group manages them: nothing reduces their "
                                      "gradients)",
                                      names_set_text(*apart))));
  replica_reported_ = apart != nullptr;
  bool all_same = true;
  for (size_t k = 1; k < n && all_same; ++k) all_same = same_agreement_fields(obs[0], obs[k]);
  if (all_same) {
    disagreement_reported_ = false;
    return;
  }
  for (size_t k = 1; k < n; ++k) {
    // values that fit a common class are no proven disagreement (sim/core/value_blind.hpp)
    const long x = first_proven_difference(ctx, obs[0], obs[k]);
    if (x < 0) continue;
    if (!disagreement_reported_) {  // worded only when reported: ranks out of step differ at every step
      thread_local std::vector<Field> base, other;
      describe(ctx, obs[0], base);
      describe(ctx, obs[k], other);
      out.push_back(finding("S5", obs[0].step, -1,
                            fmt::format("ranks disagree on {}: rank {} {}, rank {} {}", base[x].name, obs[0].rank,
                                        base[x].value, obs[k].rank, other[x].value)));
    }
    disagreement_reported_ = true;
    return;
  }
  disagreement_reported_ = false;
}

// replica_reported_ is not keyed (nor was it before this interface): states told apart only by
// it merge, so the explorer may see a replica report once more or once less than a run would.
void S5AgreementChecker::pack_key(const SpecContext&, KeyWriter& key) const {
  key.flags({collective_reported_, disagreement_reported_});
}

bool same_agreement_fields(const Observation& a, const Observation& b) {
  if (a.active != b.active || a.disabled != b.disabled || a.layers.size() != b.layers.size() ||
      a.params.size() != b.params.size() || a.saved.size() != b.saved.size())
    return false;
  for (size_t l = 0; l < a.layers.size(); ++l)
    if (a.layers[l].name != b.layers[l].name || a.layers[l].merged != b.layers[l].merged ||
        a.layers[l].stored != b.layers[l].stored)
      return false;
  for (size_t p = 0; p < a.params.size(); ++p)
    if (a.params[p].name != b.params[p].name || a.params[p].rg_s != b.params[p].rg_s || a.params[p].dtype != b.params[p].dtype)
      return false;
  for (size_t x = 0; x < a.saved.size(); ++x)
    if (a.saved[x].dtype != b.saved[x].dtype) return false;
  return true;
}

}  // namespace fsdpsim::spec
