// What a parsed `.seq` file may contain beyond its grammar: the ops allowed
// before an explicit `prepare`, the adapters in the model when it runs (and in
// which order), and the semantic checks shared by the parser and by callers
// that build files in code.
#include <algorithm>
#include <string>

#include "model/vocab/limits.hpp"
#include "model/vocab/name_rules.hpp"
#include "model/vocab/op_rules.hpp"
#include "model/vocab/profile.hpp"
#include "model/vocab/seq.hpp"
#include "model/vocab/source_error.hpp"

namespace fsdpsim {

int prepare_index(const SeqFile& f) {
  for (size_t i = 0; i < f.ops.size(); ++i)
    if (f.ops[i].kind == OpKind::Prepare) return static_cast<int>(i);
  return -1;
}

namespace {

// The adapters in the model when prepare runs, in injection order: the declared
// ones in file order, then each one a pre-prepare op loads or adds (loading a
// name already there keeps its place: PEFT refuses it); a delete removes it.
// `ever`: also every adapter present at some point before prepare (deleted since).
std::vector<int> present_at_prepare(const SeqFile& f, uint8_t* ever = nullptr) {
  const auto& ad = f.scenario.adapters;
  std::vector<std::string> tp;  // target_parameters_text per adapter, once a load or add needs it
  std::vector<int> order;
  for (size_t a = 0; a < ad.size(); ++a)
    if (!ad[a].deferred) order.push_back(static_cast<int>(a));
  if (ever)
    for (int a : order) *ever |= static_cast<uint8_t>(1u << a);
  const int end = prepare_index(f);
  for (int i = 0; i < end; ++i) {
    const Op& op = f.ops[i];
    if (op.names.empty()) continue;
    const int a = f.scenario.adapter_index(op.names[0]);
    if (a < 0) continue;
    auto at = std::find(order.begin(), order.end(), a);
    uint32_t mask = 0;
    for (int b : order) mask |= 1u << b;
    const bool adds = OpRules::injects(op.kind) && at == order.end();
    if (adds && tp.empty())
      for (size_t b = 0; b < ad.size(); ++b) tp.push_back(target_parameters_text(f.scenario, static_cast<int>(b)));
    // A load PEFT refuses (differing target_parameters) adds nothing.
    if (adds && target_parameters_conflict(tp, ad, a, mask).empty()) {
      order.push_back(a);
      if (ever) *ever |= static_cast<uint8_t>(1u << a);
    }
    if (op.kind == OpKind::DeleteAdapter && at != order.end()) order.erase(at);
  }
  return order;
}

// Those never present go last.
void append_never_present(const SeqFile& f, std::vector<int>& order) {
  for (int a = 0; a < static_cast<int>(f.scenario.adapters.size()); ++a)
    if (std::find(order.begin(), order.end(), a) == order.end()) order.push_back(a);
}

}  // namespace

uint8_t wrapped_at_prepare(const SeqFile& f) { return adapters_at_prepare(f).wrapped; }

AdaptersAtPrepare adapters_at_prepare(const SeqFile& f) {
  AdaptersAtPrepare out;
  out.order = present_at_prepare(f, &out.injected);  // every adapter ever present includes those present at the end
  for (int a : out.order) out.wrapped |= static_cast<uint8_t>(1u << a);
  append_never_present(f, out.order);
  return out;
}

std::string target_parameters_text(const Scenario& s, int adapter) {
  std::vector<std::string> names;
  for (const auto& t : s.adapters[adapter].targets) {
    const int l = s.layer_index(t);
    if (l >= 0 && s.layers[l].experts > 0) names.push_back(t + ".weight");
  }
  if (names.empty()) return "";
  std::sort(names.begin(), names.end());
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", '" : "'") + names[i] + "'";
  return out + "]";
}

std::string target_parameters_conflict(const std::vector<std::string>& tp, const std::vector<AdapterDecl>& adapters,
                                       int adapter, uint32_t present) {
  const std::string& mine = tp[adapter];
  if (mine.empty()) return "";
  for (size_t a = 0; a < adapters.size(); ++a) {
    if (static_cast<int>(a) == adapter || !((present >> a) & 1)) continue;
    const std::string& other = tp[a];
    if (!other.empty() && other != mine)
      return "When using multiple adapters with `target_parameters`, all adapters must target the same set of "
             "parameters, but got " + mine + " for the new adapter and " + other + " for adapter '" +
             adapters[a].name + "'.";
  }
  return "";
}

uint8_t injected_before_prepare(const SeqFile& f) { return adapters_at_prepare(f).injected; }

std::vector<int> adapter_order_at_prepare(const SeqFile& f) { return adapters_at_prepare(f).order; }

