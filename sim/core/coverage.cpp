#include "sim/core/coverage.hpp"

#include <algorithm>
#include <unordered_map>

#include "model/vocab/profile.hpp"
#include "sim/core/generator.hpp"
#include "model/vocab/seq_words.hpp"
#include "model/vocab/source_error.hpp"

namespace fsdpsim {

namespace {

std::vector<Feature> build_features() {
  std::vector<Feature> f;
  auto add = [&](const std::string& directive, const std::string& key, const std::string& spelled, bool one_value = false,
                 bool always = false) { f.push_back({directive + " " + spelled, directive, key, one_value, always}); };
  add("world", "", "W", true, true);
  add("seed", "", "S", true, true);
  for (const auto& p : profile_names()) add("profile", "", p, true);
  for (int k = 0; k < kDrawnSwitches; ++k) add("set", switch_table()[k].name, switch_table()[k].name);
  add("layer", "", "IN OUT", false, true);
  add("layer", "experts", "experts=E");
  for (const char* v : {"nf4", "fp4"}) add("layer", "quant", std::string("quant=") + v);
  for (DType t : {DType::F32, DType::BF16}) add("layer", "compute_dtype", std::string("compute_dtype=") + dtype_name(t));
  add("adapter", "r", "r=N", false, true);
  add("adapter", "alpha", "alpha=N", false, true);
  add("adapter", "targets", "targets=L", false, true);
  add("adapter", "modules_to_save", "modules_to_save");
  for (const char* v : {"zero", "random"}) add("adapter", "init", std::string("init=") + v);
  for (const char* v : {"true", "false"}) add("adapter", "autocast", std::string("autocast=") + v);
  add("adapter", "inference_mode", "inference_mode");
  add("adapter", "deferred", "deferred");
  add("adapter", "use_dora", "use_dora");
  for (Raf r : {Raf::True, Raf::False, Raf::None}) add("fully_shard", "reshard_after_forward", std::string("reshard_after_forward=") + raf_name(r));
  add("fully_shard", "group", "a,b");
  for (const char* v : {"trainable", "all"}) add("optimizer", "", v, true);
  for (const char* v : {"full", "ram_efficient"}) add("loading", "", v, true);
  for (DType t : {DType::F32, DType::BF16}) add("dtype", "", dtype_name(t), true);
  for (const char* v : {"true", "false"}) add("dtype", "autocast_adapter_dtype", std::string("autocast_adapter_dtype=") + v, true);
  for (const char* v : {"same", "per_rank"}) add("data", "", v, true);
  add("checkpoint", "", "L");
  // The scenario's policy line, key by key (one value per key), and a fully_shard that overrides it.
  for (const char* key : {"param_dtype", "reduce_dtype", "output_dtype"})
    for (DType t : {DType::F32, DType::BF16}) add("mixed_precision", key, std::string(key) + "=" + dtype_name(t), true);
  for (const char* v : {"true", "false"}) add("mixed_precision", "cast_forward_inputs", std::string("cast_forward_inputs=") + v, true);
  add("fully_shard", "policy", "POLICY_KEY=V");
  for (int k = 0; k < kOpKindCount; ++k) add("op", op_name(static_cast<OpKind>(k)), op_name(static_cast<OpKind>(k)));
  // The op kinds from kDrawAllOpKinds on (save_model, load_model, merge_and_unload, generate) came
  // after `--draw all`'s seeds were fixed: `--draw all2` draws them.
  for (auto& feat : f)
    if (auto kind = op_from_name(feat.key); feat.directive == "op" && kind && static_cast<int>(*kind) >= kDrawAllOpKinds)
      feat.undrawn = "only --draw all2 draws it (docs/design/known-limits.md#model-state-dicts)";
  // The forms an op line can take beyond its kind (seq_parser.cpp::parse_op_line).
  for (const char* form : {"@R op", "set_adapter [a,b]", "merge NAME", "merge [a,b]", "save_adapters NAMES", "reshard MODULE",
                           "unshard MODULE", "load_adapter trainable", "load_adapter frozen", "gradient_sync on", "gradient_sync off"})
    f.push_back({form, "op", form, false, false});
  return f;
}

const std::unordered_map<std::string, int>& feature_index() {
  static const std::unordered_map<std::string, int> index = [] {
    std::unordered_map<std::string, int> m;
    const auto& f = vocab_features();
    for (size_t i = 0; i < f.size(); ++i) m[f[i].name] = static_cast<int>(i);
    return m;
  }();
  return index;
}

}  // namespace

const std::vector<Feature>& vocab_features() {
  static const std::vector<Feature> f = build_features();
  return f;
}

bool grammar_allows(const Feature& a, const Feature& b) {
  return !(a.one_value && b.one_value && a.directive == b.directive && a.key == b.key);
}

std::vector<bool> features_of(const SeqFile& f) {
  const Scenario& s = f.scenario;
  std::vector<bool> held(vocab_features().size(), false);
  auto hold = [&](const std::string& name) { held[feature_index().at(name)] = true; };
  hold("world W"), hold("seed S"), hold("layer IN OUT");
  hold("profile " + s.profile);
  for (const auto& o : s.overrides) hold("set " + o.name);
  for (const auto& l : s.layers) {
    if (l.experts > 0) hold("layer experts=E");
    if (l.quant) hold(std::string("layer quant=") + quant_name(*l.quant));
    if (l.compute_dtype) hold(std::string("layer compute_dtype=") + dtype_name(*l.compute_dtype));
  }
  for (const auto& a : s.adapters) {
    hold("adapter r=N"), hold("adapter alpha=N"), hold("adapter targets=L");
    if (!a.modules_to_save.empty()) hold("adapter modules_to_save");
    hold(a.init == LoraInit::Zero ? "adapter init=zero" : "adapter init=random");
    if (a.autocast) hold(*a.autocast ? "adapter autocast=true" : "adapter autocast=false");
    if (a.inference_mode) hold("adapter inference_mode");
    if (a.deferred) hold("adapter deferred");
    if (a.use_dora) hold("adapter use_dora");
  }
  for (const auto& d : s.shards) {
    hold(std::string("fully_shard reshard_after_forward=") + raf_name(d.raf));
    if (d.modules.size() > 1) hold("fully_shard a,b");
  }
  hold(s.optimizer == OptimizerParams::AllLora ? "optimizer all" : "optimizer trainable");
  hold(s.loading == Loading::RamEfficient ? "loading ram_efficient" : "loading full");
  hold(std::string("dtype ") + dtype_name(s.dtype));
  hold(s.autocast_adapter_dtype ? "dtype autocast_adapter_dtype=true" : "dtype autocast_adapter_dtype=false");
  hold(s.data == Data::PerRank ? "data per_rank" : "data same");
  if (!s.checkpoint.empty()) hold("checkpoint L");
  auto hold_dtype = [&](const char* key, const std::optional<DType>& t) {
    if (t) hold(std::string("mixed_precision ") + key + "=" + dtype_name(*t));
  };
  hold_dtype("param_dtype", s.mp.param_dtype), hold_dtype("reduce_dtype", s.mp.reduce_dtype), hold_dtype("output_dtype", s.mp.output_dtype);
  if (s.mp.cast_forward_inputs) hold(*s.mp.cast_forward_inputs ? "mixed_precision cast_forward_inputs=true" : "mixed_precision cast_forward_inputs=false");
  for (const auto& d : s.shards)
    if (!d.mp.empty()) hold("fully_shard POLICY_KEY=V");
  for (const Op& op : f.ops) {
    hold(std::string("op ") + op_name(op.kind));
    if (op.rank >= 0) hold("@R op");
    const bool named = !op.names.empty();
    switch (op.kind) {
      case OpKind::SetAdapter: if (op.list_form) hold("set_adapter [a,b]"); break;
      case OpKind::Merge: if (named) hold(op.list_form ? "merge [a,b]" : "merge NAME"); break;
      case OpKind::SaveAdapters: if (named) hold("save_adapters NAMES"); break;
      case OpKind::Reshard: if (named) hold("reshard MODULE"); break;
      case OpKind::Unshard: if (named) hold("unshard MODULE"); break;
      case OpKind::LoadAdapter: hold(op.trainable ? "load_adapter trainable" : "load_adapter frozen"); break;
      case OpKind::GradientSync: hold(op.sync ? "gradient_sync on" : "gradient_sync off"); break;
      default: break;
    }
  }
  return held;
}

void Coverage::add(const std::vector<bool>& held) {
  const size_t n = held.size();
  if (feature.empty()) feature.assign(n, 0), pair.assign(n, std::vector<int64_t>(n, 0));  // the first sequence
  ++sequences;
  for (size_t i = 0; i < n; ++i) {
    if (!held[i]) continue;
    ++feature[i];
    for (size_t j = i + 1; j < n; ++j) pair[i][j] += held[j];
  }
}

Coverage measure_coverage(uint64_t seed, int count, const GenOptions& opt) {
  Coverage c;
  c.world = opt.world;
  const size_t n = vocab_features().size();
  c.feature.assign(n, 0), c.pair.assign(n, std::vector<int64_t>(n, 0));
  for (int i = 0; i < count; ++i) {
    Prng rng(seed + static_cast<uint64_t>(i));  // the seed crosscheck and random give sequence i
    c.add(features_of(generate_seq(rng, opt)));
  }
  return c;
}

std::string forced_witness(int a, int b, const GenOptions& base, int tries, SeqFile* found) {
  const auto& feats = vocab_features();
  GenOptions opt = base;
  opt.all = true;
  opt.force = {feats[a].name};
  if (b >= 0) opt.force.push_back(feats[b].name);
  std::string refusal = "never realised by a forced draw";
  for (int t = 0; t < tries; ++t) {
    Prng rng(0x5eed0000u + static_cast<uint64_t>(t));
    SeqFile f = generate_seq_all(rng, opt, false);
    const std::vector<bool> held = features_of(f);
    if (!held[a] || (b >= 0 && !held[b])) continue;
    try {
      validate(f, "<forced draw>");
    } catch (const SourceError& e) {
      refusal = e.what();
      continue;
    }
    if (found) *found = f;
    return "";
  }
  return refusal;
}

}  // namespace fsdpsim
