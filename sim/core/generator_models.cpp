// `--draw models` / `models=P`: tiny `model` scenarios (a transformers causal LM instead of
// `layer` lines: docs/guide/seq-format.md "Real models"), drawn only where both the model and the
// upstream backend run them: llama, qwen2, mistral, gpt2 (not qwen2_moe), PEFT-style `targets=`
// on Linear / Conv1D modules (never an Embedding nor a tied head), accelerate's
// `fully_shard_plan transformer_layers` or explicit dotted `fully_shard` lines, deferred adapters
// (add_adapter, load_adapter), no modules_to_save, DoRA, checkpoint, ram-efficient loading nor
// merge_and_unload (sim/core/crosscheck.cpp
// upstream_refusal and model_refusal name what each refuses).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/vocab/model_lowering.hpp"
#include "model/vocab/module_tree.hpp"
#include "model/vocab/op_rules.hpp"
#include "model/vocab/source_error.hpp"
#include "sim/core/generator.hpp"

namespace fsdpsim {

namespace {

template <class T>
T pick(Prng& rng, const std::vector<T>& v) {
  return v[rng.below(static_cast<uint32_t>(v.size()))];
}

// Sizes small enough for a crosscheck against upstream (about a second a file under load); heads
// divide hidden with an even head size (rotary families), kv_heads divides heads, gpt2 has no
// grouped attention (the parser's rules: model/vocab/seq_model_parser.cpp).
ModelDecl draw_model_line(Prng& rng) {
  ModelDecl m;
  m.family = pick(rng, std::vector<Family>{Family::Llama, Family::Qwen2, Family::Mistral, Family::Gpt2});
  m.hidden = pick(rng, std::vector<int>{16, 24, 32});
  m.intermediate = m.hidden * static_cast<int>(1 + rng.below(2));
  m.layers = 1 + static_cast<int>(rng.below(2));
  std::vector<int> heads;
  for (int h : {2, 4, 8})
    if (m.hidden % h == 0 && (m.hidden / h) % 2 == 0) heads.push_back(h);
  m.heads = pick(rng, heads);
  std::vector<int> kv;
  for (int k = 1; k <= m.heads; ++k)
    if (m.heads % k == 0) kv.push_back(k);
  m.kv_heads = m.family == Family::Gpt2 ? m.heads : pick(rng, kv);
  m.vocab = pick(rng, std::vector<int>{32, 48, 64});
  m.tie_embeddings = rng.chance(50);
  m.seq_len = 4 + static_cast<int>(rng.below(5));
  return m;
}

// PEFT target_modules: `all-linear`, or module names and dotted suffixes of the family's
// projections (tuners_utils.py::check_target_module_exists matches whole names or `.`+suffix).
std::vector<std::string> draw_targets(Prng& rng, const ModelDecl& m) {
  if (rng.chance(25)) return {"all-linear"};
  const bool gpt2 = m.family == Family::Gpt2;
  const std::vector<std::string> names = gpt2 ? std::vector<std::string>{"c_attn", "c_proj", "c_fc"}
                                              : std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj",
                                                                         "gate_proj", "up_proj", "down_proj"};
  const std::vector<std::string> dotted = gpt2 ? std::vector<std::string>{"attn.c_proj", "mlp.c_proj", "0.attn.c_attn", "h.0.mlp.c_fc"}
                                               : std::vector<std::string>{"self_attn.q_proj", "mlp.down_proj", "0.self_attn.v_proj",
                                                                          "layers.0.mlp.up_proj"};
  std::vector<std::string> t;
  for (const auto& n : names)
    if (rng.chance(35)) t.push_back(n);
  if (t.empty() || rng.chance(30)) t.push_back(pick(rng, dotted));
  std::sort(t.begin(), t.end());
  t.erase(std::unique(t.begin(), t.end()), t.end());
  return t;
}

// Explicit fully_shard lines, bottom-up: now and then a child of a decoder layer (its attention,
// its MLP, a norm) as a unit of its own, then the layer (each with chance 3/4), the untied input
// embedding now and then, then the root.
void draw_explicit_shards(Prng& rng, const ModuleTree& tree, const ModelDecl& m, Scenario& s) {
  static const Raf rafs[] = {Raf::True, Raf::False, Raf::None};
  for (const auto& d : tree.decoder_layers) {
    if (rng.chance(25)) {
      std::vector<std::string> children;
      for (const auto& mod : tree.modules)
        if (mod.name.rfind(d + ".", 0) == 0 && mod.name.find('.', d.size() + 1) == std::string::npos) children.push_back(mod.name);
      if (!children.empty()) s.shards.push_back({{pick(rng, children)}, rafs[rng.below(3)], {}});
    }
    if (rng.chance(75)) s.shards.push_back({{d}, rafs[rng.below(3)], {}});
  }
  if (!m.tie_embeddings && rng.chance(30))
    for (const auto& mod : tree.modules)
      if (mod.kind == ModuleKind::Embedding) {
        s.shards.push_back({{mod.name}, rafs[rng.below(3)], {}});
        break;
      }
  s.shards.push_back({{"root"}, rafs[rng.below(3)], {}});
}

Scenario draw_model_scenario(Prng& rng, const GenOptions& opt) {
  Scenario s;
  s.world = opt.world;
  s.seed = rng.next() % 1000000;
  s.model = draw_model_line(rng);
  const ModuleTree tree = module_tree(*s.model);
  static const char* names[] = {"default", "other", "third"};
  const int n_adapters = 1 + static_cast<int>(rng.below(3));
  for (int a = 0; a < n_adapters; ++a) {
    AdapterDecl d;
    d.name = names[a];
    d.r = pick(rng, std::vector<int>{2, 4, 8});
    d.alpha = pick(rng, std::vector<int>{d.r, 2 * d.r, 16});
    for (int tries = 0; tries < 8; ++tries) {  // a suffix no module of this size has is drawn again
      d.targets = draw_targets(rng, *s.model);
      const TargetResolution r = resolve_targets(tree, d.targets);
      if (r.error.empty() && !r.modules.empty()) break;
    }
    d.init = rng.chance(80) ? LoraInit::Random : LoraInit::Zero;
    // a later adapter now and then deferred: add_adapter / load_adapter bring it in (before prepare
    // too: ops_before_prepare), each on a transformers model on upstream
    d.deferred = a > 0 && rng.chance(30);
    s.adapters.push_back(d);
  }
  if (rng.chance(50)) s.plan = ShardPlan::TransformerLayers;
  else draw_explicit_shards(rng, tree, *s.model, s);
  if (rng.chance(20)) s.optimizer = OptimizerParams::AllLora;
  if (rng.chance(25)) s.data = Data::PerRank;
  if (rng.chance(15)) s.dtype = DType::BF16;
  return s;
}

// The op kinds drawn on a model file: every kind but merge_and_unload (the model does not run it on
// a `model` scenario: op_rules.cpp::unload_unmodelled); each sequence enables a random subset (swarm
// testing), train_step always.
// `fsdp`: the modules a fully_shard call was given (the FSDPModules reshard / unshard act on).
std::vector<Op> draw_model_ops(Prng& rng, const Scenario& lowered, const std::vector<std::string>& fsdp) {
  std::vector<OpKind> enabled = {OpKind::TrainStep};
  for (int k = 0; k < kOpKindCount; ++k) {
    const auto kind = static_cast<OpKind>(k);
    if (kind != OpKind::MergeAndUnload && kind != OpKind::TrainStep && rng.chance(40))
      enabled.push_back(kind);
  }
  OpRules rules(lowered);
  AdapterSet present = rules.present();
  std::vector<Op> ops;
  if (std::find(enabled.begin(), enabled.end(), OpKind::Prepare) != enabled.end())
    ops = ops_before_prepare(lowered, [&](uint32_t percent) { return rng.chance(percent); }, &present);
  for (const Op& op : ops) rules.apply(lowered, op);
  enabled.erase(std::remove(enabled.begin(), enabled.end(), OpKind::Prepare), enabled.end());
  const int n = static_cast<int>(ops.size()) + 3 + static_cast<int>(rng.below(8));
  auto some_present = [&]() {
    std::vector<std::string> v;
    for (int a : rules.present()) v.push_back(lowered.adapters[a].name);
    return v;
  };
  bool sync = true;
  for (int guard = 0; static_cast<int>(ops.size()) < n && guard < 20 * n; ++guard) {
    Op op;
    op.kind = pick(rng, enabled);
    if (!rules.possible(op.kind)) continue;
    switch (op.kind) {
      case OpKind::SetAdapter:
        op.list_form = rng.chance(20);
        op.names = {pick(rng, some_present())};
        break;
      case OpKind::Merge:
      case OpKind::DeleteAdapter:
        if (op.kind == OpKind::DeleteAdapter || rng.chance(30)) op.names = {pick(rng, some_present())};
        break;
      case OpKind::SaveAdapters:
        if (rng.chance(30)) op.names = {pick(rng, some_present())};
        break;
      case OpKind::AddAdapter:
      case OpKind::LoadAdapter:
        op.names = {lowered.adapters[pick(rng, rules.addable())].name};
        op.trainable = op.kind == OpKind::LoadAdapter && rng.chance(50);
        break;
      case OpKind::Reshard:
      case OpKind::Unshard:
        if (rng.chance(50)) op.names = {pick(rng, fsdp)};
        break;
      case OpKind::DeltaWeight:
        op.names = {pick(rng, lowered.adapters[0].targets)};
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
    if (OpRules::rank_safe(op.kind) && lowered.world > 1 && rng.chance(5)) op.rank = static_cast<int>(rng.below(static_cast<uint32_t>(lowered.world)));
    if (!rules.names_legal(lowered, op)) continue;
    rules.apply(lowered, op);
    ops.push_back(op);
  }
  return ops;
}

}  // namespace

SeqFile generate_seq_models(Prng& rng, const GenOptions& opt) {
  // A draw the parser or the model's lowering would refuse is drawn again from the same stream.
  for (int attempt = 0; attempt < 64; ++attempt) {
    SeqFile f;
    f.scenario = draw_model_scenario(rng, opt);
    Scenario lowered = f.scenario;
    SourcePos at;
    if (!lower_model(lowered, &at).empty()) continue;
    // A lowered group lists every layer it claims, but only the paths fully_shard was given are
    // FSDPModules: the plan's are the lowered groups' names, explicit lines' their own paths.
    std::vector<std::string> fsdp = OpRules::shard_modules(f.scenario);
    if (f.scenario.plan == ShardPlan::TransformerLayers) {
      fsdp = {"root"};
      for (const auto& d : lowered.shards)
        if (!d.is_root()) fsdp.push_back(d.modules[0]);
    }
    f.ops = draw_model_ops(rng, lowered, fsdp);
    try {
      parse_seq(print_seq(f), "<generated>");
      return f;
    } catch (const SourceError&) {
    }
  }
  throw std::logic_error("--draw models drew 64 scenarios the parser refuses in a row");
}

}  // namespace fsdpsim
