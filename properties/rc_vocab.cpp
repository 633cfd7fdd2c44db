#include "properties/rc_vocab.hpp"

#include <algorithm>

#include <rapidcheck/GenerationFailure.h>

#include "sim/core/generator.hpp"

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

// The generator's weight of each kind (weighted_op_kind over its whole range).
const std::vector<uint32_t>& kind_weights() {
  static const std::vector<uint32_t> w = [] {
    std::vector<uint32_t> v(kOpKindCount, 0);
    for (uint32_t x = 0; x < kOpWeightTotal; ++x) ++v[static_cast<int>(weighted_op_kind(x))];
    return v;
  }();
  return w;
}

// Whether a kind can be drawn at all in this state (its names come after).
bool possible(const OpModel& m, OpKind k) {
  return (m.allowed & kind_bit(k)) && kind_weights()[static_cast<int>(k)] > 0 && m.rules.possible(k);
}

std::string present_name(const OpModel& m) {
  std::vector<int> v;
  for (int a : m.rules.present()) v.push_back(a);
  return m.scenario->adapters[v[uniform(static_cast<int>(v.size()))]].name;
}

// The names an op of kind k takes, as the generator draws them.
void draw_names(const OpModel& m, Op& op) {
  const Scenario& s = *m.scenario;
  switch (op.kind) {
    case OpKind::SetAdapter:
      if (m.list_set_adapter && m.rules.present().count() > 1 && chance(15)) {
        op.list_form = true;
        for (int a : m.rules.present())
          if (chance(60)) op.names.push_back(s.adapters[a].name);
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
      std::vector<int> v = m.rules.addable();
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
        std::vector<std::string> mods = OpRules::shard_modules(s);
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

OpModel::OpModel(const SeqFile& f, KindMask allowed_kinds, bool may_rank)
    : scenario(std::make_shared<const Scenario>(f.scenario)),
      allowed(allowed_kinds),
      ranked(may_rank && f.scenario.world > 1),
      rules(f.scenario) {
  for (const auto& o : f.ops) apply(o);
}

bool OpModel::legal(const Op& op) const {
  return possible(*this, op.kind) && OpRules::rank_legal(*scenario, op, ranked) && (list_set_adapter || !op.list_form) &&
         rules.names_legal(*scenario, op);
}

void OpModel::apply(const Op& op) { rules.apply(*scenario, op); }

rc::Gen<Op> op(const OpModel& model) {
  return rc::gen::exec([model] {
    std::vector<OpKind> ks;
    std::vector<uint32_t> ws;
    uint32_t total = 0;
    for (int k = 0; k < kOpKindCount; ++k)
      if (possible(model, static_cast<OpKind>(k))) {
        ks.push_back(static_cast<OpKind>(k));
        ws.push_back(total += kind_weights()[k]);
      }
    if (ks.empty()) throw rc::GenerationFailure("no op kind is legal here");
    const uint32_t x = static_cast<uint32_t>(*rc::gen::resize(100, rc::gen::inRange<int64_t>(0, total)));
    Op o;
    o.kind = ks[std::upper_bound(ws.begin(), ws.end(), x) - ws.begin()];
    draw_names(model, o);
    if (model.ranked && OpRules::rank_safe(o.kind) && chance(6)) o.rank = uniform(model.scenario->world);
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
    OpModel model(f, after_prepare_kinds(), true);
    auto cmds = *rc::gen::scale(0.15, rc::state::gen::commands(model, op_commands<NoSut>()));
    for (const auto& c : cmds) f.ops.push_back(static_cast<const OpCommand<NoSut>&>(*c).op);
    return f;
  });
}

}  // namespace rcgen
}  // namespace fsdpsim
