// `--draw all`: the whole-vocabulary generator. A sequence of its own stream (older seeds keep
// the sequences generator.cpp gives them) whose scenario switches a random subset of the
// scenario features on and whose ops come from a random subset of the op kinds, each with its
// forms (`@R`, lists, selections, module arguments) at per-sequence odds: swarm testing, so
// that features meet in every combination and rare ones are not crowded out.
#include <algorithm>
#include <stdexcept>

#include "model/vocab/op_rules.hpp"
#include "model/vocab/placement.hpp"
#include "model/vocab/profile.hpp"
#include "model/vocab/source_error.hpp"
#include "sim/core/generator.hpp"

namespace fsdpsim {

namespace {

// One sequence's swarm: each knob drawn on with chance 1/2, or on when the caller forces the
// feature it switches (coverage's search for a pair it never saw). Drawn in a fixed order, so
// a seed means one sequence.
class Swarm {
 public:
  Swarm(Prng& rng, const std::vector<std::string>& force) : rng_(rng), force_(force) {}
  bool on(const std::string& feature) {
    const bool drawn = rng_.chance(50);
    return drawn || forced(feature);
  }
  bool forced(const std::string& feature) const {
    return std::find(force_.begin(), force_.end(), feature) != force_.end();
  }
  // Some forced feature starts with `prefix` (every key=value of one directive at once).
  bool forced_prefix(const std::string& prefix) const {
    return std::any_of(force_.begin(), force_.end(), [&](const std::string& f) { return f.rfind(prefix, 0) == 0; });
  }
  // A two-valued directive: on_feature's value when drawn on, unless the caller forces the other.
  bool either(const std::string& on_feature, const std::string& off_feature) {
    const bool drawn = on(on_feature);
    return forced(off_feature) ? false : drawn;
  }
  // Per-sequence odds of an op form: 0 when its knob is off, else 10..60 %.
  uint32_t odds(const std::string& feature) { return on(feature) ? 10 + rng_.below(51) : 0; }

