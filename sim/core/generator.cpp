#include "sim/core/generator.hpp"

#include <array>
#include <algorithm>
#include <cstdlib>
#include <fmt/format.h>

#include "model/machine/topology.hpp"
#include "model/vocab/adapter_set.hpp"
#include "model/vocab/number.hpp"
#include "model/vocab/op_rules.hpp"
#include "model/vocab/text.hpp"

namespace fsdpsim {

namespace {

// How often each op is drawn: training and adapter switching dominate, as in
// the lifecycles the seeds come from.
struct Choice {
  OpKind kind;
  uint32_t weight;
};
constexpr Choice kOpWeights[] = {
    {OpKind::Forward, 7},      {OpKind::Eval, 9},          {OpKind::Backward, 6},      {OpKind::Step, 3},
    {OpKind::TrainStep, 16},   {OpKind::ZeroGrad, 2},      {OpKind::Merge, 8},         {OpKind::Unmerge, 5},
    {OpKind::SetAdapter, 12},  {OpKind::DisableEnter, 3},  {OpKind::DisableExit, 6},   {OpKind::AddAdapter, 2},
    {OpKind::LoadAdapter, 2},  {OpKind::DeleteAdapter, 1}, {OpKind::Reshard, 4},       {OpKind::Unshard, 3},
    {OpKind::StateDict, 2},    {OpKind::SaveOptimizer, 6}, {OpKind::LoadOptimizer, 2}, {OpKind::SaveAdapters, 1},
    {OpKind::LoadAdapters, 1}, {OpKind::DeltaWeight, 2},
};

}  // namespace

constexpr uint32_t weight_sum() {
  uint32_t t = 0;
  for (const auto& c : kOpWeights) t += c.weight;
  return t;
}
static_assert(weight_sum() == kOpWeightTotal, "kOpWeightTotal must be the sum of kOpWeights");

OpKind weighted_op_kind(uint32_t x) {
  x %= kOpWeightTotal;
  for (const auto& c : kOpWeights) {
    if (x < c.weight) return c.kind;
    x -= c.weight;
  }
  return OpKind::TrainStep;
}

void share_experts_targets(Scenario& s) {
  const std::vector<std::string>* ref = nullptr;
  auto is_experts = [&](const std::string& n) { return s.layers[s.layer_index(n)].experts > 0; };
  for (auto& d : s.adapters) {
    if (d.deferred || std::none_of(d.targets.begin(), d.targets.end(), is_experts)) continue;
    if (!ref) {
      ref = &d.targets;
      continue;
    }
    std::vector<std::string> t;
    for (const auto& l : s.layers)
      if (l.experts > 0 ? std::find(ref->begin(), ref->end(), l.name) != ref->end()
                        : std::find(d.targets.begin(), d.targets.end(), l.name) != d.targets.end())
        t.push_back(l.name);
    d.targets = t;
  }
}

// The layers a modules_to_save copy may wrap (seq_checks.cpp::validate refuses the others):
// Linear, not checkpointed, not the only target of an adapter (it leaves every target list).
void draw_saved_module(Prng& rng, Scenario& s) {
  std::vector<int> linear;
  for (size_t l = 0; l < s.layers.size(); ++l)
    if (s.layers[l].experts == 0 && !s.checkpointed(s.layers[l].name)) linear.push_back(static_cast<int>(l));
  if (linear.empty()) return;
  const std::string saved = s.layers[linear[rng.below(static_cast<uint32_t>(linear.size()))]].name;
  std::vector<int> savers;
  for (size_t a = 0; a < s.adapters.size(); ++a)
    if (!s.adapters[a].deferred && rng.chance(75)) savers.push_back(static_cast<int>(a));
  if (savers.empty()) savers.push_back(0);  // adapter 0 is never deferred
  for (auto& a : s.adapters)
    if (a.targets.size() == 1 && a.targets[0] == saved) return;
  for (auto& a : s.adapters) a.targets.erase(std::remove(a.targets.begin(), a.targets.end(), saved), a.targets.end());
  for (int a : savers) s.adapters[a].modules_to_save.push_back(saved);
}

namespace {
// PEFT wraps a module as a LoRA layer or as a ModulesToSaveWrapper, not both: the saved layer
// leaves every target list (an adapter left with none keeps its draw: nothing is saved).
// A bf16 base gives a bf16 copy beside fp32 (autocast) LoRA tensors: FSDP's lazy-init dtype
// check raises (B2), and what later steps do after it is not modelled (docs/design/known-limits.md).
void draw_modules_to_save(Prng& rng, Scenario& s) {
  if (s.dtype == DType::F32) draw_saved_module(rng, s);
}
// A grouped fully_shard([a, b]): two layers, adjacent or not, in either order; with chance 1/3
// the later layer raises (group_layers).
void draw_grouped(Prng& rng, Scenario& s) {
  const uint32_t n = static_cast<uint32_t>(s.layers.size());
  if (n < 2) return;
  const uint32_t a = rng.below(n);
  uint32_t b = rng.below(n - 1);
  if (b >= a) ++b;
  static const Raf rafs[] = {Raf::True, Raf::False, Raf::None};
  const Raf raf = rafs[rng.below(3)];
  group_layers(s, static_cast<int>(a), static_cast<int>(b), raf, rng.chance(33));
}
}  // namespace

// In the order the group packs them (torch _fsdp_init.py::_get_managed_modules), in place of
// their own lines; a raising later layer is a one-expert ParamWrapper, whose forward raises on
// PEFT 0.21.2, so the member completing the group raises (its always_call post-forward still runs).
void group_layers(Scenario& s, int a, int b, Raf raf, bool raising) {
  const ShardDecl group{{s.layers[a].name, s.layers[b].name}, raf, {}};
  std::vector<ShardDecl> kept;
  for (const auto& d : s.shards)
    if (d.is_root() || (d.modules[0] != group.modules[0] && d.modules[0] != group.modules[1])) kept.push_back(d);
  kept.insert(kept.end() - 1, group);  // the root's line stays last
  s.shards = std::move(kept);
  if (raising) {
    s.layers[std::max(a, b)].experts = 1;
    share_experts_targets(s);
  }
}

void DrawsReached::count(const SeqFile& f) {
  const Scenario& s = f.scenario;
  for (const auto& d : s.shards) {
    if (d.modules.size() != 2) continue;
    const int a = s.layer_index(d.modules[0]), b = s.layer_index(d.modules[1]);
    ++grouped;
    ++(std::abs(a - b) == 1 ? adjacent : apart);
    reversed += a > b;
    raising += s.layers[std::max(a, b)].experts == 1;
  }
  padded += s.world >= 3 && has_padding_only_rank(compile_topology(f));
}

// A MixedPrecisionPolicy for every fully_shard (mostly accelerate's bf16 compute), and with chance
// 1/5 one call overriding a key of it (the only policy when the scenario line drew no key).
void draw_mixed_precision(Prng& rng, Scenario& s) {
  auto dtype = [&](uint32_t bf16_percent) { return rng.chance(bf16_percent) ? DType::BF16 : DType::F32; };
  if (rng.chance(85)) s.mp.param_dtype = dtype(85);
  if (rng.chance(80)) s.mp.reduce_dtype = dtype(30);
  if (rng.chance(30)) s.mp.output_dtype = dtype(50);
  if (rng.chance(20)) s.mp.cast_forward_inputs = rng.chance(50);
  if (rng.chance(20)) {
    ShardDecl& d = s.shards[rng.below(static_cast<uint32_t>(s.shards.size()))];
    if (rng.chance(50)) d.mp.reduce_dtype = dtype(50);
    else d.mp.param_dtype = dtype(50);
  }
  if (s.mixed_precision()) return;
  s.mp.param_dtype = DType::BF16;  // a draw of no key at all: accelerate's bf16 compute
}

// DoRA (LoraConfig(use_dora=True)) on each adapter with chance 3/5, at least one; never on an adapter
// with an experts target (lora/layer.py::ParamWrapper.__init__ refuses use_dora), nor on a deferred one
// (a DoRA adapter added after fully_shard is not modelled: seq_checks.cpp), nor beside an earlier
// adapter under ram-efficient loading at world > 1 (Scenario::dora_meets_meta_base).
void draw_dora(Prng& rng, Scenario& s) {
  std::vector<AdapterDecl*> eligible;
  for (auto& a : s.adapters)
    if (!a.deferred && s.dora_meets_meta_base(a).empty() && std::none_of(a.targets.begin(), a.targets.end(), [&](const std::string& t) { return s.layers[s.layer_index(t)].experts > 0; }))
      eligible.push_back(&a);
  if (eligible.empty()) return;
  bool any = false;
  for (AdapterDecl* a : eligible) any |= a->use_dora = rng.chance(60);
  if (!any) eligible[rng.below(static_cast<uint32_t>(eligible.size()))]->use_dora = true;
}

// A 4-bit base (quant=nf4|fp4, compute_dtype left out, bf16 or fp32) on each Linear layer with
// chance 1/2, at least one; never on an experts layer (the parser refuses it), a modules_to_save
// layer, or a layer a DoRA adapter targets (the model refuses DoRA on a 4-bit base).
bool qlora_eligible(const Scenario& s, const LayerDecl& l) {
  const bool dora = std::any_of(s.adapters.begin(), s.adapters.end(), [&](const AdapterDecl& a) {
    return a.use_dora && std::find(a.targets.begin(), a.targets.end(), l.name) != a.targets.end();
  });
  return l.experts == 0 && !dora && !s.saved_module(l.name);
}

void draw_qlora(Prng& rng, Scenario& s) {
  std::vector<LayerDecl*> eligible;
  for (auto& l : s.layers)
    if (qlora_eligible(s, l)) eligible.push_back(&l);
  if (eligible.empty()) return;
  const auto quantize = [&](LayerDecl& l) {
    l.quant = rng.chance(50) ? Quant::NF4 : Quant::FP4;
    const uint32_t c = rng.below(3);
    if (c > 0) l.compute_dtype = c == 1 ? DType::BF16 : DType::F32;
  };
  bool any = false;
  for (LayerDecl* l : eligible)
    if (rng.chance(50)) quantize(*l), any = true;
  if (!any) quantize(*eligible[rng.below(static_cast<uint32_t>(eligible.size()))]);
}

GenOptions swarm_options(Prng& rng, int world, bool wide_worlds) {
  GenOptions g;
  g.world = world;
  g.checkpoint_percent = 15;  // activation checkpointing (hazard B7)
  g.grouped_percent = 15;     // grouped fully_shard, a third of them with a raising member
  // wide_worlds at world 2: a quarter of the sequences at world 3 or 4, where the small layers
  // (the last one's 2 rows, r < world) leave a rank holding only padding rows.
  if (wide_worlds && world == 2 && rng.chance(25)) g.world = 3 + static_cast<int>(rng.below(2));
  return g;
}

AdapterDecl draw_adapter_shape(Prng& rng, const Scenario& s, const char* name) {
  AdapterDecl d;
  d.name = name;
  d.r = 1 + static_cast<int>(rng.below(4));
  d.alpha = d.r * (1 + static_cast<int>(rng.below(2)));
  for (const auto& l : s.layers)
    if (rng.chance(75)) d.targets.push_back(l.name);
  if (d.targets.empty()) d.targets.push_back(s.layers[rng.below(static_cast<uint32_t>(s.layers.size()))].name);
  return d;
}

Scenario generate_scenario(Prng& rng, const GenOptions& opt) {
  Scenario s;
  s.world = opt.world;
  s.seed = rng.next() % 1000000;
  s.profile = rng.chance(50) ? "upstream" : "patched";
  static const char* layer_names[] = {"lin0", "lin1", "lin2"};
  static const int sizes[] = {4, 6, 10, 20};
  int n_layers = 1 + static_cast<int>(rng.below(3));
  int in = sizes[rng.below(4)];
  for (int l = 0; l < n_layers; ++l) {
    int out = l + 1 == n_layers ? 2 : sizes[rng.below(4)];
    s.layers.push_back({layer_names[l], in, out, 0, {}});
    in = out;
  }
  static const char* adapter_names[] = {"default", "other", "third"};
  int n_adapters = 1 + static_cast<int>(rng.below(3));
  for (int a = 0; a < n_adapters; ++a) {
    AdapterDecl d = draw_adapter_shape(rng, s, adapter_names[a]);
    d.init = rng.chance(70) ? LoraInit::Random : LoraInit::Zero;
    d.inference_mode = a > 0 && rng.chance(10);
    d.deferred = a > 0 && rng.chance(15);
    s.adapters.push_back(d);
  }
  static const Raf rafs[] = {Raf::True, Raf::False, Raf::None};
  for (const auto& l : s.layers)
    if (rng.chance(60)) s.shards.push_back({{l.name}, rafs[rng.below(3)], {}});
  s.shards.push_back({{"root"}, rafs[rng.below(3)], {}});
  s.optimizer = rng.chance(80) ? OptimizerParams::Trainable : OptimizerParams::AllLora;
  // Drawn last, so the fields above stay what older seeds gave.
  for (auto& l : s.layers)
    if (rng.chance(10)) l.experts = 1 + static_cast<int>(rng.below(3));
  share_experts_targets(s);
  if (rng.chance(12)) {
    s.loading = Loading::RamEfficient;
    s.dtype = rng.chance(70) ? DType::BF16 : DType::F32;
    s.autocast_adapter_dtype = rng.chance(40);
  }
  if (opt.per_rank_data_percent > 0 && s.world > 1 && rng.chance(opt.per_rank_data_percent)) s.data = Data::PerRank;
  if (opt.grouped_percent > 0 && rng.chance(static_cast<uint32_t>(opt.grouped_percent))) draw_grouped(rng, s);
  if (opt.checkpoint_percent > 0 && rng.chance(static_cast<uint32_t>(opt.checkpoint_percent))) {
    // accelerate's fsdp2_apply_ac wraps the layers its policy picks; only Linear ones are modelled.
    std::vector<std::string> linear;
    for (const auto& l : s.layers)
      if (l.experts == 0) linear.push_back(l.name);
    for (const auto& n : linear)
      if (rng.chance(50)) s.checkpoint.push_back(n);
    if (s.checkpoint.empty() && !linear.empty()) s.checkpoint.push_back(linear[rng.below(static_cast<uint32_t>(linear.size()))]);
  }
  if (opt.modules_to_save_percent > 0 && rng.chance(static_cast<uint32_t>(opt.modules_to_save_percent))) draw_modules_to_save(rng, s);
  if (opt.mixed_precision_percent > 0 && rng.chance(static_cast<uint32_t>(opt.mixed_precision_percent))) draw_mixed_precision(rng, s);
  if (opt.dora_percent > 0 && rng.chance(static_cast<uint32_t>(opt.dora_percent))) draw_dora(rng, s);
  if (opt.qlora_percent > 0 && rng.chance(static_cast<uint32_t>(opt.qlora_percent))) draw_qlora(rng, s);
  return s;
}

std::string apply_draws(const std::string& list, GenOptions* opt) {
  const std::string expected =
      "models (tiny transformers `model` scenarios) or models=P, all (the whole-vocabulary generator), all2 (the same with every op kind), all[2],mixed_precision=P,dora=P,qlora=P, or a comma list of checkpoint=P, gradient_sync=P, "
      "per_rank_data=P, modules_to_save=P, grouped=P, mixed_precision=P, dora=P or qlora=P (P a percentage 0..100)";
  const std::vector<std::string> items = split(list);
  opt->all2 = std::find(items.begin(), items.end(), "all2") != items.end();
  opt->all = opt->all2 || std::find(items.begin(), items.end(), "all") != items.end();
  for (const std::string& item : items) {
    if (item == "all" || item == "all2") continue;
    if (item == "models") {
      opt->models_percent = 100;
      continue;
    }
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return fmt::format("expects {}, got '{}'", expected, item);
    int64_t p = 0;
    const std::string why = read_whole_number(item.substr(eq + 1), 0, 100, &p);
    if (!why.empty()) return fmt::format("{}= expects a percentage, {}", item.substr(0, eq), why);
    const std::string key = item.substr(0, eq);
    // The whole-vocabulary generator draws every scenario feature itself; the opt-in
    // capabilities (a policy line, DoRA, 4-bit bases) join it by their percentage.
    if (opt->all && key != "mixed_precision" && key != "dora" && key != "qlora" && key != "models")
      return fmt::format("{}= does not combine with all (the whole-vocabulary generator draws it itself); expects {}", key, expected);
    if (key == "checkpoint") opt->checkpoint_percent = p;
    else if (key == "gradient_sync") opt->gradient_sync_percent = p;
    else if (key == "per_rank_data") opt->per_rank_data_percent = p;
    else if (key == "modules_to_save") opt->modules_to_save_percent = p;
    else if (key == "grouped") opt->grouped_percent = p;
    else if (key == "mixed_precision") opt->mixed_precision_percent = p;
    else if (key == "dora") opt->dora_percent = p;
    else if (key == "qlora") opt->qlora_percent = p;
    else if (key == "models") opt->models_percent = p;
    else return fmt::format("expects {}, got unknown '{}'", expected, key);
  }
  return "";
}

std::vector<Op> ops_before_prepare(const Scenario& s, const std::function<bool(uint32_t)>& chance, AdapterSet* present) {
  std::vector<Op> ops;
  for (size_t a = 0; a < s.adapters.size(); ++a) {
    if (!s.adapters[a].deferred || !chance(70)) continue;
    Op op;
    op.kind = OpKind::LoadAdapter;
    op.names = {s.adapters[a].name};
    op.trainable = chance(50);
    present->insert(static_cast<int>(a));
    ops.push_back(op);
  }
  if (present->count() > 1 && chance(50)) {
    Op op;
    op.kind = OpKind::SetAdapter;
    op.list_form = true;
    for (size_t a = 0; a < s.adapters.size(); ++a)
      if (present->contains(static_cast<int>(a))) op.names.push_back(s.adapters[a].name);
    ops.push_back(op);
  }
  Op prep;
  prep.kind = OpKind::Prepare;
  ops.push_back(prep);
  return ops;
}

std::vector<Op> generate_ops(Prng& rng, const Scenario& s, const GenOptions& opt) {
  std::vector<Op> ops;
  int n = opt.min_ops + static_cast<int>(rng.below(static_cast<uint32_t>(opt.max_ops - opt.min_ops + 1)));
  OpRules rules(s);
  AdapterSet present = rules.present();
  const std::vector<std::string> modules = OpRules::shard_modules(s);
  auto pick_present = [&]() {
    std::array<int, kMaxAdapters> v;
    uint32_t k = 0;
    for (int a : rules.present()) v[k++] = a;
    return v[rng.below(k)];
  };
  // Adapters loaded before an explicit prepare (always with ram-efficient
  // loading, which needs one): the seed-001 lifecycle.
  if (s.loading == Loading::RamEfficient || rng.chance(10))
    ops = ops_before_prepare(s, [&](uint32_t percent) { return rng.chance(percent); }, &present);
  for (const Op& op : ops) rules.apply(s, op);
  ops.reserve(ops.size() + static_cast<size_t>(n) + 2);  // an op and a gradient_sync toggle before it
  int guard = 0;
  bool sync = true;
  while (static_cast<int>(ops.size()) < n && guard++ < 10 * n) {
    if (opt.gradient_sync_percent > 0 && rng.chance(static_cast<uint32_t>(opt.gradient_sync_percent))) {
      Op toggle;
      toggle.kind = OpKind::GradientSync;
      toggle.sync = sync = !sync;
      ops.push_back(toggle);
      continue;
    }
    OpKind k = weighted_op_kind(rng.below(kOpWeightTotal));
    if (!rules.possible(k)) continue;  // nothing more drawn: every seed keeps its stream
    Op op;
    op.kind = k;
    switch (k) {
      case OpKind::SetAdapter:
        if (rng.chance(15) && rules.present().count() > 1) {
          op.list_form = true;
          for (int a : rules.present())
            if (rng.chance(60)) op.names.push_back(s.adapters[a].name);
          if (op.names.empty()) op.names.push_back(s.adapters[pick_present()].name);
        } else {
          op.names.push_back(s.adapters[pick_present()].name);
        }
        break;
      case OpKind::Merge:
        if (rng.chance(25)) op.names.push_back(s.adapters[pick_present()].name);
        break;
      case OpKind::AddAdapter:
      case OpKind::LoadAdapter: {
        op.names.push_back(s.adapters[rules.addable().back()].name);
        bool trainable = rng.chance(50);  // drawn for both kinds: keeps every seed's stream
        op.trainable = k == OpKind::LoadAdapter && trainable;
        break;
      }
      case OpKind::DeleteAdapter:
        op.names.push_back(s.adapters[pick_present()].name);
        break;
      case OpKind::Reshard:
      case OpKind::Unshard:
        if (rng.chance(50)) op.names.push_back(modules[rng.below(static_cast<uint32_t>(modules.size()))]);
        break;
      case OpKind::DeltaWeight:
        op.names.push_back(s.layers[rng.below(static_cast<uint32_t>(s.layers.size()))].name);
        break;
      default:
        break;
    }
    if (s.world > 1 && OpRules::rank_safe(k) && rng.chance(opt.rank_op_percent))
      op.rank = static_cast<int>(rng.below(static_cast<uint32_t>(s.world)));
    rules.apply(s, op);
    ops.push_back(op);
    // An adapter added after fully_shard is trained through a fresh optimizer over
    // model.parameters() (beyond-seeds B1); only per-rank data makes its replicas drift.
    if (s.data == Data::PerRank && OpRules::injects(k) && rng.chance(70)) {
      Op fresh;
      fresh.kind = OpKind::NewOptimizer;
      rules.apply(s, fresh);
      ops.push_back(fresh);
    }
  }
  return ops;
}

SeqFile generate_seq(Prng& rng, const GenOptions& opt) {
  // models=P: decided on a forked stream, so a sequence not drawn as a model is the one the rest
  // of the list gives (and every seed without `models` keeps its sequence).
  if (Prng side = rng.fork(0x6d6f64656c73); opt.models_percent > 0 && side.chance(static_cast<uint32_t>(opt.models_percent)))
    return generate_seq_models(side, opt);
  if (opt.all) return generate_seq_all(rng, opt);
  SeqFile f;
  f.scenario = generate_scenario(rng, opt);
  f.ops = generate_ops(rng, f.scenario, opt);
  return f;
}

}  // namespace fsdpsim
