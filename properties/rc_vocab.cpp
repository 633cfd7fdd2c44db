#include "properties/rc_vocab.hpp"

#include <algorithm>

#include <rapidcheck/GenerationFailure.h>

#include "sim/generator.hpp"

namespace fsdpsim {

void showValue(const Scenario& s, std::ostream& os) { os << "\n" << print_scenario(s); }
void showValue(const Op& op, std::ostream& os) { os << op_text(op); }
void showValue(const SeqFile& f, std::ostream& os) { os << "\n" << print_seq(f); }
void showValue(const Observation& o, std::ostream& os) { print_json(os, o); }

namespace rcgen {
namespace {

// A uniform draw in [0, n) whatever the current size (RapidCheck's inRange
// grows with size), shrinking toward 0.
int uniform(int n) { return *rc::gen::resize(100, rc::gen::inRange(0, n)); }
// True with `percent` chance; shrinks toward false (the option left out).
bool chance(int percent) { return uniform(100) >= 100 - percent; }

int popcount(uint32_t m) { return __builtin_popcount(m); }

// The modules reshard/unshard may name: root and every layer given its own fully_shard.
std::vector<std::string> shard_modules(const Scenario& s) {
  std::vector<std::string> m = {"root"};
  for (const auto& d : s.shards)
    if (!d.is_root()) m.push_back(d.modules[0]);
  return m;
}

// sim/generator.cpp's rank_safe kinds: an `@R` on them keeps the ranks' programs pairable often enough.
bool rank_safe(OpKind k) {
  return k == OpKind::SetAdapter || k == OpKind::Merge || k == OpKind::Unmerge || k == OpKind::TrainStep ||
         k == OpKind::Reshard || k == OpKind::Eval || k == OpKind::SaveOptimizer;
}

// The generator's weight of each kind (weighted_op_kind over its whole range).
const std::vector<uint32_t>& kind_weights() {
  static const std::vector<uint32_t> w = [] {
    std::vector<uint32_t> v(kOpKindCount, 0);
    for (uint32_t x = 0; x < kOpWeightTotal; ++x) ++v[static_cast<int>(weighted_op_kind(x))];
    return v;
  }();
  return w;
}

// Deferred adapters not in the model: what add_adapter/load_adapter may bring in.
std::vector<int> addable(const OpRules& m) {
  std::vector<int> v;
  for (size_t a = 0; a < m.scenario->adapters.size(); ++a)
    if (m.scenario->adapters[a].deferred && !((m.present >> a) & 1)) v.push_back(static_cast<int>(a));
  return v;
}

// Whether a kind can be drawn at all in this state (its names come after).
bool possible(const OpRules& m, OpKind k) {
  if (!(m.allowed & kind_bit(k)) || kind_weights()[static_cast<int>(k)] == 0) return false;
  switch (k) {
    case OpKind::Backward: return m.graph;
    case OpKind::DisableEnter: return !m.disabled;
    case OpKind::DisableExit: return m.disabled;
    case OpKind::AddAdapter: case OpKind::LoadAdapter: return !addable(m).empty();
    case OpKind::DeleteAdapter: return popcount(m.present) > 1;
    case OpKind::LoadOptimizer: return m.saved_optimizer;
    case OpKind::LoadAdapters: return m.saved_adapters;
    default: return true;
  }
}

std::string present_name(const OpRules& m) {
  std::vector<int> v;
  for (size_t a = 0; a < m.scenario->adapters.size(); ++a)
    if ((m.present >> a) & 1) v.push_back(static_cast<int>(a));
  return m.scenario->adapters[v[uniform(static_cast<int>(v.size()))]].name;
}

// The names an op of kind k takes, as the generator draws them.
void draw_names(const OpRules& m, Op& op) {
  const Scenario& s = *m.scenario;
  switch (op.kind) {
    case OpKind::SetAdapter:
      if (m.list_set_adapter && popcount(m.present) > 1 && chance(15)) {
        op.list_form = true;
        for (size_t a = 0; a < s.adapters.size(); ++a)
          if (((m.present >> a) & 1) && chance(60)) op.names.push_back(s.adapters[a].name);
        if (op.names.empty()) op.names.push_back(present_name(m));
      } else {
        op.names.push_back(present_name(m));
      }
      break;
    case OpKind::Merge:
      if (chance(25)) op.names.push_back(present_name(m));
      break;
    case OpKind::AddAdapter:
    case OpKind::LoadAdapter: {
      std::vector<int> v = addable(m);
      op.names.push_back(s.adapters[v[uniform(static_cast<int>(v.size()))]].name);
      op.trainable = op.kind == OpKind::LoadAdapter && chance(50);
      break;
    }
    case OpKind::DeleteAdapter:
      op.names.push_back(present_name(m));
      break;
    case OpKind::Reshard:
    case OpKind::Unshard:
      if (chance(50)) {
        std::vector<std::string> mods = shard_modules(s);
        op.names.push_back(mods[uniform(static_cast<int>(mods.size()))]);
      }
      break;
    case OpKind::DeltaWeight:
      op.names.push_back(s.layers[uniform(static_cast<int>(s.layers.size()))].name);
      break;
    default:
      break;
  }
}

}  // namespace

KindMask kinds(std::initializer_list<OpKind> ks) {
  KindMask m = 0;
  for (OpKind k : ks) m |= kind_bit(k);
  return m;
}

KindMask after_prepare_kinds() { return ((KindMask{1} << kOpKindCount) - 1) & ~kind_bit(OpKind::Prepare); }

OpRules::OpRules(const SeqFile& f, KindMask allowed_kinds, bool may_rank)
    : scenario(std::make_shared<const Scenario>(f.scenario)), allowed(allowed_kinds), ranked(may_rank && f.scenario.world > 1) {
  for (size_t a = 0; a < scenario->adapters.size(); ++a)
    if (!scenario->adapters[a].deferred) present |= 1u << a;
  for (const auto& o : f.ops) apply(o);
}

bool OpRules::legal(const Op& op) const {
  const Scenario& s = *scenario;
  if (!possible(*this, op.kind)) return false;
  if (op.rank >= 0 && !(ranked && rank_safe(op.kind) && op.rank < s.world)) return false;
  if (op.list_form && !list_set_adapter) return false;
  auto is_present = [&](const std::string& n) {
    int a = s.adapter_index(n);
    return a >= 0 && ((present >> a) & 1);
  };
  switch (op.kind) {
    case OpKind::SetAdapter:
      return !op.names.empty() && std::all_of(op.names.begin(), op.names.end(), is_present);
    case OpKind::Merge:
    case OpKind::DeleteAdapter:
      return std::all_of(op.names.begin(), op.names.end(), is_present);
    case OpKind::AddAdapter:
    case OpKind::LoadAdapter: {
      std::vector<int> v = addable(*this);
      return op.names.size() == 1 && std::find(v.begin(), v.end(), s.adapter_index(op.names[0])) != v.end();
    }
    case OpKind::Reshard:
    case OpKind::Unshard: {
      std::vector<std::string> mods = shard_modules(s);
      return std::all_of(op.names.begin(), op.names.end(),
                         [&](const std::string& n) { return std::find(mods.begin(), mods.end(), n) != mods.end(); });
    }
    default:
      return true;
  }
}

void OpRules::apply(const Op& op) {
  const Scenario& s = *scenario;
  switch (op.kind) {
    case OpKind::Forward: graph = true; break;
    case OpKind::Eval: case OpKind::Backward: case OpKind::TrainStep: graph = false; break;
    case OpKind::DisableEnter: disabled = true; break;
    case OpKind::DisableExit: disabled = false; break;
    case OpKind::AddAdapter: case OpKind::LoadAdapter: present |= 1u << s.adapter_index(op.names[0]); break;
    case OpKind::DeleteAdapter: present &= ~(1u << s.adapter_index(op.names[0])); break;
    case OpKind::SaveOptimizer: saved_optimizer = true; break;
    case OpKind::SaveAdapters: saved_adapters = true; break;
    default: break;
  }
}

rc::Gen<Op> op(const OpRules& rules) {
  return rc::gen::exec([rules] {
    std::vector<OpKind> ks;
    std::vector<uint32_t> ws;
    uint32_t total = 0;
    for (int k = 0; k < kOpKindCount; ++k)
      if (possible(rules, static_cast<OpKind>(k))) {
        ks.push_back(static_cast<OpKind>(k));
        ws.push_back(total += kind_weights()[k]);
      }
    if (ks.empty()) throw rc::GenerationFailure("no op kind is legal here");
    const uint32_t x = static_cast<uint32_t>(*rc::gen::resize(100, rc::gen::inRange<int64_t>(0, total)));
    Op o;
    o.kind = ks[std::upper_bound(ws.begin(), ws.end(), x) - ws.begin()];
    draw_names(rules, o);
    if (rules.ranked && rank_safe(o.kind) && chance(6)) o.rank = uniform(rules.scenario->world);
    return o;
  });
}

rc::Gen<Scenario> scenario(int world) {
  return rc::gen::exec([world] {
    Scenario s;
    s.world = world;
    s.seed = static_cast<uint64_t>(uniform(1000000));
    s.profile = chance(50) ? "patched" : "upstream";
    static const char* const layer_names[] = {"lin0", "lin1", "lin2"};
    static const int sizes[] = {4, 6, 10, 20};
    const int n_layers = 1 + uniform(3);
    int in = sizes[uniform(4)];
    for (int l = 0; l < n_layers; ++l) {
      int out = l + 1 == n_layers ? 2 : sizes[uniform(4)];
      s.layers.push_back({layer_names[l], in, out, chance(10) ? 1 + uniform(3) : 0, {}});
      in = out;
    }
    static const char* const adapter_names[] = {"default", "other", "third"};
    const int n_adapters = 1 + uniform(3);
    for (int a = 0; a < n_adapters; ++a) {
      AdapterDecl d;
      d.name = adapter_names[a];
      d.r = 1 + uniform(4);
      d.alpha = d.r * (1 + uniform(2));
      for (const auto& l : s.layers)
        if (!chance(25)) d.targets.push_back(l.name);
      if (d.targets.empty()) d.targets.push_back(s.layers[uniform(n_layers)].name);
      d.init = chance(30) ? LoraInit::Zero : LoraInit::Random;
      d.inference_mode = a > 0 && chance(10);
      d.deferred = a > 0 && chance(15);
      s.adapters.push_back(d);
    }
    static const Raf rafs[] = {Raf::True, Raf::False, Raf::None};
    for (const auto& l : s.layers)
      if (chance(60)) s.shards.push_back({{l.name}, rafs[uniform(3)], {}});
    s.shards.push_back({{"root"}, rafs[uniform(3)], {}});
    s.optimizer = chance(20) ? OptimizerParams::AllLora : OptimizerParams::Trainable;
    share_experts_targets(s);
    if (chance(12)) {
      s.loading = Loading::RamEfficient;
      s.dtype = chance(30) ? DType::F32 : DType::BF16;
      s.autocast_adapter_dtype = chance(40);
    }
    return s;
  });
}

rc::Gen<std::vector<Op>> preamble(const Scenario& s) {
  return rc::gen::exec([s] {
    std::vector<Op> ops;
    if (s.loading != Loading::RamEfficient && !chance(10)) return ops;
    AdapterSet present;
    for (size_t a = 0; a < s.adapters.size(); ++a)
      if (!s.adapters[a].deferred) present.insert(static_cast<int>(a));
    return ops_before_prepare(s, [](uint32_t percent) { return chance(static_cast<int>(percent)); }, &present);
  });
}

namespace {
struct NoSut {
  void run(const Op&) {}
};
}  // namespace

rc::Gen<SeqFile> seq_file(int world) {
  return rc::gen::exec([world] {
    SeqFile f;
    f.scenario = *scenario(world);
    f.ops = *preamble(f.scenario);
    OpRules rules(f, after_prepare_kinds(), true);
    auto cmds = *rc::gen::scale(0.15, rc::state::gen::commands(rules, op_commands<NoSut>()));
    for (const auto& c : cmds) f.ops.push_back(static_cast<const OpCommand<NoSut>&>(*c).op);
    return f;
  });
}

}  // namespace rcgen
}  // namespace fsdpsim
