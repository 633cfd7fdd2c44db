#include "model/spec/spec_checks.hpp"

#include <algorithm>
#include <map>
#include <memory>

#include "model/vocab/text.hpp"

namespace fsdpsim {
namespace {

std::string head(const char* spec, int step, int rank) {
  return std::string(spec) + " step " + std::to_string(step) + (rank >= 0 ? " rank " + std::to_string(rank) : "") + ": ";
}

// The owning adapter from the declarations (an exact name match, never a split:
// adapter `c.d` used to read as `d`); "base" for a base parameter.
std::string adapter_of(const Scenario& s, const std::string& param) { return s.owner_of_param(param); }

const GroupObs* group_named(const Observation& o, const std::string& g) {
  for (const auto& x : o.groups)
    if (x.name == g) return &x;
  return nullptr;
}

bool unsharded(const Observation& o, const std::string& g) {
  const GroupObs* x = group_named(o, g);
  return x && x->state == ShardedState::Unsharded;
}

using Mask = uint32_t;

struct Adapters {
  std::vector<std::string> names;
  Mask mask(const std::vector<std::string>& v) const {
    Mask m = 0;
    for (const auto& n : v)
      for (size_t a = 0; a < names.size(); ++a)
        if (names[a] == n) m |= 1u << a;
    return m;
  }
  std::string text(Mask m) const {
    std::string out = "{";
    bool first = true;
    for (size_t a = 0; a < names.size(); ++a)
      if ((m >> a) & 1) out += (first ? "" : ",") + names[a], first = false;
    return out + "}";
  }
};

// The adapters whose parameters the rank holds, looked up among the declared
// names without building strings: this runs for every observation.
Mask present_in(const Scenario& s, const Adapters& ad, const Observation& o) {
  Mask m = 0;
  for (const auto& p : o.params) {
    const int a = s.adapter_of_param(p.name);
    if (a < 0) continue;
    for (size_t i = 0; i < ad.names.size(); ++i)
      if (ad.names[i] == s.adapters[a].name) m |= 1u << i;
  }
  return m;
}

bool sets_flags(OpKind k) {
  return k == OpKind::SetAdapter || k == OpKind::DisableEnter || k == OpKind::DisableExit || k == OpKind::AddAdapter ||
         k == OpKind::LoadAdapter || k == OpKind::DeleteAdapter;
}

// Per rank: what the user asked for, from the ops they called (never from flags).
struct RankIntent {
  Mask intended = 0;
  Mask before_disable = 0;
  Mask inference_mode = 0;  // per adapter config
  bool eval_output = false;  // the pending output came from an eval (no_grad)
  bool flags_since_forward = false;  // a flag-setting op ran between the forward and this backward
  // This rank's previous observation (S3 compares against it); shared, as copies of the checker never change it.
  std::shared_ptr<const Observation> prev;
  std::vector<uint8_t> s2_bad;
};

}  // namespace

// The checks with what they remember between steps (SpecChecker's state).
class SpecChecker::Impl {
 public:
  explicit Impl(const Scenario& s) : world_(s.world), scen_(std::make_shared<const Scenario>(s)) {
    for (const auto& a : s.adapters) ad_.names.push_back(a.name);
    ranks_.resize(s.world);
    for (auto& r : ranks_) {
      r.intended = s.adapters[0].inference_mode ? 0 : 1;
      for (size_t a = 0; a < s.adapters.size(); ++a)
        if (s.adapters[a].inference_mode) r.inference_mode |= 1u << a;
      r.s2_bad.assign(s.layers.size(), 0);
    }
  }

  void step(const Op& op, const Observation* obs, size_t n, std::vector<Finding>& out) {
    for (size_t k = 0; k < n; ++k) one(op, obs[k], out);
    agreement(obs, n, out);
  }

  void append_key(std::vector<uint32_t>& out) const;