 private:
  Prng& rng_;
  const std::vector<std::string>& force_;
};

// A forced 4-bit feature (coverage's witnesses) is held by the first layer that can take it.
void force_qlora(const Swarm& sw, Scenario& s) {
  for (Quant q : {Quant::NF4, Quant::FP4}) {
    if (!sw.forced(std::string("layer quant=") + quant_name(q)) ||
        std::any_of(s.layers.begin(), s.layers.end(), [&](const LayerDecl& l) { return l.quant == q; }))
      continue;
    for (auto& l : s.layers)
      if (!l.quant && qlora_eligible(s, l)) {
        l.quant = q;
        break;
      }
  }
  for (DType t : {DType::F32, DType::BF16}) {
    if (!sw.forced(std::string("layer compute_dtype=") + dtype_name(t)) ||
        std::any_of(s.layers.begin(), s.layers.end(), [&](const LayerDecl& l) { return l.compute_dtype == t; }))
      continue;
    for (auto& l : s.layers)
      if ((l.quant || qlora_eligible(s, l)) && !l.compute_dtype) {
        if (!l.quant) l.quant = Quant::NF4;
        l.compute_dtype = t;
        break;
      }
  }
}


std::string pick(Prng& rng, const std::vector<std::string>& v) { return v[rng.below(static_cast<uint32_t>(v.size()))]; }

void draw_overrides(Prng& rng, Swarm& sw, Scenario& s) {
  if (!sw.on("set")) return;
  for (int k = 0; k < kDrawnSwitches; ++k) {
    const SwitchInfo& info = switch_table()[k];
    const std::string feature = std::string("set ") + info.name;
    if (!rng.chance(25) && !sw.forced(feature)) continue;
    const std::string value = info.values[rng.below(static_cast<uint32_t>(info.values.size()))];
    s.overrides.push_back({info.name, value, {}});
  }
}

// `all,mixed_precision=P`: a policy line added to P % of the sequences `--draw all` gives, drawn on
// a stream forked from the sequence's (so the rest of each sequence stays what `all` drew). A
// forced policy feature is drawn whatever P.
void draw_policy(const Prng& main, Swarm& sw, const GenOptions& opt, Scenario& s) {
  Prng rng = main.fork(0x6d70);
  const bool forced = sw.forced("fully_shard POLICY_KEY=V") || sw.forced_prefix("mixed_precision ");
  const bool drawn = opt.mixed_precision_percent > 0 && rng.chance(static_cast<uint32_t>(opt.mixed_precision_percent));
  if (!drawn && !forced) return;
  draw_mixed_precision(rng, s);
  for (DType t : {DType::F32, DType::BF16}) {
    const std::string v = dtype_name(t);
    if (sw.forced("mixed_precision param_dtype=" + v)) s.mp.param_dtype = t;
    if (sw.forced("mixed_precision reduce_dtype=" + v)) s.mp.reduce_dtype = t;
    if (sw.forced("mixed_precision output_dtype=" + v)) s.mp.output_dtype = t;
  }
  for (bool v : {true, false})
    if (sw.forced(std::string("mixed_precision cast_forward_inputs=") + (v ? "true" : "false"))) s.mp.cast_forward_inputs = v;
  if (sw.forced("fully_shard POLICY_KEY=V") && std::all_of(s.shards.begin(), s.shards.end(), [](const ShardDecl& d) { return d.mp.empty(); }))
    s.shards[rng.below(static_cast<uint32_t>(s.shards.size()))].mp.reduce_dtype = DType::F32;
}

Scenario draw_scenario(Prng& rng, Swarm& sw, const GenOptions& opt) {
  Scenario s;
  s.world = opt.world;
  s.seed = rng.next() % 1000000;
  s.profile = pick(rng, profile_names());
  draw_overrides(rng, sw, s);
  const bool experts = sw.on("layer experts=E"), deferred = sw.on("adapter deferred"),
             inference = sw.on("adapter inference_mode"), zero = sw.on("adapter init=zero"),
             autocast = sw.on("adapter autocast=true") || sw.forced("adapter autocast=false");
  static const char* layer_names[] = {"lin0", "lin1", "lin2"};
  static const int sizes[] = {4, 6, 10, 20};
  const int n_layers = 1 + static_cast<int>(rng.below(3));
  int in = sizes[rng.below(4)];
  for (int l = 0; l < n_layers; ++l) {
    const int out = l + 1 == n_layers ? 2 : sizes[rng.below(4)];
    s.layers.push_back({layer_names[l], in, out, experts && rng.chance(40) ? 1 + static_cast<int>(rng.below(3)) : 0, {}});
    in = out;
  }
  if (experts && sw.forced("layer experts=E") && std::none_of(s.layers.begin(), s.layers.end(), [](const LayerDecl& l) { return l.experts; }))
    s.layers[rng.below(static_cast<uint32_t>(n_layers))].experts = 2;
  static const char* adapter_names[] = {"default", "other", "third"};
  // Deferred or inference-mode adapters are never the first: draw a second one for them.
  const int n_adapters = std::max(1 + static_cast<int>(rng.below(3)), deferred || inference ? 2 : 1);
  static const Raf rafs[] = {Raf::True, Raf::False, Raf::None};
  for (int a = 0; a < n_adapters; ++a) {
    AdapterDecl d = draw_adapter_shape(rng, s, adapter_names[a]);
    d.init = zero && rng.chance(50) ? LoraInit::Zero : LoraInit::Random;
    d.inference_mode = a > 0 && inference && rng.chance(50);
    d.deferred = a > 0 && deferred && rng.chance(60);
    if (autocast && rng.chance(60)) d.autocast = rng.chance(50);
    s.adapters.push_back(d);
  }
  for (bool value : {true, false})  // a forced per-adapter value is held by the first adapter at least
    if (sw.forced(std::string("adapter autocast=") + (value ? "true" : "false")) &&
        std::none_of(s.adapters.begin(), s.adapters.end(), [&](const AdapterDecl& d) { return d.autocast == value; }))
      std::find_if(s.adapters.begin(), s.adapters.end() - 1, [](const AdapterDecl& d) { return !d.autocast; })->autocast = value;
  if (sw.forced("adapter init=zero")) s.adapters[0].init = LoraInit::Zero;
  // Only where forced (no draw: `--draw all` keeps every seed's sequence); the first adapter without
  // an experts target, as ParamWrapper refuses use_dora (lora/layer.py::ParamWrapper.__init__).
  if (sw.forced("adapter use_dora"))
    for (auto& d : s.adapters)
      if (!d.deferred && std::none_of(d.targets.begin(), d.targets.end(), [&](const std::string& t) { return s.layers[s.layer_index(t)].experts > 0; })) {
        d.use_dora = true;
        break;
      }
  for (const auto& l : s.layers)
    if (rng.chance(60)) s.shards.push_back({{l.name}, rafs[rng.below(3)], {}});
  s.shards.push_back({{"root"}, rafs[rng.below(3)], {}});
  share_experts_targets(s);
  s.optimizer = sw.either("optimizer all", "optimizer trainable") ? OptimizerParams::AllLora : OptimizerParams::Trainable;
  if (sw.either("loading ram_efficient", "loading full")) s.loading = Loading::RamEfficient;
  if (sw.either("dtype bf16", "dtype fp32")) s.dtype = DType::BF16;
  if (sw.either("dtype autocast_adapter_dtype=false", "dtype autocast_adapter_dtype=true")) s.autocast_adapter_dtype = false;
  if (sw.either("data per_rank", "data same")) s.data = Data::PerRank;
  if (sw.on("fully_shard a,b") && s.layers.size() >= 2) {
    const uint32_t n = static_cast<uint32_t>(s.layers.size());
    const uint32_t a = rng.below(n);
    uint32_t b = rng.below(n - 1);
    if (b >= a) ++b;
    group_layers(s, static_cast<int>(a), static_cast<int>(b), rafs[rng.below(3)], rng.chance(33));
  }
  if (sw.on("checkpoint L")) {
    // accelerate's fsdp2_apply_ac wraps the layers its policy picks; only Linear ones are modelled.
    std::vector<std::string> linear;
    for (const auto& l : s.layers)
      if (l.experts == 0) linear.push_back(l.name);
    for (const auto& l : linear)
      if (rng.chance(50)) s.checkpoint.push_back(l);
    if (s.checkpoint.empty() && !linear.empty()) s.checkpoint.push_back(pick(rng, linear));
  }
  if (sw.on("adapter modules_to_save")) draw_saved_module(rng, s);
  draw_policy(rng, sw, opt, s);
  // `all,dora=P`: DoRA adapters in P % of the sequences, on a stream of their own as the policy.
  if (Prng side = rng.fork(0x646f7261); opt.dora_percent > 0 && side.chance(static_cast<uint32_t>(opt.dora_percent))) draw_dora(side, s);
  // `all,qlora=P`: 4-bit bases in P % of the sequences, on a stream of their own.
  if (Prng side = rng.fork(0x716c6f72); opt.qlora_percent > 0 && side.chance(static_cast<uint32_t>(opt.qlora_percent))) draw_qlora(side, s);
  force_qlora(sw, s);
  return s;
}

// A subset of the present adapters (at least one), in a drawn order.
std::vector<std::string> some_present(Prng& rng, const Scenario& s, const OpRules& rules) {
  std::vector<std::string> names;
  for (int a : rules.present())
    if (rng.chance(60)) names.push_back(s.adapters[a].name);
  if (names.empty()) {
    std::vector<int> all;
    for (int a : rules.present()) all.push_back(a);
    names.push_back(s.adapters[all[rng.below(static_cast<uint32_t>(all.size()))]].name);
  }
  for (size_t i = names.size(); i > 1; --i) std::swap(names[i - 1], names[rng.below(static_cast<uint32_t>(i))]);
  return names;
}

// all2: every op kind (all2's own stream); else the first kDrawAllOpKinds, as `--draw all`'s seeds were drawn.
std::vector<Op> draw_ops(Prng& rng, Swarm& sw, const Scenario& s, bool all2) {
  std::vector<OpKind> enabled;
  for (int k = 0; k < (all2 ? kOpKindCount : kDrawAllOpKinds); ++k) {
    const auto kind = static_cast<OpKind>(k);
    if (sw.on(std::string("op ") + op_name(kind))) enabled.push_back(kind);
  }
  const uint32_t ranked = sw.odds("@R op"), listed = sw.odds("set_adapter [a,b]"), merge_named = sw.odds("merge NAME"),
                 merge_list = sw.odds("merge [a,b]"), selection = sw.odds("save_adapters NAMES"),
                 module = sw.odds("reshard MODULE") + sw.odds("unshard MODULE"), trainable = rng.below(101);
  OpRules rules(s);
  AdapterSet present = rules.present();
  std::vector<Op> ops;
  // An explicit prepare (ram-efficient loading needs one), with adapters loaded before it.
  const bool prepare = std::find(enabled.begin(), enabled.end(), OpKind::Prepare) != enabled.end();
  if (prepare || s.loading == Loading::RamEfficient)
    ops = ops_before_prepare(s, [&](uint32_t percent) { return rng.chance(percent); }, &present);
  for (const Op& op : ops) rules.apply(s, op);
  enabled.erase(std::remove(enabled.begin(), enabled.end(), OpKind::Prepare), enabled.end());
  if (enabled.empty()) enabled.push_back(OpKind::TrainStep);
  const int n = static_cast<int>(ops.size()) + 4 + static_cast<int>(rng.below(13));
  const std::vector<std::string> modules = OpRules::shard_modules(s);
  bool sync = true;
  for (int guard = 0; static_cast<int>(ops.size()) < n && guard < 20 * n; ++guard) {
    Op op;
    op.kind = enabled[rng.below(static_cast<uint32_t>(enabled.size()))];
    if (!rules.possible(op.kind)) continue;
    switch (op.kind) {
      case OpKind::SetAdapter:
        op.list_form = rng.chance(listed);
        op.names = some_present(rng, s, rules);
        if (!op.list_form) op.names.resize(1);
        break;
      case OpKind::Merge:
        // The parser reads `merge a` as one name and `merge [a,b]` as a list (list_form: not one name).
        if (rng.chance(merge_list) && rules.present().count() > 1) op.names = some_present(rng, s, rules);
        else if (rng.chance(merge_named)) op.names = {some_present(rng, s, rules)[0]};
        op.list_form = !op.names.empty() && op.names.size() != 1;
        break;
      case OpKind::SaveAdapters:
        if (rng.chance(selection)) op.names = some_present(rng, s, rules);
        op.list_form = !op.names.empty() && op.names.size() != 1;
        break;
      case OpKind::AddAdapter:
      case OpKind::LoadAdapter: {
        const std::vector<int> addable = rules.addable();
        op.names = {s.adapters[addable[rng.below(static_cast<uint32_t>(addable.size()))]].name};
        op.trainable = op.kind == OpKind::LoadAdapter && rng.chance(trainable);
        break;
      }
      case OpKind::DeleteAdapter:
        op.names = {some_present(rng, s, rules)[0]};
        break;
      case OpKind::Reshard:
      case OpKind::Unshard:
        if (rng.chance(module)) op.names = {modules[rng.below(static_cast<uint32_t>(modules.size()))]};
        break;
      case OpKind::DeltaWeight:
        op.names = {s.layers[rng.below(static_cast<uint32_t>(s.layers.size()))].name};
        break;
      case OpKind::GradientSync:
        op.sync = sync = !sync;
        break;
      case OpKind::SaveModel:
      case OpKind::LoadModel:
        op.names = {draw_state_dict_form(rng, op.kind)};
        break;
      case OpKind::Generate:
        op.names = {std::to_string(1 + rng.below(4))};
        break;
      default:
        break;
    }
    if (OpRules::rank_safe(op.kind) && rng.chance(ranked)) op.rank = static_cast<int>(rng.below(static_cast<uint32_t>(s.world)));
    if (!rules.names_legal(s, op)) continue;
    rules.apply(s, op);
    ops.push_back(op);
  }
  return ops;
}

}  // namespace

std::string draw_state_dict_form(Prng& rng, OpKind k) {
  static const char* const forms[] = {"full", "sharded", "plain"};
  if (k == OpKind::SaveModel) return rng.chance(50) ? "full" : "sharded";
  return forms[rng.below(3)];
}

SeqFile generate_seq_all(Prng& rng, const GenOptions& opt, bool gate) {
  // A draw the parser would refuse is drawn again from the same stream (the checks are
  // seq_checks.cpp::validate's, the parser's own).
  for (int attempt = 0; attempt < 64; ++attempt) {
    Swarm sw(rng, opt.force);
    SeqFile f;
    f.scenario = draw_scenario(rng, sw, opt);
    f.ops = draw_ops(rng, sw, f.scenario, opt.all2);
    if (!gate) return f;
    try {
      validate(f, "<generated>");
      return f;
    } catch (const SourceError&) {
    }
  }
  throw std::logic_error("--draw all drew 64 scenarios the parser refuses in a row");
}

}  // namespace fsdpsim