void validate(const SeqFile& f, const std::string& file) {
  const Scenario& s = f.scenario;
  auto fail = [&](SourcePos p, const std::string& what) { throw SourceError(file, p, what); };
  // Errors about the scenario as a whole point at its `---` line (the end of
  // what was declared), never at 1:1.
  const SourcePos end = f.separator.line > 0 ? f.separator : SourcePos{1, 1};
  if (s.layers.empty() && !s.model) fail(end, "expected at least one `layer` in the scenario (or a `model` line)");
  if (s.adapters.empty()) fail(end, "expected at least one `adapter` in the scenario");
  if (s.adapters.size() > static_cast<size_t>(kMaxAdapters))
    fail(s.adapters[kMaxAdapters].pos, "at most " + std::to_string(kMaxAdapters) + " adapters are supported");
  if (s.layers.size() > static_cast<size_t>(kMaxLayers) && !s.model)  // a model's: model_lowering.cpp
    fail(s.layers[kMaxLayers].pos, "at most " + std::to_string(kMaxLayers) + " layers are supported");
  // The names the libraries refuse or mis-handle (name_rules.cpp), for files built in code
  // too: the parser refuses them at the name's own column, so none reaches the model.
  for (const auto& l : s.layers) {
    if (s.model) break;  // dotted module paths of the tree (model/vocab/module_tree.hpp)
    std::string why = !is_name(l.name) || l.name == "root" || l.name == "expect" ? "'" + l.name + "' is not a layer name"
                                                                                : layer_name_refusal(l.name);
    if (why.empty() && s.adapter_index(l.name) >= 0) why = shared_name_refusal(l.name, true);
    if (!why.empty()) fail(l.pos, why);
  }
  for (const auto& a : s.adapters) {
    std::string why = !is_name(a.name) || a.name == "base" || a.name == "total" || a.name == "expect"
                          ? "'" + a.name + "' is not an adapter name"
                          : adapter_name_refusal(a.name);
    if (!why.empty()) fail(a.pos, why);
  }
  if (s.adapters[0].deferred) fail(s.adapters[0].pos, "the first adapter is the active one and cannot be deferred");
  if (s.plan == ShardPlan::None && (s.shards.empty() || !s.shards.back().is_root()))
    fail(s.shards.empty() ? end : s.shards.back().pos,
         s.model ? "expected `fully_shard root` as the last fully_shard, or a `fully_shard_plan` line"
                 : "expected `fully_shard root` as the last fully_shard");
  size_t params = 0;  // collectives name their parameters in a kMaxParams-bit set
  for (const auto& l : s.layers) {
    params += l.experts > 0 ? 1 : 2;
    for (const auto& a : s.adapters)
      params += (std::count(a.targets.begin(), a.targets.end(), l.name) + (a.saves(l.name) ? 1 : 0)) * 2;
  }
  if (!f.ops.empty() && static_cast<long long>(f.ops.size()) * s.world > kMaxOpRanks) {
    const size_t over = static_cast<size_t>(kMaxOpRanks / s.world);  // the first op past the limit
    fail(f.ops[over].pos, "at most " + std::to_string(kMaxOpRanks) + " ops times ranks are supported (" + std::to_string(over) +
                              " ops at world " + std::to_string(s.world) + "); this file has " + std::to_string(f.ops.size()) + " ops");
  }
  if (params > static_cast<size_t>(kMaxParams))
    fail(s.layers.back().pos, "at most " + std::to_string(kMaxParams) + " parameters are supported, this scenario has " + std::to_string(params));
  for (size_t i = 1; i < s.layers.size() && !s.model; ++i)  // a model's modules are a graph, not a chain
    if (s.layers[i].in != s.layers[i - 1].out)
      fail(s.layers[i].pos, "layer '" + s.layers[i].name + "' takes " + std::to_string(s.layers[i].in) +
                                " inputs but '" + s.layers[i - 1].name + "' gives " +
                                std::to_string(s.layers[i - 1].out) + " (layers run in order)");
  // get_peft_model and add_adapter build the declared adapters: PEFT refuses one whose
  // target_parameters differ from an earlier one's (lora/model.py::_check_new_adapter_config).
  uint32_t declared = 0;
  std::vector<std::string> tp;
  for (size_t a = 0; a < s.adapters.size(); ++a) tp.push_back(target_parameters_text(s, static_cast<int>(a)));
  for (size_t a = 0; a < s.adapters.size(); ++a) {
    if (s.adapters[a].deferred) continue;
    const std::string why = target_parameters_conflict(tp, s.adapters, static_cast<int>(a), declared);
    if (!why.empty())
      fail(s.adapters[a].pos, "PEFT cannot build this scenario: " + why +
                                  " (make the adapters target the same experts layers, or declare this one deferred)");
    declared |= 1u << a;
  }
  // use_dora on an experts target: PEFT refuses it (lora/layer.py::ParamWrapper.__init__ raises
  // ValueError), which the model does not run; bad input rather than a modelled raise.
  for (const auto& a : s.adapters) {
    // variants.py::DoraLinearVariant.init on a target already under fully_shard: the weight norm adds
    // a plain delta to the DTensor weight and raises mid-injection; that partial injection is not modelled.
    if (a.use_dora && a.deferred)
      fail(a.pos, "adapter '" + a.name + "' has use_dora and is deferred: a DoRA adapter added after fully_shard "
                  "(its weight norm meets the sharded weight) is not modelled; declare it without deferred");
    const std::string shared = a.use_dora ? s.dora_meets_meta_base(a) : "";
    if (!shared.empty())
      fail(a.pos, "adapter '" + a.name + "' has use_dora beside an earlier adapter on layer '" + shared +
                      "' under loading ram_efficient at world " + std::to_string(s.world) +
                      ": ranks > 0 raise in get_peft_model (`Cannot copy out of meta tensor`: its weight norm copies the meta base weight), which is not modelled");
    if (a.use_dora && !s.model)  // a model scenario's targets are PEFT target_modules, not layers
      for (const auto& t : a.targets)
        if (s.layers[s.layer_index(t)].experts > 0)
          fail(a.pos, "adapter '" + a.name + "' has use_dora and targets experts layer '" + t +
                          "': PEFT's ParamWrapper does not support DoRA (it raises at injection), which is not modelled");
  }
  // modules_to_save: what the model covers of PEFT's ModulesToSaveWrapper.
  for (const auto& a : s.adapters) {
    if (s.model) break;  // the parser refuses modules_to_save on a model scenario
    for (const auto& m : a.modules_to_save) {
      const std::string why = "adapter '" + a.name + "' lists '" + m + "' in modules_to_save, ";
      if (s.layers[s.layer_index(m)].experts > 0)
        fail(a.pos, why + "an experts layer: a copy of a ParamWrapper target is not modelled");
      for (const auto& b : s.adapters)
        if (std::find(b.targets.begin(), b.targets.end(), m) != b.targets.end())
          fail(a.pos, why + "which adapter '" + b.name + "' targets: PEFT wraps a module as a LoRA layer or as a "
                          "ModulesToSaveWrapper, not both (peft/utils/other.py::AuxiliaryTrainingWrapper.check_module)");
      if (a.deferred)
        fail(a.pos, why + "but it is deferred: a copy made after fully_shard is not modelled (declare it without deferred)");
      if (s.checkpointed(m)) fail(a.pos, why + "which is also on the `checkpoint` line: the two together are not modelled");
      // other.py::_set_trainable wraps every module whose name ends with a listed one.
      for (const auto& l : s.layers)
        if (l.name != m && l.name.size() > m.size() && l.name.compare(l.name.size() - m.size(), m.size(), m) == 0)
          fail(a.pos, why + "and PEFT would wrap layer '" + l.name + "' too (it matches names by suffix): rename one");
    }
  }
  for (const auto& op : f.ops) {
    if (!OpRules::injects(op.kind)) continue;
    const int a = op.names.empty() ? -1 : s.adapter_index(op.names[0]);
    if (a >= 0 && !s.adapters[a].modules_to_save.empty())
      fail(op.pos, std::string("`") + op_name(op.kind) + " " + op.names[0] +
                       "`: an adapter with modules_to_save is injected once, at get_peft_model; adding its copies "
                       "again is not modelled");
  }
  std::string profile_error;
  int bad_override = -1;
  if (!resolve_profile(s, &profile_error, &bad_override))
    fail(bad_override >= 0 ? s.overrides[bad_override].pos : end, profile_error);
  // Ops before an explicit `prepare` run on the plain (not yet sharded) PEFT
  // model: only adapter bookkeeping happens there.
  int prepare_at = -1;
  for (size_t i = 0; i < f.ops.size(); ++i) {
    const Op& op = f.ops[i];
    if (op.kind != OpKind::Prepare) continue;
    if (prepare_at >= 0) fail(op.pos, "`prepare` appears twice (first at line " + std::to_string(f.ops[prepare_at].pos.line) + ")");
    if (op.rank >= 0) fail(op.pos, "`prepare` runs on every rank; drop the @R");
    prepare_at = static_cast<int>(i);
  }
  for (int i = 0; i < prepare_at; ++i) {
    const Op& op = f.ops[i];
    if (!OpRules::adapter_bookkeeping(op.kind))
      fail(op.pos, std::string("`") + op_name(op.kind) +
                       "` before `prepare`: only load_adapter, add_adapter, set_adapter and delete_adapter may precede it");
    if (op.rank >= 0) fail(op.pos, "ops before `prepare` run on every rank; drop the @R");
  }
  if (s.loading == Loading::RamEfficient && prepare_at < 0)
    fail(s.loading_pos.line > 0 ? s.loading_pos : end, "`loading ram_efficient` needs a `prepare` op: its broadcasts happen there");
  for (const auto& op : f.ops) {
    if (op.rank >= s.world)
      fail(op.pos, "rank @" + std::to_string(op.rank) + " out of range (world " + std::to_string(s.world) + ")");
    for (const auto& e : op.expects)
      if (e.rank >= s.world)
        fail(e.pos, "rank @" + std::to_string(e.rank) + " out of range (world " + std::to_string(s.world) + ")");
  }
}

}  // namespace fsdpsim