 private:
  void one(const Op& op, const Observation& o, std::vector<Finding>& out) {
    RankIntent& ri = ranks_[o.rank];
    if (o.status == Status::Hang || o.status == Status::Mismatch) {
      if (!s5_collective_) out.push_back({"S5", o.step, -1, head("S5", o.step, -1) + o.message});
      s5_collective_ = true;
      return;  // the rank is stuck in the op: nothing more is observable
    }
    track_intent(op, o, ri);
    if (op.is_training()) s1(op, o, ri, out);
    s2(o, ri, out);
    if (!sets_flags(op.kind) && ri.prev) s3(*ri.prev, o, out);
    s4(op, o, out);
    s6(op, o, out);
    s7(op, o, out);
    if (op.kind == OpKind::Forward || op.kind == OpKind::Eval) {
      ri.eval_output = op.kind == OpKind::Eval;
      ri.flags_since_forward = false;
    }
    if (sets_flags(op.kind)) ri.flags_since_forward = true;
    // Only what S3 reads of it is kept (the explorer holds a checker per reached state).
    auto prev = std::make_shared<Observation>();
    prev->step = o.step;
    prev->rank = o.rank;
    prev->groups = o.groups;
    prev->params = o.params;
    prev->layers = o.layers;
    ri.prev = std::move(prev);
  }

  void track_intent(const Op& op, const Observation& o, RankIntent& ri) {
    if (op.kind == OpKind::LoadAdapter && o.status == Status::Ok) {
      Mask m = ad_.mask(op.names);
      ri.inference_mode = op.trainable ? ri.inference_mode & ~m : ri.inference_mode | m;
    }
    if (o.status != Status::Ok) return;
    switch (op.kind) {
      case OpKind::SetAdapter:
        ri.intended = ad_.mask(op.names);
        break;
      case OpKind::DisableEnter:
        ri.before_disable = ri.intended;
        ri.intended = 0;
        break;
      case OpKind::DisableExit:  // training resumes, but an adapter loaded for inference stays frozen
        ri.intended = ri.before_disable & ~ri.inference_mode;
        break;
      case OpKind::DeleteAdapter: {
        Mask left = ri.intended & present_in(*scen_, ad_, o);
        ri.intended = left ? left : (ri.intended ? ad_.mask(o.active) : 0);
        break;
      }
      default:
        break;
    }
  }

  // S1: after set_adapter(X) every training step sends gradients to exactly X's shards.
  void s1(const Op& op, const Observation& o, RankIntent& ri, std::vector<Finding>& out) {
    // A backward of an eval output fails by design; one whose forward ran before
    // the user changed adapters answers to no set_adapter in particular.
    bool from_eval = op.kind == OpKind::Backward && (ri.eval_output || ri.flags_since_forward);
    if (op.kind == OpKind::TrainStep || op.kind == OpKind::Backward) ri.eval_output = false;
    if (o.status != Status::Ok && o.status != Status::NoGradFn) return;
    if (from_eval || o.disabled) return;  // disabled trains nothing
    for (const auto& l : o.layers)
      if (!l.merged.empty()) return;  // merged layers skip the LoRA path by design
    Mask want = ri.intended & present_in(*scen_, ad_, o);
    Mask got = o.status == Status::Ok && o.grads ? ad_.mask(*o.grads) : 0;
    if (want == got) return;
    std::string text = head("S1", o.step, o.rank) + (want ? "expected gradients on " + ad_.text(want) : "expected no gradients") +
                       ", got " + (o.status == Status::NoGradFn ? std::string("no_grad_fn") : ad_.text(got));
    Mask wrong = want ^ got;
    for (const auto& p : o.params)
      if (ad_.mask({adapter_of(*scen_, p.name)}) & wrong) {
        text += "; " + param_detail(o, p.name);
        break;
      }
    out.push_back({"S1", o.step, o.rank, text});
  }

  // S2: the weight a module holds equals W0 + its merged deltas (reported when it turns bad).
  void s2(const Observation& o, RankIntent& ri, std::vector<Finding>& out) {
    for (size_t l = 0; l < o.layers.size() && l < ri.s2_bad.size(); ++l) {
      const LayerObs& lo = o.layers[l];
      if (lo.registered == WeightClass::Exact) {
        ri.s2_bad[l] = 0;
        continue;
      }
      if (ri.s2_bad[l]) continue;
      ri.s2_bad[l] = 1;
      const std::string merged = join(lo.merged);
      out.push_back({"S2", o.step, o.rank,
                     head("S2", o.step, o.rank) + "layer " + lo.name + " merged=[" + merged + "] but its " +
                         (unsharded(o, lo.group) ? "unsharded copy" : "shard") + " is " + weight_class_name(lo.registered) +
                         " (stored shard " + weight_class_name(lo.stored) + ")"});
    }
  }

