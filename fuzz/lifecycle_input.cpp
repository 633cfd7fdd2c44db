#include "fuzz/lifecycle_input.hpp"

#include <fuzzer/FuzzedDataProvider.h>

#include <string_view>
#include <unordered_map>

#include "model/machine/topology.hpp"
#include "model/vocab/op_rules.hpp"
#include "sim/core/generator.hpp"

namespace fsdpsim::fuzz {

namespace {

const char* const kLayerNames[] = {"lin0", "lin1", "lin2"};
const char* const kAdapterNames[] = {"default", "other", "third"};

Scenario decode_scenario(FuzzedDataProvider& p) {
  Scenario s;
  s.world = p.ConsumeIntegralInRange<int>(1, 4);
  s.profile = p.ConsumeBool() ? "patched" : "upstream";
  static const int sizes[] = {2, 4, 6, 10};
  int n_layers = p.ConsumeIntegralInRange<int>(1, 3);
  int in = sizes[p.ConsumeIntegralInRange<int>(0, 3)];
  for (int l = 0; l < n_layers; ++l) {
    int out = l + 1 == n_layers ? 2 : sizes[p.ConsumeIntegralInRange<int>(0, 3)];
    s.layers.push_back({kLayerNames[l], in, out, 0, {}});
    in = out;
  }
  int n_adapters = p.ConsumeIntegralInRange<int>(1, 3);
  for (int a = 0; a < n_adapters; ++a) {
    AdapterDecl d;
    d.name = kAdapterNames[a];
    d.r = p.ConsumeIntegralInRange<int>(1, 4);
    d.alpha = d.r * p.ConsumeIntegralInRange<int>(1, 2);
    uint8_t mask = p.ConsumeIntegral<uint8_t>();
    for (int l = 0; l < n_layers; ++l)
      if ((mask >> l) & 1) d.targets.push_back(kLayerNames[l]);
    if (d.targets.empty()) d.targets.push_back(kLayerNames[n_layers - 1]);
    d.init = p.ConsumeBool() ? LoraInit::Random : LoraInit::Zero;
    d.inference_mode = a > 0 && p.ConsumeIntegralInRange<int>(0, 9) == 0;
    d.deferred = a > 0 && p.ConsumeIntegralInRange<int>(0, 7) == 0;
    s.adapters.push_back(d);
  }
  static const Raf rafs[] = {Raf::True, Raf::False, Raf::None};
  for (int l = 0; l < n_layers; ++l)
    if (p.ConsumeBool()) s.shards.push_back({{kLayerNames[l]}, rafs[p.ConsumeIntegralInRange<int>(0, 2)], {}});
  s.shards.push_back({{"root"}, rafs[p.ConsumeIntegralInRange<int>(0, 2)], {}});
  s.optimizer = p.ConsumeIntegralInRange<int>(0, 4) == 0 ? OptimizerParams::AllLora : OptimizerParams::Trainable;
  // ParamWrapper targets and ram-efficient loading (seeds 001, 002); keep_valid
  // puts a prepare first when the loading needs one.
  for (auto& l : s.layers)
    if (p.ConsumeIntegralInRange<int>(0, 7) == 0) l.experts = p.ConsumeIntegralInRange<int>(1, 3);
  if (p.ConsumeIntegralInRange<int>(0, 5) == 0) {
    s.loading = Loading::RamEfficient;
    s.dtype = p.ConsumeBool() ? DType::BF16 : DType::F32;
    s.autocast_adapter_dtype = p.ConsumeBool();
  }
  // A grouped fully_shard of two layers, adjacent or not, either order, sometimes a raising member.
  if (n_layers > 1 && p.ConsumeIntegralInRange<int>(0, 3) == 0) {
    const int a = p.ConsumeIntegralInRange<int>(0, n_layers - 1);
    const int b = (a + p.ConsumeIntegralInRange<int>(1, n_layers - 1)) % n_layers;
    group_layers(s, a, b, rafs[p.ConsumeIntegralInRange<int>(0, 2)], p.ConsumeIntegralInRange<int>(0, 2) == 0);
  }
  return s;
}

Op decode_op(FuzzedDataProvider& p, const Scenario& s) {
  Op op;
  op.kind = weighted_op_kind(p.ConsumeIntegralInRange<uint32_t>(0, kOpWeightTotal - 1));
  auto adapter = [&]() { return s.adapters[p.ConsumeIntegralInRange<size_t>(0, s.adapters.size() - 1)].name; };
  switch (op.kind) {
    case OpKind::SetAdapter:
      op.names = {adapter()};
      if (p.ConsumeIntegralInRange<int>(0, 5) == 0) {
        op.list_form = true;
        std::string second = adapter();
        if (second != op.names[0]) op.names.push_back(second);
      }
      break;
    case OpKind::Merge:
    case OpKind::SaveAdapters:
      if (p.ConsumeBool()) op.names = {adapter()};
      break;
    case OpKind::AddAdapter:
    case OpKind::LoadAdapter:
    case OpKind::DeleteAdapter:
      op.names = {adapter()};
      op.trainable = op.kind == OpKind::LoadAdapter && p.ConsumeBool();
      break;
    case OpKind::Reshard:
    case OpKind::Unshard:
      if (p.ConsumeBool()) {  // any member of a fully_shard line (each member of a group moves it)
        std::vector<std::string> members;
        for (const auto& d : s.shards) members.insert(members.end(), d.modules.begin(), d.modules.end());
        op.names = {members[p.ConsumeIntegralInRange<size_t>(0, members.size() - 1)]};
      }
      break;
    case OpKind::DeltaWeight:
      op.names = {s.layers[p.ConsumeIntegralInRange<size_t>(0, s.layers.size() - 1)].name};
      break;
    default:
      break;
  }
  if (s.world > 1 && p.ConsumeIntegralInRange<int>(0, 15) == 0) op.rank = p.ConsumeIntegralInRange<int>(0, s.world - 1);
  return op;
}

// Drops what the parser would refuse (OpRules::file_may_hold) and, under patched,
// what has no known fix (OpRules::has_known_fix) and adapters declared with
// inference_mode (their injection freezes the active adapter, peft D8), adapters
// added after sharding (D13), and experts layers the pinned versions cannot shard
// (E = 1: PEFT 0.21.2 takes Linear's path on a transposed (1, in, out) weight; E
// not dividing over the ranks: DTensor cannot unflatten the uneven shard) -- no
// fix is known for either.
void keep_valid(SeqFile& f) {
  const bool patched = f.scenario.profile == "patched";
  if (patched) {
    for (auto& a : f.scenario.adapters) a.inference_mode = a.deferred = false;
    for (auto& l : f.scenario.layers)
      if (l.experts > 0 && (l.experts == 1 || l.experts % f.scenario.world != 0)) l.experts = 0;
  }
  // One prepare at most; before it only what OpRules::allowed_before_prepare
  // lets through; ram-efficient loading needs one, at the start if need be.
  const int prepare_at = prepare_index(f);
  std::vector<Op> ops;
  if (prepare_at < 0 && f.scenario.loading == Loading::RamEfficient) {
    Op prep;
    prep.kind = OpKind::Prepare;
    ops.push_back(prep);
  }
  for (size_t i = 0; i < f.ops.size(); ++i) {
    const Op& op = f.ops[i];
    if (static_cast<int>(i) < prepare_at && !OpRules::allowed_before_prepare(op)) continue;
    if (op.kind == OpKind::Prepare && static_cast<int>(i) != prepare_at) continue;
    if (!OpRules::file_may_hold(f.scenario, op)) continue;
    if (patched && !OpRules::has_known_fix(op)) continue;
    ops.push_back(op);
  }
  if (ops.size() > 40) ops.resize(40);
  f.ops = ops;
  try {
    validate(f, "<fuzz>");
  } catch (const SourceError&) {
    f.ops.clear();  // a combination the rules above miss: run the scenario alone
    f.scenario.loading = Loading::Full;
  }
}

// Splits a grouped fully_shard into its members' own lines, or groups two layers (adjacent or
// not, either order; a third of them with a raising later member: group_layers).
void regroup(Prng& rng, Scenario& s) {
  for (size_t i = 0; i < s.shards.size(); ++i) {
    if (s.shards[i].modules.size() < 2) continue;
    const ShardDecl group = s.shards[i];
    s.shards.erase(s.shards.begin() + static_cast<long>(i));
    for (size_t m = 0; m < group.modules.size(); ++m)
      s.shards.insert(s.shards.begin() + static_cast<long>(i + m), ShardDecl{{group.modules[m]}, group.raf, {}});
    return;
  }
  const uint32_t n = static_cast<uint32_t>(s.layers.size());
  if (n < 2) return;
  const uint32_t a = rng.below(n), b = (a + 1 + rng.below(n - 1)) % n;
  group_layers(s, static_cast<int>(a), static_cast<int>(b), static_cast<Raf>(rng.below(3)), rng.chance(33));
}

// World 3 or 4 with a rank holding only padding rows of some managed tensor (torch.chunk over
// the ranks, FSDP2 Shard(0): ceil(rows / world) rows each): when no tensor has so few rows,
// the first adapter's rank goes to 1, so its lora_A has one row.
void padded_world(Prng& rng, Scenario& s) {
  s.world = 3 + static_cast<int>(rng.below(2));
  if (!has_padding_only_rank(compile_topology(s))) s.adapters[0].r = 1;
}

}  // namespace

SeqFile decode(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  if (text.find("---") != std::string::npos) {
    try {
      SeqFile f = parse_seq(text, "<input>");
      // a `model` scenario is parsed but not executed (known-limits.md): the fuzzer decodes its own
      if (!f.scenario.model && f.scenario.world <= 4 && f.scenario.layers.size() <= 3 && f.ops.size() <= 40) {
        size_t before = f.ops.size();
        keep_valid(f);
        if (f.ops.size() == before) return f;
      }
    } catch (const SourceError&) {
    }
  }
  FuzzedDataProvider p(data, size);
  SeqFile f;
  f.scenario = decode_scenario(p);
  while (p.remaining_bytes() > 0 && f.ops.size() < 40) f.ops.push_back(decode_op(p, f.scenario));
  keep_valid(f);
  return f;
}

namespace {

struct CacheEntry {
  std::string text;
  SeqFile file;
};

// Keyed by the text's hash; a colliding entry is replaced, and an entry is
// used only when its text is the input's.
std::unordered_map<size_t, CacheEntry>& decode_cache() {
  static std::unordered_map<size_t, CacheEntry> cache;
  return cache;
}

size_t text_hash(const char* data, size_t size) { return std::hash<std::string_view>{}(std::string_view(data, size)); }

CacheEntry& cache_slot(const char* data, size_t size) {
  auto& cache = decode_cache();
  if (cache.size() >= 16384) cache.clear();  // bounded: a long run's corpus turns over
  CacheEntry& e = cache[text_hash(data, size)];
  e.text.assign(data, size);
  return e;
}

}  // namespace

const SeqFile& decode_cached(const uint8_t* data, size_t size) {
  const char* text = reinterpret_cast<const char*>(data);
  auto& cache = decode_cache();
  auto it = cache.find(text_hash(text, size));
  if (it != cache.end() && it->second.text.size() == size && std::equal(it->second.text.begin(), it->second.text.end(), text))
    return it->second.file;
  CacheEntry& e = cache_slot(text, size);
  e.file = decode(data, size);
  return e.file;
}

bool remember_decoded(const std::string& text, SeqFile f) {
  if (f.scenario.world > 4 || f.scenario.layers.size() > 3 || f.ops.size() > 40) return false;  // decode would not parse it
  cache_slot(text.data(), text.size()).file = std::move(f);
  return true;
}

std::string mutate(const SeqFile& in, uint32_t seed, SeqFile* decoded) {
  SeqFile f = in;
  for (auto& op : f.ops) op.expects.clear();
  f.comments.clear();
  Prng rng(seed);
  // Fresh ops for the scenario, drawn only by the mutations that insert or change one.
  auto fresh_ops = [&] {
    GenOptions opt;
    opt.world = f.scenario.world;
    opt.min_ops = opt.max_ops = 4;
    return generate_ops(rng, f.scenario, opt);
  };
  const size_t n = f.ops.size();
  switch (rng.below(6)) {
    case 0:  // insert
    case 1:
      if (std::vector<Op> pool = fresh_ops(); !pool.empty())
        f.ops.insert(f.ops.begin() + static_cast<long>(n ? rng.below(static_cast<uint32_t>(n + 1)) : 0), pool[0]);
      break;
    case 2:  // delete
      if (n) f.ops.erase(f.ops.begin() + static_cast<long>(rng.below(static_cast<uint32_t>(n))));
      break;
    case 3:  // swap neighbours
      if (n > 1) {
        size_t i = rng.below(static_cast<uint32_t>(n - 1));
        std::swap(f.ops[i], f.ops[i + 1]);
      }
      break;
    case 4:  // change an op's arguments (replace it by a fresh one of the same kind when the pool has it)
      if (n) {
        size_t i = rng.below(static_cast<uint32_t>(n));
        for (const Op& p : fresh_ops())
          if (p.kind == f.ops[i].kind) f.ops[i] = p;
        if (f.scenario.world > 1 && rng.chance(30)) f.ops[i].rank = f.ops[i].rank < 0 ? static_cast<int>(rng.below(f.scenario.world)) : -1;
      }
      break;
    default:  // a scenario knob
      switch (rng.below(6)) {
        case 5: regroup(rng, f.scenario); break;
        case 4: padded_world(rng, f.scenario); break;
        case 3: {  // another topology, adapters and sharding plan; the ops that still apply stay
          GenOptions g;
          g.world = f.scenario.world;
          g.grouped_percent = 25;
          std::string profile = f.scenario.profile;
          f.scenario = generate_scenario(rng, g);
          f.scenario.profile = profile;
          break;
        }
        case 0: f.scenario.profile = f.scenario.profile == "upstream" ? "patched" : "upstream"; break;
        case 1: {
          auto& d = f.scenario.shards[rng.below(static_cast<uint32_t>(f.scenario.shards.size()))];
          d.raf = static_cast<Raf>(rng.below(3));
          break;
        }
        default: f.scenario.world = 1 + static_cast<int>(rng.below(4)); break;
      }
  }
  keep_valid(f);
  std::string text = print_seq(f);
  if (decoded) *decoded = std::move(f);
  return text;
}

}  // namespace fsdpsim::fuzz
