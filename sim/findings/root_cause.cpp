#include "sim/findings/root_cause.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "model/machine/topology.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim {
namespace {

// One rank's state and provenance after a prefix of the ops.
struct Moment {
  RankState st;
  Provenance pv;
};

struct Run {
  const SeqFile* file = nullptr;
  Topology topo;
  Moment before, after;  // entering the finding's op, and after it
  int rank = 0, step = 0;
};

Moment run_prefix(const Topology& topo, const SeqFile& f, int n, int rank) {
  Simulator sim(topo);
  std::vector<Provenance> pv;
  sim.set_provenance(&pv);
  std::vector<Op> ops(f.ops.begin(), f.ops.begin() + std::min<size_t>(static_cast<size_t>(n), f.ops.size()));
  RunOptions light;
  light.observe = false;
  sim.run(ops, light);
  Moment m{sim.ranks()[static_cast<size_t>(rank)].state(), pv[static_cast<size_t>(rank)]};
  sim.set_provenance(nullptr);
  return m;
}

const char* slug(Tr t) { return tr_info(t).slug; }

// Op `step` (1-based) runs inside a `with disable_adapter():` block (between an enter and its exit).
bool inside_disable_block(const SeqFile& f, int step) {
  bool inside = false;
  for (int i = 0; i < step - 1 && i < static_cast<int>(f.ops.size()); ++i) {
    if (f.ops[i].kind == OpKind::DisableEnter) inside = true;
    if (f.ops[i].kind == OpKind::DisableExit) inside = false;
  }
  bool exits = false;
  for (size_t i = static_cast<size_t>(std::max(step, 0)); i < f.ops.size(); ++i) exits = exits || f.ops[i].kind == OpKind::DisableExit;
  return inside && exits;
}

// The name a write goes by in an id: the user's call, except where an inner
// mechanism is the cause whatever call ran it.
// Every weight edit on U is LoraLayer.merge / unmerge's `W.data += delta` on the registered
// weight, whichever call ran it (merge_adapter, unmerge_adapter, set_adapter's unmerge, a
// load's inject, the patched disable exit): one fix, one id; a disabled forward's unmerge
// runs inside forward, where no caller can reshard first: its own id.
const char* weight_writer(Tr mech) { return mech == Tr::DisabledForwardUnmerge ? "disabled-forward" : "merge-unmerge"; }
Tr writer_of(Tr op, Tr mech) {
  switch (mech) {
    case Tr::DeleteFallback:
    case Tr::DisabledForwardUnmerge:
      return mech;
    default:
      return op == Tr::None ? mech : op;
  }
}

// "{a, b}" after `key` in `text` -> the adapter names.
std::set<std::string> names_after(const std::string& text, const std::string& key) {
  std::set<std::string> out;
  const size_t k = text.find(key);
  if (k == std::string::npos) return out;
  const size_t open = text.find('{', k), close = text.find('}', k);
  if (open == std::string::npos || close == std::string::npos || close < open) return out;
  std::string item;
  for (size_t i = open + 1; i <= close; ++i) {
    const char c = text[i];
    if (c == ',' || c == '}') {
      if (!item.empty()) out.insert(item);
      item.clear();
    } else if (c != ' ') {
      item += c;
    }
  }
  return out;
}

// The first layer whose name follows "layer " in the text (-1: none).
int layer_in(const Topology& topo, const std::string& text) {
  const size_t k = text.find("layer ");
  if (k == std::string::npos) return -1;
  size_t e = text.find_first_of(" :,", k + 6);
  return topo.layer_index(text.substr(k + 6, e == std::string::npos ? std::string::npos : e - k - 6));
}

Blame blame(std::string id, std::vector<Tr> trs, std::string how) { return Blame{std::move(id), std::move(trs), std::move(how)}; }

// A write to U the finding's or an earlier reshard dropped, on the params of `adapters` (all when empty).
bool dropped_flag(const Run& r, const Moment& m, const std::set<int>& adapters, int since, Blame* out) {
  for (size_t p = 0; p < m.pv.params.size(); ++p) {
    const int a = r.topo.params[p].adapter;
    if (!adapters.empty() && !adapters.count(a)) continue;
    const ParamTags& t = m.pv.params[p];
    if (!t.rg_drop.seq || t.rg_drop.step < since || t.rg_drop.seq < t.rg_s.seq) continue;
    const Tr w = writer_of(t.rg_drop.writer_op, t.rg_drop.writer);
    *out = blame(fmt::format("flag-on-copy/{}", slug(w)), {w, Tr::ToSharded, t.rg_drop.dropper},
                 fmt::format("{}.requires_grad written on the unsharded copy by {}, dropped at step {} by {}'s reshard",
                             r.topo.params[p].name.str(), slug(w), t.rg_drop.step, slug(t.rg_drop.dropper)));
    return true;
  }
  return false;
}

bool dropped_weight(const Run& r, const Moment& m, int layer, int since, Blame* out) {
  for (size_t l = 0; l < r.topo.layers.size(); ++l) {
    if (layer >= 0 && static_cast<int>(l) != layer) continue;
    const int w = r.topo.layers[l].weight;
    const ParamTags& t = m.pv.params[static_cast<size_t>(w)];
    if (!t.w_drop.seq || t.w_drop.step < since || t.w_drop.seq < t.w_s.seq) continue;
    const Tr wr = writer_of(t.w_drop.writer_op, t.w_drop.writer);
    *out = blame(fmt::format("weight-on-copy/{}", weight_writer(t.w_drop.writer)), {wr, Tr::GetDeltaWeight, Tr::ToSharded},
                 fmt::format("{} edited on the unsharded copy by {}, dropped at step {} by {}'s reshard", r.topo.layers[l].name.str(),
                             slug(wr), t.w_drop.step, slug(t.w_drop.dropper)));
    return true;
  }
  return false;
}

bool raised_at(const Run& r, int step) {
  const auto& s = r.after.pv.raised_steps;
  return std::find(s.begin(), s.end(), step) != s.end();
}

// Which adapters the layers of `adapters` run was last decided by a mechanism a root cause is
// named after: a delete's per-layer fallback, or a change inside a disable_adapter block.
bool active_writer(const Run& r, const Moment& m, const std::set<int>& adapters, Blame* out) {
  for (size_t l = 0; l < r.topo.layers.size(); ++l) {
    bool targets = false;
    for (int a : adapters) targets = targets || r.topo.layers[l].A[static_cast<size_t>(a)] >= 0;
    const Stamp& s = m.pv.layer_active[l];
    if (!targets || !s.seq || s.step == 0) continue;
    if (s.mech == Tr::DeleteFallback) {
      *out = blame("delete-fallback-per-layer", {Tr::DeleteAdapter, Tr::DeleteFallback},
                   fmt::format("layer {} fell back to its own first remaining adapter when delete_adapter took its active one (step {})",
                               r.topo.layers[l].name.str(), s.step));
      return true;
    }
    if (inside_disable_block(*r.file, s.step)) {
      *out = blame("disable-exit-not-scoped", {s.op, Tr::DisableExit, Tr::EnableAdapters},
                   fmt::format("layer {}'s active adapters changed by {} inside disable_adapter() (step {}); the exit enables those",
                               r.topo.layers[l].name.str(), slug(s.op), s.step));
      return true;
    }
  }
  return false;
}

// The params of `adapters` on this rank, the most recent writer of their registered flag.
bool flag_writer(const Run& r, const Moment& m, const std::set<int>& adapters, Blame* out) {
  const Stamp* best = nullptr;
  int best_p = -1;
  for (size_t p = 0; p < m.pv.params.size(); ++p) {
    if (!adapters.count(r.topo.params[p].adapter)) continue;
    const ParamTags& t = m.pv.params[p];
    const int g = r.topo.params[p].group;
    const bool u = g >= 0 && !m.st.params[p].detached && m.st.groups[static_cast<size_t>(g)].unsharded();
    const Stamp& s = u && t.rg_u.mech != Tr::ToUnsharded ? t.rg_u : t.rg_s;
    if (s.seq && (!best || s.seq > best->seq)) best = &s, best_p = static_cast<int>(p);
  }
  if (!best) return false;
  Tr w = writer_of(best->op, best->mech);
  const int a = r.topo.params[static_cast<size_t>(best_p)].adapter;
  std::string id;
  if (best->mech == Tr::EnableAdapters && m.st.inference_mode.contains(a)) id = "enable-ignores-inference-mode";
  else if (best->mech == Tr::EnableAdapters || best->op == Tr::DisableExit) id = "disable-exit-not-scoped";
  else if (best->mech == Tr::DeleteFallback) id = "delete-fallback-per-layer";
  else if ((best->mech == Tr::InjectAdapter || best->op == Tr::AddAdapter || best->op == Tr::LoadAdapter) && raised_at(r, best->step))
    id = "half-added-adapter";
  else if (inside_disable_block(*r.file, best->step)) id = "disable-exit-not-scoped";
  else id = fmt::format("flag-written-by/{}", slug(w));
  *out = blame(id, {w, best->by}, fmt::format("{}.requires_grad last written by {} ({}) at step {}", r.topo.params[static_cast<size_t>(best_p)].name.str(),
                                             slug(best->op), slug(best->by), best->step));
  return true;
}

std::set<int> adapters_named(const Topology& topo, const std::set<std::string>& names) {
  std::set<int> out;
  for (int a = 0; a < topo.n_adapters(); ++a)
    if (names.count(topo.adapters[a].name)) out.insert(a);
  return out;
}

// A weight edit on the unsharded copy not yet dropped: U registered, edited since the gather.
bool edited_on_copy(const Run& r, int layer, Blame* out) {
  for (size_t l = 0; l < r.topo.layers.size(); ++l) {
    if (layer >= 0 && static_cast<int>(l) != layer) continue;
    const int w = r.topo.layers[l].weight;
    const FsdpParam& ps = r.after.st.params[static_cast<size_t>(w)];
    const int g = r.topo.layers[l].group;
    if (g < 0 || !r.after.st.groups[static_cast<size_t>(g)].unsharded() || ps.w_u == ps.w_s) continue;
    const Stamp& s = r.after.pv.params[static_cast<size_t>(w)].w_u;
    if (!s.seq || s.mech == Tr::ToUnsharded) continue;
    const Tr wr = writer_of(s.op, s.mech);
    *out = blame(fmt::format("weight-on-copy/{}", weight_writer(s.mech)), {wr, Tr::GetDeltaWeight, Tr::ToSharded},
                 fmt::format("{} edited on the unsharded copy by {} at step {}; the shard keeps the old value", r.topo.layers[l].name.str(),
                             slug(wr), s.step));
    return true;
  }
  return false;
}

// A DoRA merge or unmerge whose `weight.data = new` the sharded DTensor ignored, after the shard's last write.
bool lost_assignment(const Run& r, int layer, Blame* out) {
  for (size_t l = 0; l < r.topo.layers.size(); ++l) {
    if (layer >= 0 && static_cast<int>(l) != layer) continue;
    const ParamTags& t = r.after.pv.params[static_cast<size_t>(r.topo.layers[l].weight)];
    if (!t.w_lost.seq || t.w_lost.seq < t.w_s.seq) continue;
    *out = blame("dora-data-assign-on-shard", {t.w_lost.op, Tr::DoraDataAssign},
                 fmt::format("{}'s DoRA edit by {} at step {} assigned `weight.data` on the sharded DTensor: the shard kept its values",
                             r.topo.layers[l].name.str(), slug(t.w_lost.op), t.w_lost.step));
    return true;
  }
  return false;
}

bool single_expert(Blame* out) {
  *out = blame("param-wrapper-single-expert", {Tr::GetDeltaWeight}, "an experts layer with E = 1 takes Linear's (out, in) delta path");
  return true;
}

// An error the finding's op raised: the raise site is the origin.
bool raised_here(const Run& r, const Finding& fd, Blame* out) {
  const Provenance::Raised& x = r.after.pv.raised;
  if (x.step != r.step) return false;
  switch (x.site) {
    case Tr::LazyInitDtypes:
      *out = blame("mixed-adapter-dtypes-in-one-group", {Tr::LazyInitDtypes}, "FSDP's lazy init found trainable parameters of two dtypes in one group");
      return true;
    case Tr::CheckpointRecompute:
      *out = blame("checkpoint-recompute-mismatch", {Tr::CheckpointRecompute},
                   fmt::format("the activation-checkpoint recompute saw other tensors than the forward (step {})", x.step));
      return true;
    default:
      break;
  }
  if (x.op == Tr::SaveOptimizer || x.op == Tr::LoadOptimizer) {
    // The first optimizer object the module no longer registers: why.
    for (int p : r.after.st.optimizer.objects) {
      const FsdpParam& ps = r.after.st.params[static_cast<size_t>(p)];
      const int g = r.topo.params[static_cast<size_t>(p)].group;
      const bool u = g >= 0 && !ps.detached && r.after.st.groups[static_cast<size_t>(g)].unsharded();
      if (!ps.present || ps.recreated || ps.detached) {
        const Stamp& s = r.after.pv.params[static_cast<size_t>(p)].present;
        *out = blame("optimizer-holds-deleted-adapter", {s.op, x.op},
                     fmt::format("the optimizer holds {} which {} at step {} took out of the module", r.topo.params[static_cast<size_t>(p)].name.str(),
                                 slug(s.op), s.step));
        return true;
      }
      if (u) {
        const Stamp& s = r.after.pv.group_unsharded[static_cast<size_t>(g)];
        *out = blame("optimizer-checkpoint-while-unsharded", {Tr::ToUnsharded, x.op},
                     fmt::format("group {} left unsharded by {} at step {}: the optimizer's shard objects are not the registered ones",
                                 r.topo.groups[static_cast<size_t>(g)].name.str(), slug(s.op), s.step));
        return true;
      }
    }
  }
  const Tr site = x.site == Tr::None ? x.op : x.site;
  *out = blame(fmt::format("raises-in/{}", slug(site)), {site}, fmt::format("{} raised at step {}", slug(site), x.step));
  return true;
}

// The S1 rule: the adapters that got gradients wrongly (or none), and why their flags say so.
bool s1_rule(const Run& r, const Finding& fd, Blame* b) {
  const std::string& t = fd.text;
  if (r.before.pv.wedged_step && r.before.pv.wedged_site == Tr::ReduceDtypeUnset) {
    *b = blame("reduce-dtype-unset-after-frozen-forward", {Tr::LazyInitDtypes, Tr::ReduceDtypeUnset, Tr::PostBackwardReduce},
               fmt::format("a group all frozen at its first forward kept no reduce dtype; its gradient at step {} came in the compute "
                           "dtype and the shard's grad setter refused it, leaving FSDP in PRE_BACKWARD",
                           r.before.pv.wedged_step));
    return true;
  }
  if (r.before.pv.wedged_step) {
    const bool ckpt = r.before.pv.wedged_site == Tr::CheckpointRecompute;
    *b = blame("checkpoint-error-wedges-fsdp", {r.before.pv.wedged_site, Tr::PostBackwardReduce},
               fmt::format("{} at step {} left FSDP in PRE_BACKWARD: no later backward reduces",
                           ckpt ? "a CheckpointError" : "FSDP's reduce refusing the gradients' dtypes", r.before.pv.wedged_step));
    return true;
  }
  // "got no_grad_fn", "got assertion_error": the op raised; the raise site is the origin, unless
  // it is autograd's own (then why nothing required grad is).
  const bool raised = r.after.pv.raised.step == r.step;
  if (raised && r.before.pv.graph_merged) {
    *b = blame("backward-of-merged-forward", {Tr::Forward, Tr::Backward},
               fmt::format("the forward at step {} ran with merged layers, which skip the LoRA path", r.before.pv.graph_step));
    return true;
  }
  if (raised && r.after.pv.raised.site != Tr::Backward && r.after.pv.raised.site != Tr::Forward && raised_here(r, fd, b)) return true;
  const std::set<std::string> want = t.find("expected no gradients") != std::string::npos ? std::set<std::string>{}
                                                                                         : names_after(t, "expected gradients on");
  const std::set<std::string> got = names_after(t, ", got");
  std::set<std::string> wrong;
  for (const auto& n : want)
    if (!got.count(n)) wrong.insert(n);
  for (const auto& n : got)
    if (!want.count(n)) wrong.insert(n);
  const std::set<int> adapters = adapters_named(r.topo, wrong.empty() ? want : wrong);
  // Extra gradients reduced from a grad an unsynced backward left on a resharded U.
  for (size_t p = 0; p < r.before.st.params.size(); ++p) {
    const int g = r.topo.params[p].group;
    if (!adapters.count(r.topo.params[p].adapter) || g < 0 || !r.before.st.params[p].grad_u) continue;
    if (r.before.st.groups[static_cast<size_t>(g)].unsharded()) continue;
    *b = blame("unsynced-grads-reach-next-adapter", {Tr::PostBackwardUnsynced, Tr::PostBackwardReduce},
               fmt::format("{} kept a gradient on its unsharded copy from an unsynced backward (step {})", r.topo.params[p].name.str(),
                           r.before.pv.params[p].grad_u.step));
    return true;
  }
  return dropped_flag(r, r.after, adapters, 0, b) || active_writer(r, r.before, adapters, b) || flag_writer(r, r.before, adapters, b);
}

// The S2 rule: the layer's stored (or registered) weight, and who edited it where.
bool s2_rule(const Run& r, const Finding& fd, Blame* b) {
  const int l = layer_in(r.topo, fd.text);
  if (dropped_weight(r, r.after, l, 0, b) || edited_on_copy(r, l, b) || lost_assignment(r, l, b)) return true;
  if (l < 0) return false;
  const LayerInfo& li = r.topo.layers[static_cast<size_t>(l)];
  if (li.experts == 1) return single_expert(b);
  // An adapter whose A or B the optimizer moved after its delta went into W.
  const Stamp& merged = r.after.pv.layer_merged[static_cast<size_t>(l)];
  for (int a = 0; a < r.topo.n_adapters(); ++a)
    for (int p : li.tensors(a)) {
      if (!merged.seq) continue;
      const Stamp& v = r.after.pv.params[static_cast<size_t>(p)].ver_s;
      if (!v.seq || v.seq < merged.seq || v.op != Tr::OptimizerStep) continue;
      *b = blame("training-a-merged-adapter", {Tr::Merge, Tr::OptimizerStep},
                 fmt::format("{} stepped at step {} after the layer's merge at step {}", r.topo.params[static_cast<size_t>(p)].name.str(), v.step,
                             merged.step));
      return true;
    }
  const Stamp& w = r.after.pv.params[static_cast<size_t>(li.weight)].w_s;
  if (!w.seq) return false;
  const Tr wr = writer_of(w.op, w.mech);
  *b = blame(fmt::format("stored-weight-written-by/{}", slug(wr)), {wr}, fmt::format("{} last written by {} at step {}", li.name.str(), slug(wr), w.step));
  return true;
}

bool s5_rule(const Run& r, const Finding& fd, Blame* b) {
  const std::string& t = fd.text;
  for (const auto& li : r.topo.layers)
    if (li.experts == 1 && t.find("stored weight") != std::string::npos) return single_expert(b);
  // A placement (dtype, device) that differs between ranks, seen in a disagreement or in the
  // broadcast it mismatches.
  for (size_t p = 0; p < r.after.pv.params.size(); ++p) {
    const Stamp& s = r.after.pv.params[p].meta;
    if (!s.seq || r.topo.params[p].adapter < 0 || t.find(r.topo.params[p].name.str() + " dtype") == std::string::npos) {
      if (t.find("broadcast(" + r.topo.params[p].name.str()) == std::string::npos || r.topo.params[p].adapter < 0) continue;
    }
    *b = blame("placement-differs-across-ranks", {Tr::InjectAdapter, Tr::Prepare},
               fmt::format("{} placed by {} ({}) at step {}", r.topo.params[p].name.str(), slug(s.op), slug(s.by), s.step));
    return true;
  }
  if (t.find("no FSDP group manages them") != std::string::npos) {
    *b = blame("late-adapter-not-managed-by-fsdp", {Tr::AddAdapter, Tr::OptimizerStep},
               "adapter tensors added after fully_shard: no group reduces their gradients");
    return true;
  }
  // A rank holding rows lost an edit its padding-only peer could not: the same lost edit.
  const int l = layer_in(r.topo, t);
  return dropped_weight(r, r.after, l, 0, b) || edited_on_copy(r, l, b) || dropped_flag(r, r.after, {}, 0, b);
}

bool s7_rule(const Run& r, const Finding& fd, Blame* b) {
  for (const auto& li : r.topo.layers)
    if (li.experts == 1) return single_expert(b);
  const int l = layer_in(r.topo, fd.text);
  for (size_t p = 0; p < r.before.st.params.size(); ++p) {
    const int g = r.topo.params[p].group;
    if (r.topo.params[p].adapter < 0 || g < 0 || (l >= 0 && r.topo.params[p].layer != l)) continue;
    if (!r.before.st.params[p].u_stale() || !r.before.st.groups[static_cast<size_t>(g)].unsharded()) continue;
    *b = blame("delta-weight-from-stale-copy", {Tr::OptimizerStep, Tr::GetDeltaWeight},
               fmt::format("{}: the registered unsharded copy is older than the shard the optimizer stepped", r.topo.params[p].name.str()));
    return true;
  }
  *b = blame("delta-weight-on-local-shard", {Tr::GetDeltaWeight}, "get_delta_weight computed on the local shard of a sharded parameter");
  return true;
}

Blame attribute(const Run& r, const SeqFile& f, const Finding& fd) {
  Blame b;
  for (const auto& op : f.ops)
    if (op.rank >= 0) return blame("rank-divergent-op", {}, fmt::format("`@{} {}` runs on one rank only", op.rank, op_name(op.kind)));
  bool done = false;
  if (fd.spec == "S1") done = s1_rule(r, fd, &b);
  else if (fd.spec == "S2") done = s2_rule(r, fd, &b);
  else if (fd.spec == "S3") done = dropped_flag(r, r.after, {}, r.step, &b) || dropped_weight(r, r.after, -1, r.step, &b);
  else if (fd.spec == "S4") done = raised_here(r, fd, &b);
  else if (fd.spec == "S5") done = s5_rule(r, fd, &b);
  else if (fd.spec == "S6") {
    bool checkpointed = false;
    for (const auto& li : r.topo.layers) checkpointed = checkpointed || li.checkpoint;
    if (fd.text.find(" rows") != std::string::npos) {
      b = blame("save-keeps-local-shard", {Tr::SaveAdapters}, "get_peft_model_state_dict saves each rank's DTensor shard, not the full tensor");
      done = true;
    } else if (fd.text.find("were not saved") != std::string::npos && checkpointed) {
      b = blame("save-skips-checkpointed-layers", {Tr::SaveAdapters},
                "the state dict's keys lack the checkpoint wrapper's segment that PEFT 0.21's adapter key prefixes (from "
                "named_modules) keep, so the adapter filter drops them");
      done = true;
    } else if (fd.text.find("were not saved") != std::string::npos) {
      b = blame("save-selects-active-only", {Tr::SaveAdapters}, "the save path writes only the active adapter, not every selected one");
      done = true;
    } else {
      done = fd.text.find("raised") != std::string::npos && raised_here(r, fd, &b);
    }
  } else if (fd.spec == "S7") done = s7_rule(r, fd, &b);
  if (done) return b;
  // Nothing above explained it: the spec alone, so it is listed apart.
  return blame(fmt::format("unattributed/{}", fd.spec), {}, "no provenance rule explains this finding");
}

}  // namespace

Blame attribute_root_cause(const SeqFile& f, const Finding& fd) {
  Run r;
  r.file = &f;
  r.topo = compile_topology(f);
  r.rank = fd.rank >= 0 ? fd.rank : 0;
  r.step = fd.step;
  r.before = run_prefix(r.topo, f, fd.step - 1, r.rank);
  r.after = run_prefix(r.topo, f, fd.step, r.rank);
  return attribute(r, f, fd);
}

std::string blamed_functions(const Blame& b) {
  std::string out;
  for (Tr t : b.transitions) {
    if (t == Tr::None) continue;
    if (!out.empty()) out += "; ";
    out += fmt::format("{} ({})", slug(t), tr_info(t).mirrors);
  }
  return out;
}

}  // namespace fsdpsim