  // S3: a group that went from unsharded to sharded in an op that sets no flag
  // must keep what its unsharded copy held: U's requires_grad, U's values.
  void s3(const Observation& prev, const Observation& o, std::vector<Finding>& out) {
    struct Clause {
      std::string group, what;
      int count;
    };
    std::vector<Clause> clauses;
    auto add = [&](const std::string& g, const std::string& what) {
      for (auto& c : clauses)
        if (c.group == g && c.what == what) return void(++c.count);
      clauses.push_back({g, what, 1});
    };
    for (const auto& g : o.groups) {
      if (g.state != ShardedState::Sharded || !unsharded(prev, g.name)) continue;
      for (const auto& p : o.params) {
        if (p.group != g.name) continue;
        for (const auto& q : prev.params)
          if (q.name == p.name && q.rg_u >= 0 && (q.rg_u != 0) != p.rg_s)
            add(g.name, adapter_of(*scen_, p.name) + ".requires_grad U=" + (q.rg_u ? "true" : "false") + " S=" + (p.rg_s ? "true" : "false"));
      }
      for (size_t l = 0; l < o.layers.size() && l < prev.layers.size(); ++l) {
        const LayerObs& now = o.layers[l];
        const LayerObs& was = prev.layers[l];
        if (now.group == g.name && was.merged == now.merged && was.registered != now.stored)
          add(g.name, now.name + ".weight values edited on U (merge/unmerge/load)");
      }
    }
    if (clauses.empty()) return;
    std::string text = head("S3", o.step, o.rank) + "reshard dropped changes made on the unsharded copy:";
    std::string last;
    for (size_t i = 0; i < clauses.size(); ++i) {
      const Clause& c = clauses[i];
      if (i == 0 || c.group != last) text += std::string(i ? "; " : " ") + "group " + c.group + ": ";
      else text += ", ";
      last = c.group;
      text += c.what + (c.count > 1 ? " (" + std::to_string(c.count) + " params)" : "");
    }
    out.push_back({"S3", o.step, o.rank, text});
  }

  // S4: an optimizer checkpoint can be saved and loaded at any point.
  void s4(const Op& op, const Observation& o, std::vector<Finding>& out) {
    if ((op.kind != OpKind::SaveOptimizer && op.kind != OpKind::LoadOptimizer) || o.status != Status::KeyError) return;
    std::string first = o.opt_unregistered.empty() ? "?" : param_detail(o, o.opt_unregistered[0]);
    out.push_back({"S4", o.step, o.rank,
                   head("S4", o.step, o.rank) + op_name(op.kind) + " raised " + o.message + " (" + std::to_string(o.opt_missing) +
                       "/" + std::to_string(o.opt_total) + " optimizer parameters not registered; first: " + first + ")"});
  }

  // S6: saved adapters hold every selected adapter, full size, and reload equal.
  void s6(const Op& op, const Observation& o, std::vector<Finding>& out) {
    std::string why;
    if (op.kind == OpKind::SaveAdapters && o.status == Status::Ok) {
      Mask selected = op.names.empty() ? present_in(*scen_, ad_, o) : ad_.mask(op.names);
      std::vector<std::string> names;
      for (const auto& sv : o.saved) names.push_back(adapter_of(*scen_, sv.name));
      Mask lost = selected & ~ad_.mask(names);
      if (lost) why = "adapters " + ad_.text(lost) + " were not saved (saved: " + ad_.text(ad_.mask(names)) + ")";
      for (const auto& sv : o.saved) {
        if (sv.rows == sv.full_rows) continue;
        why += (why.empty() ? "" : "; ") + sv.name + " saved " + std::to_string(sv.rows) + " of " +
               std::to_string(sv.full_rows) + " rows (this rank's shard, not the full tensor)";
        break;
      }
    }
    if (op.kind == OpKind::LoadAdapters && o.status != Status::Ok && o.status != Status::ValueError)
      why = "load_adapters raised " + std::string(status_name(o.status)) + ": " + o.message;
    if (op.kind == OpKind::LoadAdapters && !o.reload_diff.empty())
      why = "reloaded values differ from the saved ones: " + names_set_text(o.reload_diff);
    if (!why.empty()) out.push_back({"S6", o.step, o.rank, head("S6", o.step, o.rank) + why});
  }

