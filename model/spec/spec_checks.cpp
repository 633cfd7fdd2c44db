#include "model/spec/spec_checks.hpp"

namespace fsdpsim {

std::string param_detail(const RankModel& m, int param) {
  const Topology& t = m.topology();
  const ParamInfo& pi = t.params[param];
  const ParamState& ps = m.state().params[param];
  std::string out = pi.name + ": S.requires_grad=" + (ps.rg_s ? "true" : "false");
  if (pi.group < 0) return out + " (not managed by FSDP)";
  bool has_u = m.state().groups[pi.group].has_u;
  out += std::string(", U.requires_grad=") + (has_u ? (ps.rg_u ? "true" : "false") : "none");
  return out + ", group " + t.groups[pi.group].name + " " + sharded_state_name(m.state().groups[pi.group].sharded);
}

namespace {

std::string head(const char* spec, int step, int rank) {
  return std::string(spec) + " step " + std::to_string(step) + (rank >= 0 ? " rank " + std::to_string(rank) : "") + ": ";
}

// Adapters targeting at least one layer (the ones that can receive gradients).
uint8_t targeting(const Topology& t) {
  uint8_t m = 0;
  for (const auto& l : t.layers)
    for (int a = 0; a < t.n_adapters(); ++a)
      if (l.A[a] >= 0) m |= static_cast<uint8_t>(1u << a);
  return m;
}

}  // namespace

SpecChecker::SpecChecker(const Topology& topo) : topo_(&topo) { reset(); }

void SpecChecker::reset() {
  // The first adapter is active and trains unless declared inference_mode.
  uint8_t first = topo_->adapters.empty() || topo_->adapters[0].inference_mode ? 0 : 1;
  intended_.assign(topo_->world, first);
  before_disable_.assign(topo_->world, 0);
  s2_bad_.assign(topo_->world, std::vector<uint8_t>(topo_->layers.size(), 0));
  s5_reported_ = false;
}

// The user's intent, from what they called (never from requires_grad flags).
void SpecChecker::track_intent(const Op& op, const RankModel& m, const OpResult& r) {
  if (r.status != Status::Ok) return;
  int rank = m.rank();
  switch (op.kind) {
    case OpKind::SetAdapter: {
      uint8_t mask = 0;
      for (const auto& n : op.names)
        for (int a = 0; a < topo_->n_adapters(); ++a)
          if (topo_->adapters[a].name == n) mask |= static_cast<uint8_t>(1u << a);
      intended_[rank] = mask;
      break;
    }
    case OpKind::DisableEnter:
      before_disable_[rank] = intended_[rank];
      intended_[rank] = 0;
      break;
    case OpKind::DisableExit:
      // Leaving the context restores training, but an adapter loaded for
      // inference stays frozen.
      intended_[rank] = before_disable_[rank] & static_cast<uint8_t>(~m.state().inference_mode);
      break;
    case OpKind::DeleteAdapter: {
      uint8_t left = intended_[rank] & m.state().present;
      intended_[rank] = left ? left : (intended_[rank] ? m.state().active : 0);
      break;
    }
    default:
      break;
  }
}

// S1: after set_adapter(X) every training step sends gradients to exactly X's shards.
void SpecChecker::check_s1(int step, const RankModel& m, const OpResult& r, std::vector<Finding>& out) {
  if (r.status != Status::Ok && r.status != Status::NoGradFn) return;
  if (r.no_grad_output) return;  // backward on an eval output fails by design
  if (m.any_merged() || m.state().disabled) return;  // merged or disabled layers skip LoRA by design
  uint8_t want = intended_[m.rank()] & m.state().present & targeting(*topo_);
  uint8_t got = r.status == Status::Ok ? r.grads : 0;
  if (want == got) return;
  std::string text = head("S1", step, m.rank()) + (want ? "expected gradients on " + mask_names(*topo_, want) : "expected no gradients") +
                     ", got " + (r.status == Status::NoGradFn ? std::string("no_grad_fn") : mask_names(*topo_, got));
  uint8_t wrong = want ^ got;
  for (int a = 0; a < topo_->n_adapters() && wrong; ++a) {
    if (!((wrong >> a) & 1)) continue;
    for (const auto& l : topo_->layers)
      if (l.A[a] >= 0) {
        text += "; " + param_detail(m, l.A[a]);
        break;
      }
    break;
  }
  out.push_back({"S1", step, m.rank(), text});
}

// S2: the weight the module holds equals W0 + the merged deltas (reported when it turns bad).
void SpecChecker::check_s2(int step, const RankModel& m, std::vector<Finding>& out) {
  auto& bad = s2_bad_[m.rank()];
  for (size_t l = 0; l < topo_->layers.size(); ++l) {
    WeightClass w = m.classify_registered(static_cast<int>(l));
    if (w == WeightClass::Exact) {
      bad[l] = 0;
      continue;
    }
    if (bad[l]) continue;
    bad[l] = 1;
    const LayerPeft& lp = m.state().layers[l];
    std::string merged;
    for (int i = 0; i < lp.n_merged; ++i) merged += (i ? "," : "") + topo_->adapters[lp.merged[i]].name;
    int wp = topo_->layers[l].weight;
    std::string where = m.is_registered_u(wp) ? "unsharded copy" : "shard";
    out.push_back({"S2", step, m.rank(),
                   head("S2", step, m.rank()) + "layer " + topo_->layers[l].name + " merged=[" + merged + "] but its " + where +
                       " is " + weight_class_name(w) + " (stored shard " + weight_class_name(m.classify_stored(static_cast<int>(l))) + ")"});
  }
}

// S3: nothing changed while a group is unsharded is lost at reshard. One
// clause per group and adapter: "group root: other.requires_grad U=true S=false (2 params)".
void SpecChecker::check_s3(int step, const RankModel& m, const OpResult& r, std::vector<Finding>& out) {
  if (r.lost.empty()) return;
  struct Clause {
    int group;
    std::string what;
    int count;
  };
  std::vector<Clause> clauses;
  auto add = [&](int group, const std::string& what) {
    for (auto& c : clauses)
      if (c.group == group && c.what == what) return void(++c.count);
    clauses.push_back({group, what, 1});
  };
  for (const LostChange& c : r.lost) {
    const ParamInfo& pi = topo_->params[c.param];
    const ParamState& ps = m.state().params[c.param];
    std::string owner = pi.adapter >= 0 ? topo_->adapters[pi.adapter].name : pi.name;
    if (c.flag) add(pi.group, owner + ".requires_grad U=" + (ps.rg_s ? "false" : "true") + " S=" + (ps.rg_s ? "true" : "false"));
    if (c.data) add(pi.group, pi.name + " values edited on U (merge/unmerge/load)");
  }
  std::string text = head("S3", step, m.rank()) + "reshard dropped changes made on the unsharded copy:";
  int last_group = -1;
  for (size_t i = 0; i < clauses.size(); ++i) {
    const Clause& c = clauses[i];
    if (c.group != last_group) text += std::string(i ? "; " : " ") + "group " + topo_->groups[c.group].name + ": ";
    else text += ", ";
    last_group = c.group;
    text += c.what + (c.count > 1 ? " (" + std::to_string(c.count) + " params)" : "");
  }
  out.push_back({"S3", step, m.rank(), text});
}

void SpecChecker::after_rank_op(int step, const Op& op, const RankModel& m, const OpResult& r, std::vector<Finding>& out) {
  track_intent(op, m, r);
  if (op.is_training()) check_s1(step, m, r, out);
  check_s2(step, m, out);
  check_s3(step, m, r, out);
  // S4: an optimizer checkpoint can be saved and loaded at any point of a legal sequence.
  if ((op.kind == OpKind::SaveOptimizer || op.kind == OpKind::LoadOptimizer) && r.status == Status::KeyError) {
    const auto& opt = m.state().optimizer;
    std::string text = head("S4", step, m.rank()) + op_name(op.kind) + " raised " + r.message + " (" +
                       std::to_string(r.opt_missing) + "/" + std::to_string(opt.size()) +
                       " optimizer parameters not registered; first: " + param_detail(m, opt[r.index]) + ")";
    out.push_back({"S4", step, m.rank(), text});
  }
}

// S5: ranks agree on adapter state (active, disabled, merged, shard flags, stored weights).
void SpecChecker::after_all_ranks(int step, const std::vector<RankModel>& ranks, std::vector<Finding>& out) {
  if (ranks.size() < 2) return;
  auto describe = [&](const RankModel& m) {
    const RankState& s = m.state();
    std::vector<std::pair<std::string, std::string>> f;
    f.push_back({"adapters in the model", mask_names(*topo_, s.present)});
    f.push_back({"active adapters", mask_names(*topo_, s.active)});
    f.push_back({"disabled", s.disabled ? "true" : "false"});
    for (size_t l = 0; l < topo_->layers.size(); ++l) {
      std::string merged;
      for (int i = 0; i < s.layers[l].n_merged; ++i) merged += (i ? "," : "") + topo_->adapters[s.layers[l].merged[i]].name;
      f.push_back({topo_->layers[l].name + " merged", "[" + merged + "]"});
      f.push_back({topo_->layers[l].name + " stored weight", weight_class_name(m.classify_stored(static_cast<int>(l)))});
    }
    for (size_t p = 0; p < topo_->params.size(); ++p)
      if (topo_->params[p].adapter >= 0 && s.params[p].present)
        f.push_back({topo_->params[p].name + " S.requires_grad", s.params[p].rg_s ? "true" : "false"});
    return f;
  };
  auto base = describe(ranks[0]);
  for (size_t r = 1; r < ranks.size(); ++r) {
    auto other = describe(ranks[r]);
    for (size_t i = 0; i < base.size() && i < other.size(); ++i) {
      if (base[i].second == other[i].second) continue;
      if (!s5_reported_)
        out.push_back({"S5", step, -1,
                       head("S5", step, -1) + "ranks disagree on " + base[i].first + ": rank 0 " + base[i].second + ", rank " +
                           std::to_string(r) + " " + other[i].second});
      s5_reported_ = true;
      return;
    }
  }
  s5_reported_ = false;
}

}  // namespace fsdpsim
