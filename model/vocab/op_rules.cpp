#include "model/vocab/op_rules.hpp"

#include <algorithm>
#include <iterator>

namespace fsdpsim {

bool OpRules::adapter_bookkeeping(OpKind k) {
  return k == OpKind::LoadAdapter || k == OpKind::AddAdapter || k == OpKind::SetAdapter || k == OpKind::DeleteAdapter;
}

bool OpRules::allowed_before_prepare(const Op& op) { return op.rank < 0 && adapter_bookkeeping(op.kind); }

bool OpRules::names_declared(const Scenario& s, const Op& op) {
  // a form word or generate's step count, checked by the parser
  if (op.kind == OpKind::SaveModel || op.kind == OpKind::LoadModel || op.kind == OpKind::Generate) return true;
  const bool module_arg = op.kind == OpKind::DeltaWeight || op.kind == OpKind::Reshard || op.kind == OpKind::Unshard;
  for (const auto& n : op.names) {
    const bool root = n == "root" && op.kind != OpKind::DeltaWeight;
    if (module_arg ? !root && s.layer_index(n) < 0 : s.adapter_index(n) < 0) return false;
  }
  return true;
}

bool OpRules::file_may_hold(const Scenario& s, const Op& op) {
  if (!names_declared(s, op) || op.rank >= s.world) return false;
  return !injects(op.kind) || (!op.names.empty() && may_name(s, op.kind, s.adapter_index(op.names[0])));
}

// set_adapter (PEFT's reshard fix), optimizer checkpoints (torch's), training, eval and
// explicit resharding: what the `patched` profile fixes or never breaks.
bool OpRules::has_known_fix(OpKind k) {
  switch (k) {
    case OpKind::Forward: case OpKind::Eval: case OpKind::Generate: case OpKind::Backward: case OpKind::Step:
    case OpKind::TrainStep: case OpKind::ZeroGrad: case OpKind::SetAdapter: case OpKind::Reshard: case OpKind::StateDict:
    case OpKind::SaveOptimizer: case OpKind::LoadOptimizer: case OpKind::Prepare:
      return true;
    default:
      return false;
  }
}

// What the model's merge_and_unload covers (model/machine/peft_model.cpp::merge_and_unload): LoRA
// on plain Linear layers FSDP manages from the start, none of them its own FSDP unit, and after it
// the ops that reach no adapter. Anything else is refused at the first line leaving that ground.
std::string OpRules::unload_unmodelled(const Scenario& s, const std::vector<Op>& ops, SourcePos* at) {
  auto first = std::find_if(ops.begin(), ops.end(), [](const Op& op) { return op.kind == OpKind::MergeAndUnload; });
  if (first == ops.end()) return "";
  auto refuse = [&](const SourcePos& pos, const std::string& what) {
    *at = pos;
    return "the model does not implement merge_and_unload " + what + "; run this file with --backend upstream";
  };
  if (s.model) return refuse(s.model->pos, "on a `model` scenario (only on `layer` stacks)");
  for (const auto& a : s.adapters) {
    if (a.deferred || a.use_dora || !a.modules_to_save.empty())
      return refuse(a.pos, "with adapter '" + a.name + "' (" +
                               (a.deferred ? "deferred" : a.use_dora ? "use_dora" : "modules_to_save") + ")");
    for (const auto& d : s.shards)
      for (const auto& m : d.modules)
        if (std::find(a.targets.begin(), a.targets.end(), m) != a.targets.end())
          return refuse(d.pos, "where a LoRA layer is its own FSDP unit ('" + m +
                                   "': its replacement takes FSDP's hooks out of the tree)");
  }
  for (const auto& l : s.layers)
    if (l.experts > 0 || l.quant) return refuse(l.pos, "on layer '" + l.name + "' (" + (l.quant ? "4-bit" : "experts") + ")");
  if (!s.checkpoint.empty()) return refuse(first->pos, "under activation checkpointing");
  // the unload's merges show in no merged flag, so the upstream judge cannot bound their bf16
  // rounding (crosscheck --draw all2 seed 94: model extra_delta, upstream corrupt)
  if (s.dtype != DType::F32) return refuse(first->pos, "on bf16 weights");
  if (s.shards.empty()) return refuse(first->pos, "without fully_shard (adapters held whole)");
  // (a `prepare` after it is refused below: the adapters were held whole at the unload)
  for (auto it = first + 1; it != ops.end(); ++it)
    if (!runs_after_unload(it->kind)) return refuse(it->pos, "followed by `" + op_text(*it) + "`");
  return "";
}

// torch _fully_shard/_fsdp_state.py::FSDPState._lazy_init runs from the pre-forward of the first
// state called; under generate that is a child unit's (op_generate in model/machine/rank_model.cpp),
// which then takes itself for a root (measured: gpt2 with a grouped [wte, wpe] unit raises "FSDP
// requires a single root module"), a path the model does not follow.
std::string OpRules::generate_unmodelled(const Scenario& s, const std::vector<Op>& ops, SourcePos* at) {
  if (!s.model) return "";
  for (const Op& op : ops) {
    if (op.kind == OpKind::Forward || op.kind == OpKind::Eval || op.kind == OpKind::TrainStep) return "";
    if (op.kind != OpKind::Generate) continue;
    *at = op.pos;
    return "the model does not implement `generate` on a `model` scenario before its first forward, eval or "
           "train_step (FSDP's lazy init would run from a child unit); run this file with --backend upstream";
  }
  return "";
}

bool OpRules::runs_after_unload(OpKind k) {
  static constexpr OpKind kRun[] = {OpKind::Forward,  OpKind::Eval,      OpKind::Generate,     OpKind::Backward,   OpKind::Step,
                                    OpKind::TrainStep, OpKind::ZeroGrad, OpKind::Reshard,      OpKind::Unshard,    OpKind::StateDict,
                                    OpKind::GradientSync, OpKind::SaveModel, OpKind::MergeAndUnload};
  return std::find(std::begin(kRun), std::end(kRun), k) != std::end(kRun);
}

bool OpRules::rank_safe(OpKind k) {
  return k == OpKind::SetAdapter || k == OpKind::Merge || k == OpKind::Unmerge || k == OpKind::TrainStep ||
         k == OpKind::Reshard || k == OpKind::Eval || k == OpKind::SaveOptimizer;
}

std::vector<std::string> OpRules::shard_modules(const Scenario& s) {
  std::vector<std::string> m = {"root"};
  for (const auto& d : s.shards)
    if (!d.is_root()) m.insert(m.end(), d.modules.begin(), d.modules.end());  // each member of a group
  return m;
}

OpRules::OpRules(const Scenario& s) {
  for (size_t a = 0; a < s.adapters.size(); ++a) (s.adapters[a].deferred ? deferred_ : present_).insert(static_cast<int>(a));
  Op unload;
  unload.kind = OpKind::MergeAndUnload;
  SourcePos at;
  unloadable_ = unload_unmodelled(s, {unload}, &at).empty();
  model_ = s.model.has_value();
}

std::vector<int> OpRules::addable() const {
  std::vector<int> v;
  for (int a : deferred_.without(present_)) v.push_back(a);
  return v;
}

bool OpRules::possible(OpKind k) const {
  if (unloaded_ && !runs_after_unload(k)) return false;  // what the model covers after merge_and_unload
  switch (k) {
    case OpKind::MergeAndUnload: return unloadable_;
    case OpKind::Generate: return !model_ || forwarded_;
    case OpKind::Backward: return graph_;
    case OpKind::DisableEnter: return !disabled_;
    case OpKind::DisableExit: return disabled_;
    case OpKind::AddAdapter: case OpKind::LoadAdapter: return !deferred_.without(present_).empty();
    case OpKind::DeleteAdapter: return present_.count() > 1;
    case OpKind::LoadOptimizer: return saved_optimizer_;
    case OpKind::LoadAdapters: return saved_adapters_;
    default: return true;
  }
}

bool OpRules::names_legal(const Scenario& s, const Op& op) const {
  auto is_present = [&](const std::string& n) {
    const int a = s.adapter_index(n);
    return a >= 0 && present_.contains(a);
  };
  switch (op.kind) {
    case OpKind::SetAdapter:
      return !op.names.empty() && std::all_of(op.names.begin(), op.names.end(), is_present);
    case OpKind::Merge:
    case OpKind::DeleteAdapter:
      return std::all_of(op.names.begin(), op.names.end(), is_present);
    case OpKind::AddAdapter:
    case OpKind::LoadAdapter: {
      const int a = op.names.size() == 1 ? s.adapter_index(op.names[0]) : -1;
      return a >= 0 && deferred_.without(present_).contains(a);
    }
    case OpKind::Reshard:
    case OpKind::Unshard: {
      const std::vector<std::string> mods = shard_modules(s);
      return std::all_of(op.names.begin(), op.names.end(),
                         [&](const std::string& n) { return std::find(mods.begin(), mods.end(), n) != mods.end(); });
    }
    default:
      return names_declared(s, op);
  }
}

bool OpRules::rank_legal(const Scenario& s, const Op& op, bool ranked) {
  return op.rank < 0 || (ranked && rank_safe(op.kind) && op.rank < s.world);
}

void OpRules::apply(const Scenario& s, const Op& op) {
  switch (op.kind) {
    case OpKind::Forward: graph_ = forwarded_ = true; break;
    case OpKind::Eval: case OpKind::TrainStep: graph_ = false, forwarded_ = true; break;
    case OpKind::Generate: case OpKind::Backward: graph_ = false; break;
    case OpKind::DisableEnter: disabled_ = true; break;
    case OpKind::DisableExit: disabled_ = false; break;
    case OpKind::AddAdapter: case OpKind::LoadAdapter: present_.insert(s.adapter_index(op.names[0])); break;
    case OpKind::DeleteAdapter: present_.erase(s.adapter_index(op.names[0])); break;
    case OpKind::SaveOptimizer: saved_optimizer_ = true; break;
    case OpKind::NewOptimizer: saved_optimizer_ = false; break;  // the checkpoint was the old optimizer's
    case OpKind::SaveAdapters: saved_adapters_ = true; break;
    case OpKind::MergeAndUnload: unloaded_ = true; break;
    default: break;
  }
}

}  // namespace fsdpsim