  // S7: get_delta_weight (the delta_weight op, and every merge or unmerge)
  // works on sharded parameters and gives the delta of the full A and B.
  void s7(const Op& op, const Observation& o, std::vector<Finding>& out) {
    if (o.status == Status::ShapeError && op.kind != OpKind::LoadAdapters) {
      out.push_back({"S7", o.step, o.rank, head("S7", o.step, o.rank) + "get_delta_weight raised: " + o.message});
      return;
    }
    for (const auto& d : o.deltas)
      if (d.value != WeightClass::Exact) {
        out.push_back({"S7", o.step, o.rank,
                       head("S7", o.step, o.rank) + "delta of " + d.adapter + " is " + weight_class_name(d.value) +
                           " (not the delta of the full A and B)"});
        return;
      }
  }

  // S5: after an op every rank ran, the ranks agree on the adapter state.
  void agreement(const Observation* obs, size_t j, std::vector<Finding>& out) {
    const size_t i = 0;
    if (world_ < 2 || j != static_cast<size_t>(world_)) return;
    for (size_t k = i; k < j; ++k)
      if (obs[k].status == Status::Hang || obs[k].status == Status::Mismatch) return;
    // A described field; a stored weight's also carries its classes: its reading and, from a
    // value backend, the others its values fit (0 for every other field).
    struct Field {
      std::string name, value;
      uint8_t classes = 0;
    };
    auto describe = [&](const Observation& o) {
      std::vector<Field> f;
      f.push_back({"adapters in the model", ad_.text(present_in(*scen_, ad_, o))});
      f.push_back({"active adapters", names_set_text(o.active)});
      f.push_back({"disabled", o.disabled ? "true" : "false"});
      for (const auto& l : o.layers) {
        f.push_back({l.name + " merged", "[" + join(l.merged) + "]"});
        f.push_back({l.name + " stored weight", weight_class_name(l.stored),
                     static_cast<uint8_t>((1u << static_cast<int>(l.stored)) | l.stored_alt)});
      }
      for (const auto& p : o.params) f.push_back({p.name + " S.requires_grad", p.rg_s ? "true" : "false"});
      for (const auto& p : o.params) f.push_back({p.name + " dtype", dtype_name(p.dtype)});
      for (const auto& sv : o.saved) f.push_back({"saved " + sv.name + " dtype", dtype_name(sv.dtype)});
      return f;
    };
    // Fast path (no strings): every rank's fields equal rank i's, position by
    // position, so every described value is equal too.
    bool all_same = true;
    for (size_t k = i + 1; k < j && all_same; ++k) all_same = same_agreement_fields(obs[i], obs[k]);
    if (all_same) {
      s5_state_ = false;
      return;
    }
    auto base = describe(obs[i]);
    for (size_t k = i + 1; k < j; ++k) {
      auto other = describe(obs[k]);
      for (size_t x = 0; x < base.size() && x < other.size(); ++x) {
        if (base[x].value == other[x].value) continue;
        // values that fit a common class are no proven disagreement (sim/value_blind.hpp)
        if (base[x].classes & other[x].classes) continue;
        if (!s5_state_)
          out.push_back({"S5", obs[i].step, -1,
                         head("S5", obs[i].step, -1) + "ranks disagree on " + base[x].name + ": rank " + std::to_string(obs[i].rank) +
                             " " + base[x].value + ", rank " + std::to_string(obs[k].rank) + " " + other[x].value});
        s5_state_ = true;
        return;
      }
    }
    s5_state_ = false;
  }

