#include "sim/core/shrink.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <iterator>
#include <set>

#include "model/vocab/cross_paired.hpp"
#include "model/vocab/op_rules.hpp"

namespace fsdpsim {
namespace {

const Observation* observation_at(const RunResult& r, int step, int rank) {
  for (const auto& o : r.observations)
    if (o.step == step && (rank < 0 || o.rank == rank)) return &o;
  return nullptr;
}

// Candidates get S8 on one in kS8Every; the input and the result get it in full.
constexpr uint32_t kS8Every = 16;

// Runs a candidate; false when it is not a valid file or loses what is kept.
struct Oracle {
  std::function<bool(const SeqFile&)> still_fails;
  int runs = 0;
  bool keeps(const SeqFile& f) {
    try {
      validate(f, "<candidate>");
      // What the backends and the written file get is the printed text: an
      // edit it cannot say (an adapter left without targets) is no candidate.
      parse_seq(print_seq(f), "<candidate>");
    } catch (const SourceError&) {
      return false;
    }
    ++runs;
    return still_fails(f);
  }
};

bool drop_ops(SeqFile& f, Oracle& o) {
  bool changed = false;
  for (size_t chunk = std::max<size_t>(1, f.ops.size() / 2); chunk >= 1; chunk /= 2) {
    for (size_t i = 0; i < f.ops.size();) {
      SeqFile c = f;
      c.ops.erase(c.ops.begin() + static_cast<long>(i), c.ops.begin() + static_cast<long>(std::min(f.ops.size(), i + chunk)));
      if (!c.ops.empty() && o.keeps(c)) {
        f = c;
        changed = true;
      } else {
        i += chunk;
      }
    }
    if (chunk == 1) break;
  }
  return changed;
}

bool op_names_optional(OpKind k) {
  return k == OpKind::Merge || k == OpKind::Reshard || k == OpKind::Unshard || k == OpKind::SaveAdapters;
}

bool simplify_args(SeqFile& f, Oracle& o) {
  bool changed = false;
  for (size_t i = 0; i < f.ops.size(); ++i) {
    auto attempt = [&](auto&& edit) {
      SeqFile c = f;
      edit(c.ops[i]);
      if (c.ops[i] == f.ops[i] || !o.keeps(c)) return;
      f = c;
      changed = true;
    };
    attempt([](Op& op) { op.rank = -1; });
    if (op_names_optional(f.ops[i].kind)) attempt([](Op& op) { op.names.clear(), op.list_form = false; });
    if (f.ops[i].kind == OpKind::SetAdapter && f.ops[i].names.size() > 1)
      for (const auto& n : std::vector<std::string>(f.ops[i].names)) attempt([&](Op& op) { op.names = {n}, op.list_form = false; });
  }
  return changed;
}

// Ops that only bring the groups into a state (an unsharded root after an
// eval, a forward or a train_step with reshard_after_forward=false, or an
// explicit `unshard`) become one canonical op where that keeps the finding, so
// one root cause reached through different ops shrinks to one sequence. The
// canonical op is the one a training loop calls: a no_grad `eval`, with the
// root's reshard_after_forward=false as accelerate's default root has it (FSDP2
// resolves the root's None to False; accelerate/utils/fsdp_utils.py::
// fsdp2_prepare_model), is tried first; the internal `unshard` of every group
// only where no eval keeps the finding. A maintainer reads "eval, then
// set_adapter" as their own loop, and "unshard(), then set_adapter" as misuse.
// The finding's own op never changes: its kind is part of what the oracle keeps.
bool canonical_op_kinds(SeqFile& f, Oracle& o) {
  bool changed = false;
  for (size_t i = 0; i < f.ops.size(); ++i) {
    const OpKind k = f.ops[i].kind;
    // an eval is already the canonical op (its root's reshard_after_forward is simplify_scenario's)
    if (k != OpKind::Forward && k != OpKind::TrainStep && k != OpKind::Unshard) continue;
    if (f.ops[i].rank >= 0) continue;  // a rank's own op stays what it is
    SeqFile as_eval = f;
    as_eval.ops[i].kind = OpKind::Eval;
    as_eval.ops[i].names.clear();
    for (auto& d : as_eval.scenario.shards)
      if (d.is_root()) d.raf = Raf::False;
    if (o.keeps(as_eval)) {
      f = as_eval;
      changed = true;
      continue;
    }
    if (k == OpKind::Unshard && f.ops[i].names.empty()) continue;
    SeqFile c = f;
    c.ops[i].kind = OpKind::Unshard;
    c.ops[i].names.clear();
    if (o.keeps(c)) {
      f = c;
      changed = true;
    }
  }
  return changed;
}

bool drop_ranks(SeqFile& f, Oracle& o) {
  for (int w = 1; w < f.scenario.world; ++w) {
    SeqFile c = f;
    c.scenario.world = w;
    if (o.keeps(c)) {
      f = c;
      return true;
    }
  }
  return false;
}

SeqFile without_layer(const SeqFile& f, size_t l) {
  SeqFile c = f;
  const std::string name = f.scenario.layers[l].name;
  if (l > 0 && l + 1 < c.scenario.layers.size()) c.scenario.layers[l + 1].in = c.scenario.layers[l - 1].out;
  c.scenario.layers.erase(c.scenario.layers.begin() + static_cast<long>(l));
  for (auto& a : c.scenario.adapters) {
    a.targets.erase(std::remove(a.targets.begin(), a.targets.end(), name), a.targets.end());
    a.modules_to_save.erase(std::remove(a.modules_to_save.begin(), a.modules_to_save.end(), name), a.modules_to_save.end());
  }
  for (auto& d : c.scenario.shards) d.modules.erase(std::remove(d.modules.begin(), d.modules.end(), name), d.modules.end());
  auto& ckpt = c.scenario.checkpoint;
  ckpt.erase(std::remove(ckpt.begin(), ckpt.end(), name), ckpt.end());
  c.scenario.shards.erase(std::remove_if(c.scenario.shards.begin(), c.scenario.shards.end(), [](const ShardDecl& d) { return d.modules.empty(); }),
                          c.scenario.shards.end());
  c.ops.erase(std::remove_if(c.ops.begin(), c.ops.end(), [&](const Op& op) {
                return (op.kind == OpKind::DeltaWeight || op.kind == OpKind::Reshard || op.kind == OpKind::Unshard) &&
                       !op.names.empty() && op.names[0] == name;
              }),
              c.ops.end());
  return c;
}

SeqFile without_adapter(const SeqFile& f, size_t a) {
  SeqFile c = f;
  const std::string name = f.scenario.adapters[a].name;
  c.scenario.adapters.erase(c.scenario.adapters.begin() + static_cast<long>(a));
  std::vector<Op> ops;
  for (Op op : c.ops) {
    auto it = std::find(op.names.begin(), op.names.end(), name);
    if (it != op.names.end()) {
      if (op.kind != OpKind::Merge && op.kind != OpKind::SaveAdapters && !(op.kind == OpKind::SetAdapter && op.names.size() > 1)) continue;
      op.names.erase(it);
      if (op.kind == OpKind::SetAdapter && op.names.empty()) continue;
    }
    ops.push_back(op);
  }
  c.ops = ops;
  return c;
}

bool drop_layers_and_adapters(SeqFile& f, Oracle& o) {
  for (size_t l = f.scenario.layers.size(); l-- > 0 && f.scenario.layers.size() > 1;) {
    SeqFile c = without_layer(f, l);
    if (o.keeps(c)) {
      f = c;
      return true;
    }
  }
  for (size_t a = f.scenario.adapters.size(); a-- > 1;) {
    SeqFile c = without_adapter(f, a);
    if (o.keeps(c)) {
      f = c;
      return true;
    }
  }
  return false;
}

// One scenario edit tried on its own; kept when the finding survives it.
bool try_scenario(SeqFile& f, Oracle& o, const std::function<bool(SeqFile&)>& edit) {
  SeqFile c = f;
  if (!edit(c) || c == f || !o.keeps(c)) return false;
  f = c;
  return true;
}

// Scenario details that do not matter go: experts layers become plain Linear,
// loading becomes full, the batches the same on every rank, the dtype fp32 with
// PEFT's default autocast (no adapter's own autocast either), a child
// group merges into the root's, reshard_after_forward becomes FSDP2's default
// (true), the optimizer holds the trainable parameters, adapters lose
// inference_mode and deferral and start random (a zero B hides a delta until
// a step trains it), modules_to_save copies go, overrides go, the values' seed becomes 0.
// A MixedPrecisionPolicy: the whole of it (the line and every call's keys) dropped, else each
// call's keys, else each key of the line in turn.
bool simplify_policy(SeqFile& f, Oracle& o) {
  if (!f.scenario.mixed_precision()) return false;
  const bool gone = try_scenario(f, o, [](SeqFile& c) {
    c.scenario.mp = {};
    for (auto& d : c.scenario.shards) d.mp = {};
    return true;
  });
  if (gone) return true;
  bool changed = false;
  for (size_t d = 0; d < f.scenario.shards.size(); ++d)
    changed = try_scenario(f, o, [&](SeqFile& c) { return !c.scenario.shards[d].mp.empty() && (c.scenario.shards[d].mp = {}, true); }) || changed;
  auto drop = [&](auto field) {
    changed = try_scenario(f, o, [&](SeqFile& c) {
                auto& key = c.scenario.mp.*field;
                return key.has_value() && (key.reset(), c.scenario.mixed_precision());
              }) || changed;
  };
  drop(&MixedPrecision::param_dtype), drop(&MixedPrecision::reduce_dtype), drop(&MixedPrecision::output_dtype),
      drop(&MixedPrecision::cast_forward_inputs);
  return changed;
}

bool simplify_scenario(SeqFile& f, Oracle& o) {
  // The policy first: a finding it does not need is then shown on a plain fp32 setup.
  bool changed = simplify_policy(f, o);
  for (size_t l = 0; l < f.scenario.layers.size(); ++l)
    changed = try_scenario(f, o, [&](SeqFile& c) { return c.scenario.layers[l].experts != 0 && (c.scenario.layers[l].experts = 0, true); }) || changed;
  changed = try_scenario(f, o, [](SeqFile& c) {
              if (c.scenario.loading == Loading::Full) return false;
              c.scenario.loading = Loading::Full;
              return true;
            }) || changed;
  changed = try_scenario(f, o, [](SeqFile& c) {
              if (c.scenario.dtype == DType::F32 && c.scenario.autocast_adapter_dtype) return false;
              c.scenario.dtype = DType::F32;
              c.scenario.autocast_adapter_dtype = true;
              return true;
            }) || changed;
  changed = try_scenario(f, o, [](SeqFile& c) { return c.scenario.data != Data::Same && (c.scenario.data = Data::Same, true); }) ||
            changed;
  // modules_to_save: each adapter's copy of each saved layer dropped in turn (the layer stays, plain).
  for (size_t a = 0; a < f.scenario.adapters.size(); ++a)
    for (size_t k = f.scenario.adapters[a].modules_to_save.size(); k-- > 0;)
      changed = try_scenario(f, o, [&](SeqFile& c) {
                  auto& m = c.scenario.adapters[a].modules_to_save;
                  if (k >= m.size()) return false;
                  m.erase(m.begin() + static_cast<long>(k));
                  return true;
                }) || changed;
  // Activation checkpointing: each wrapped layer unwrapped in turn.
  for (size_t k = f.scenario.checkpoint.size(); k-- > 0;)
    changed = try_scenario(f, o, [&](SeqFile& c) {
                if (k >= c.scenario.checkpoint.size()) return false;
                c.scenario.checkpoint.erase(c.scenario.checkpoint.begin() + static_cast<long>(k));
                return true;
              }) || changed;
  for (size_t d = f.scenario.shards.size(); d-- > 0;) {
    if (d >= f.scenario.shards.size() || f.scenario.shards[d].is_root()) continue;
    const std::string module = f.scenario.shards[d].modules[0];
    changed = try_scenario(f, o, [&](SeqFile& c) {
                c.scenario.shards.erase(c.scenario.shards.begin() + static_cast<long>(d));
                // reshard/unshard of that module now name a module no group holds: drop them.
                c.ops.erase(std::remove_if(c.ops.begin(), c.ops.end(), [&](const Op& op) {
                              return (op.kind == OpKind::Reshard || op.kind == OpKind::Unshard) && !op.names.empty() && op.names[0] == module;
                            }),
                            c.ops.end());
                return !c.ops.empty();
              }) || changed;
  }
  // The root's `none` and `false` both keep it unsharded (the auto rule): false is the canonical spelling.
  for (size_t d = 0; d < f.scenario.shards.size(); ++d) {
    changed = try_scenario(f, o, [&](SeqFile& c) { return c.scenario.shards[d].raf != Raf::True && (c.scenario.shards[d].raf = Raf::True, true); }) || changed;
    changed = try_scenario(f, o, [&](SeqFile& c) { return c.scenario.shards[d].raf == Raf::None && (c.scenario.shards[d].raf = Raf::False, true); }) || changed;
  }
  changed = try_scenario(f, o, [](SeqFile& c) {
              return c.scenario.optimizer != OptimizerParams::Trainable && (c.scenario.optimizer = OptimizerParams::Trainable, true);
            }) || changed;
  for (size_t a = 0; a < f.scenario.adapters.size(); ++a) {
    changed = try_scenario(f, o, [&](SeqFile& c) { return c.scenario.adapters[a].inference_mode && !(c.scenario.adapters[a].inference_mode = false); }) || changed;
    // An adapter an add/load brings in stays deferred: a load of one already in the model is another op
    // (PeftModel.load_adapter loads into it), so the class would change.
    const auto injected = [&](const SeqFile& c) {
      return std::any_of(c.ops.begin(), c.ops.end(), [&](const Op& op) {
        return OpRules::injects(op.kind) && !op.names.empty() && op.names[0] == c.scenario.adapters[a].name;
      });
    };
    changed = try_scenario(f, o, [&](SeqFile& c) {
                return c.scenario.adapters[a].deferred && !injected(c) && !(c.scenario.adapters[a].deferred = false);
              }) || changed;
    changed = try_scenario(f, o, [&](SeqFile& c) {
                return c.scenario.adapters[a].autocast.has_value() && (c.scenario.adapters[a].autocast.reset(), true);
              }) || changed;
    changed = try_scenario(f, o, [&](SeqFile& c) {
                return c.scenario.adapters[a].init != LoraInit::Random && (c.scenario.adapters[a].init = LoraInit::Random, true);
              }) || changed;
  }
  for (size_t k = f.scenario.overrides.size(); k-- > 0;)
    changed = try_scenario(f, o, [&](SeqFile& c) { return c.scenario.overrides.erase(c.scenario.overrides.begin() + static_cast<long>(k)), true; }) || changed;
  changed = try_scenario(f, o, [](SeqFile& c) { return c.scenario.seed != 0 && (c.scenario.seed = 0, true); }) || changed;
  return changed;
}

}  // namespace

std::string finding_signature(const SeqFile& f, const RunResult& r, const Finding& fd) {
  if (fd.step < 1 || fd.step > static_cast<int>(f.ops.size())) return fd.spec;
  const Observation* o = observation_at(r, fd.step, fd.rank);
  // Ranks that hang, mismatch or disagree do so whatever op the first of them was in.
  if (fd.spec == "S5") {
    const bool stuck = o && (o->status == Status::Hang || o->status == Status::Mismatch);
    if (o && is_cross_paired(*o)) return "S5:cross_paired";  // completed with another tensor's bytes
    return fmt::format("S5:{}", stuck ? status_name(o->status) : "disagree");
  }
  // The symptom's direction too (S1: a wrong adapter trains vs the right one does not), so a
  // shrink cannot trade one root cause for another behind the same spec, op and status.
  std::string sig = fmt::format("{}:{}:{}", fd.spec, op_name(f.ops[fd.step - 1].kind), o ? status_name(o->status) : "?");
  if (!fd.kind.empty()) fmt::format_to(std::back_inserter(sig), ":{}", fd.kind);
  return sig;
}

std::string spec_and_status(const std::string& finding_sig) {
  const size_t a = finding_sig.find(':');
  if (a == std::string::npos || finding_sig.compare(0, a, "S5") == 0) return finding_sig;
  const size_t b = finding_sig.find(':', a + 1);
  if (b == std::string::npos) return finding_sig;
  const size_t c = finding_sig.find(':', b + 1);
  return finding_sig.substr(0, a + 1) + finding_sig.substr(b + 1, c == std::string::npos ? std::string::npos : c - b - 1);
}

bool shrink(const SeqFile& f, ShrinkResult* out, const std::function<void(const std::string&)>& progress, bool canonical,
            const std::string& prefer) {
  RunResult first = run_checked(f);
  if (first.findings.empty()) return false;
  std::string target = finding_signature(f, first, first.findings[0]);
  for (const auto& fd : first.findings)
    if (!prefer.empty() && spec_and_status(finding_signature(f, first, fd)) == prefer) {
      target = finding_signature(f, first, fd);
      break;
    }
  shrink_while(f, out, [&](const SeqFile& c) {
    RunResult r = run_checked_sampled(c, compile_topology_reused(c), kS8Every);  // most candidates keep the scenario
    bool kept = false;
    for (size_t i = 0; i < r.findings.size() && !kept; ++i) kept = finding_signature(c, r, r.findings[i]) == target;
    recycle(std::move(r));  // candidates' observations are read once: their buffers serve the next
    return kept;
  }, progress, canonical);
  out->signature = target;
  return true;
}

void shrink_while(const SeqFile& f, ShrinkResult* out, const std::function<bool(const SeqFile&)>& still_fails,
                  const std::function<void(const std::string&)>& progress, bool canonical) {
  Oracle oracle{still_fails};
  SeqFile cur = f;
  for (auto& op : cur.ops) op.expects.clear();
  for (int round = 0; round < 20; ++round) {
    bool changed = drop_ops(cur, oracle);
    changed = simplify_args(cur, oracle) || changed;
    if (canonical) changed = canonical_op_kinds(cur, oracle) || changed;
    changed = drop_ranks(cur, oracle) || changed;
    changed = drop_layers_and_adapters(cur, oracle) || changed;
    changed = simplify_scenario(cur, oracle) || changed;
    if (progress)
      progress(fmt::format("round {}: {} ops, world {}, {} layers, {} adapters, {} runs", round + 1, cur.ops.size(),
                           cur.scenario.world, cur.scenario.layers.size(), cur.scenario.adapters.size(), oracle.runs));
    if (!changed) break;
  }
  fill_expectations(cur, run_checked(cur));
  out->minimal = cur;
  out->runs = oracle.runs;
}

std::string divergence_signature(const std::string& d) {
  // "step 5 rank 1 (train_step): grads: {other} vs {}" -> "(train_step): grads"
  size_t open = d.find(" (");
  if (d.rfind("step ", 0) == 0 && open != std::string::npos) {
    size_t close = d.find("): ", open);
    if (close != std::string::npos) {
      size_t field_end = d.find(':', close + 3);
      return d.substr(open + 1, field_end == std::string::npos ? std::string::npos : field_end - open - 1);
    }
  }
  // "finding on the real backend only: S1 step 4 rank 1: ..." -> "finding on the real backend only: S1"
  size_t colon = d.find(": ");
  if (colon == std::string::npos) return d;
  size_t word_end = d.find(' ', colon + 2);
  return d.substr(0, word_end);
}

void fill_expectations(SeqFile& f, const RunResult& r) {
  for (size_t i = 0; i < f.ops.size(); ++i) {
    Op& op = f.ops[i];
    op.expects.clear();
    const int step = static_cast<int>(i) + 1;
    std::vector<const Observation*> obs;
    for (const auto& o : r.observations)
      if (o.step == step) obs.push_back(&o);
    if (obs.empty()) continue;
    auto items_for = [&](const Observation& o) {
      std::vector<ExpectItem> items;
      ExpectItem s;
      if (o.status == Status::Ok) {
        s.key = ExpectItem::Key::Ok;
      } else {
        s.key = ExpectItem::Key::Error;
        s.status = o.status;
      }
      items.push_back(s);
      // An optimizer checkpoint's KeyError names its index (seed 004); an adapter's KeyError has none.
      if (o.status == Status::KeyError && o.index >= 0) {
        ExpectItem idx;
        idx.key = ExpectItem::Key::Index;
        idx.a = o.index;
        ExpectItem miss;
        miss.key = ExpectItem::Key::Missing;
        miss.a = o.opt_missing;
        miss.b = o.opt_total;
        items.push_back(idx);
        items.push_back(miss);
      }
      if (o.grads && o.status == Status::Ok) {
        ExpectItem g;
        g.key = ExpectItem::Key::Grads;
        g.names = texts_of(*o.grads);
        items.push_back(g);
      }
      return items;
    };
    // A finding names its rank (or every rank, -1): each rank expects the ones it has.
    auto all_for = [&](const Observation& o) {
      std::vector<ExpectItem> items = items_for(o);
      std::set<std::string> specs;
      for (const auto& fd : r.findings)
        if (fd.step == step && (fd.rank < 0 || fd.rank == o.rank)) specs.insert(fd.spec);
      for (const auto& sp : specs) {
        ExpectItem it;
        it.key = ExpectItem::Key::Finding;
        it.target = sp;
        items.push_back(it);
      }
      return items;
    };
    // One line for every rank only when every rank the op runs on observed it alike (a rank
    // stopped by an earlier hang or mismatch has no observation to expect).
    int running = 0;
    for (int rk = 0; rk < f.scenario.world; ++rk) running += f.ops[i].runs_on(rk);
    const std::vector<ExpectItem> first = all_for(*obs[0]);
    bool same = static_cast<int>(obs.size()) == running;
    for (const auto* o : obs) same = same && all_for(*o) == first;
    if (same) op.expects.push_back({-1, first, {}});
    else
      for (const auto* o : obs) op.expects.push_back({o->rank, all_for(*o), {}});
  }
}

}  // namespace fsdpsim