  // The fields `agreement` describes, compared directly: true only when each
  // described value of `b` equals `a`'s at the same position.
  static bool same_agreement_fields(const Observation& a, const Observation& b) {
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

  friend class SpecChecker;
  int world_;
  std::shared_ptr<const Scenario> scen_;  // owners of parameter names (shared by copies)
  Adapters ad_;
  std::vector<RankIntent> ranks_;
  bool s5_collective_ = false, s5_state_ = false;
};

// Every field the checks read on a later step: the intent masks and flags, S2's
// per-layer "already reported", S5's latches, and of the previous observation
// what S3 compares with (group states, U's requires_grad, merged lists and the
// registered class).
void SpecChecker::Impl::append_key(std::vector<uint32_t>& out) const {
  out.push_back(0x5bec0000u | (s5_collective_ ? 1 : 0) | (s5_state_ ? 2 : 0));
  for (const RankIntent& r : ranks_) {
    out.push_back(r.intended | r.before_disable << 8 | r.inference_mode << 16 | (r.eval_output ? 1u << 24 : 0) |
                  (r.flags_since_forward ? 1u << 25 : 0) | (r.prev ? 1u << 26 : 0));
    for (uint8_t b : r.s2_bad) out.push_back(b);
    if (!r.prev) continue;
    out.push_back(static_cast<uint32_t>(r.prev->groups.size() << 20 | r.prev->params.size() << 10 | r.prev->layers.size()));
    for (const auto& g : r.prev->groups) out.push_back(static_cast<uint32_t>(g.state));
    for (const auto& p : r.prev->params)  // S3 reads U's flag only in groups UNSHARDED then
      out.push_back(unsharded(*r.prev, p.group) ? static_cast<uint32_t>(p.rg_u + 1) : 0u);
    for (const auto& l : r.prev->layers) {
      out.push_back(static_cast<uint32_t>(l.registered) << 8 | static_cast<uint32_t>(l.merged.size()));
      for (const auto& m : l.merged) out.push_back(ad_.mask({m}));
    }
  }
}

SpecChecker::SpecChecker(const Scenario& s) : impl_(std::make_unique<Impl>(s)) {}
SpecChecker::SpecChecker(const SpecChecker& o) : impl_(std::make_unique<Impl>(*o.impl_)) {}
SpecChecker& SpecChecker::operator=(const SpecChecker& o) {
  impl_ = std::make_unique<Impl>(*o.impl_);
  return *this;
}
SpecChecker::SpecChecker(SpecChecker&& o) noexcept = default;
SpecChecker& SpecChecker::operator=(SpecChecker&& o) noexcept = default;
SpecChecker::~SpecChecker() = default;
void SpecChecker::step(const Op& op, const Observation* obs, size_t n, std::vector<Finding>& out) {
  impl_->step(op, obs, n, out);
}
void SpecChecker::append_key(std::vector<uint32_t>& out) const { impl_->append_key(out); }

std::string param_detail(const Observation& o, const std::string& param) {
  for (const auto& p : o.params) {
    if (p.name != param) continue;
    std::string out = p.name + ": S.requires_grad=" + (p.rg_s ? "true" : "false");
    if (p.group.empty()) return out + " (not managed by FSDP)";
    out += std::string(", U.requires_grad=") + (p.rg_u < 0 ? "none" : p.rg_u ? "true" : "false");
    const GroupObs* g = group_named(o, p.group);
    return out + ", group " + p.group + " " + (g ? sharded_state_name(g->state) : "?");
  }
  return param + ": not in the module";
}

std::vector<Finding> check_spec(const SeqFile& f, const std::vector<Observation>& obs) {
  std::vector<Finding> out;
  SpecChecker checker(f.scenario);
  size_t i = 0;
  while (i < obs.size()) {
    size_t j = i;
    while (j < obs.size() && obs[j].step == obs[i].step) ++j;
    checker.step(f.ops[obs[i].step - 1], obs.data() + i, j - i, out);
    i = j;
  }
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    return a.step != b.step ? a.step < b.step : a.rank < b.rank;
  });
  return out;
}

}  // namespace fsdpsim
