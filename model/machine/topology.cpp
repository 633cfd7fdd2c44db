#include "model/machine/topology.hpp"

#include <algorithm>
#include <stdexcept>
#include <string_view>

#include "model/vocab/model_lowering.hpp"

namespace fsdpsim {

namespace {
// The policy's forward casts (torch _fsdp_api.py::MixedPrecisionPolicy: cast_forward_inputs
// defaults to true, output_dtype to None).
void set_forward_casts(GroupInfo& g, const MixedPrecision& mp) {
  g.mp_output = mp.output_dtype;
  g.mp_cast_inputs = mp.cast_forward_inputs.value_or(true);
}
}  // namespace

int Topology::group_index(const std::string& module) const {
  for (size_t g = 0; g < groups.size(); ++g) {
    if (module == "root" ? groups[g].is_root : false) return static_cast<int>(g);
    if (!groups[g].is_root && groups[g].name == module) return static_cast<int>(g);  // a model scenario's unit path
    for (int l : groups[g].layers)
      if (!groups[g].is_root && layers[l].name == module) return static_cast<int>(g);
  }
  return -1;
}

int Topology::layer_index(const std::string& name) const {
  for (size_t l = 0; l < layers.size(); ++l)
    if (layers[l].name == name) return static_cast<int>(l);
  return -1;
}

// accelerate 1.15 utils/fsdp_utils.py::fsdp2_prepare_model makes its auto-wrap units (one layer each, in layer
// order), then the input embedding's unit and its tail fully_shard([final norm, output embedding]); the upstream
// backend maps a scenario onto them (prepare.py::Units): a checkpointed child is the embedding, or else the tail
// alone; one group is the tail. Anything else takes the direct fully_shard path.
bool prepare_by_accelerate(const Scenario& s) {
  if (s.shards.empty() || !s.shards.back().is_root()) return false;
  std::vector<const ShardDecl*> children, groups, wrapped, autowrap;
  for (size_t d = 0; d + 1 < s.shards.size(); ++d) {
    const ShardDecl& sd = s.shards[d];
    if (sd.is_root() || !sd.mp.empty()) return false;
    children.push_back(&sd);
    if (sd.modules.size() > 1) groups.push_back(&sd);
    else if (s.checkpointed(sd.modules[0])) wrapped.push_back(&sd);
    else autowrap.push_back(&sd);
  }
  std::stable_sort(autowrap.begin(), autowrap.end(),
                   [&](auto* a, auto* b) { return s.layer_index(a->modules[0]) < s.layer_index(b->modules[0]); });
  std::vector<const ShardDecl*> rest(wrapped.size() > 1 ? wrapped.begin() + 1 : wrapped.end(), wrapped.end());
  rest.insert(rest.end(), groups.begin(), groups.end());
  const ShardDecl* tail = rest.size() == 1 ? rest[0] : nullptr;
  const bool norm_clash = tail && tail->modules.size() > 1 &&
      std::any_of(autowrap.begin(), autowrap.end(), [](auto* d) { return d->modules[0].find("Norm") != std::string::npos; });
  if (groups.size() > 1 || norm_clash || wrapped.size() + groups.size() > 2) return false;
  std::vector<const ShardDecl*> order = autowrap;
  if (!wrapped.empty()) order.push_back(wrapped[0]);
  if (tail) order.push_back(tail);
  return order == children && s.shards.back().mp.empty();
}

Topology compile_topology(const Scenario& s, int wrapped, std::vector<int> order) {
  if (order.empty())
    for (size_t a = 0; a < s.adapters.size(); ++a) order.push_back(static_cast<int>(a));
  Topology t;
  t.loading = s.loading;
  t.dtype = s.dtype;
  t.autocast_adapter_dtype = s.autocast_adapter_dtype;
  t.mp_upcast = !s.mp.empty();
  t.mixed_precision = s.mixed_precision();
  t.data = s.data;
  t.generate_skips_root = s.model.has_value();
  t.loss_in_root = s.model.has_value();  // fsdpsim_upstream model_scenario.py::loss: pm(input_ids=x, labels=x).loss
  t.world = s.world;
  t.params4bit = s.quantized() != nullptr;
  t.params4bit_ignored = t.params4bit && prepare_by_accelerate(s);
  // accelerate 1.15 utils/fsdp_utils.py::fsdp2_prepare_model: no fp32 upcast when the model has a Params4bit.
  t.mp_upcast = t.mp_upcast && !t.params4bit;
  t.adapters = s.adapters;
  for (const auto& a : s.adapters) t.adapter_names.emplace_back(a.name);
  t.optimizer = s.optimizer;
  if (wrapped < 0) {
    wrapped = 0;
    for (size_t a = 0; a < s.adapters.size(); ++a)
      if (!s.adapters[a].deferred) wrapped |= 1 << a;
  }
  t.profile = effective_profile(s);
  // Which group claims each layer: fully_shard is bottom-up, the first call that
  // reaches a module claims its parameters; the rest fall to the root
  // (torch/distributed/fsdp/_fully_shard/_fsdp_init.py::_get_managed_states).
  std::vector<int> shard_of_layer(s.layers.size(), -1);
  int root_shard = -1;
  for (size_t d = 0; d < s.shards.size(); ++d) {
    if (s.shards[d].is_root()) root_shard = static_cast<int>(d);
    else
      for (const auto& m : s.shards[d].modules)
        if (s.layer_index(m) >= 0) shard_of_layer[s.layer_index(m)] = static_cast<int>(d);  // a lowered model call's name is no layer
  }
  // Groups in all_states order: the root's state first, then children in module
  // order (torch/distributed/fsdp/_fully_shard/_fsdp_state.py::FSDPState._lazy_init).
  std::vector<int> group_of_shard(s.shards.size(), -1);
  bool root_has_params = false;
  for (size_t l = 0; l < s.layers.size(); ++l) root_has_params |= shard_of_layer[l] < 0;
  auto resolve_raf = [&](const ShardDecl& d, bool root) {
    // The root given none does not reshard after forward (auto rule, torch >= 2.8);
    // force_false mirrors torch <= 2.7, which never resharded the root.
    if (root) {
      if (t.profile.get(Switch::RootReshardRule) == sw::kForceFalse) return false;
      return d.raf == Raf::True;
    }
    return d.raf != Raf::False;
  };
  if (root_has_params && root_shard >= 0) {
    GroupInfo g;
    g.name = Name("root");
    g.is_root = true;
    g.raf = resolve_raf(s.shards[root_shard], true);
    g.mp_param = s.policy_of(s.shards[root_shard]).param_dtype;
    g.mp_reduce = s.policy_of(s.shards[root_shard]).reduce_dtype;
    set_forward_casts(g, s.policy_of(s.shards[root_shard]));
    group_of_shard[root_shard] = 0;
    t.groups.push_back(g);
  }
  for (size_t l = 0; l < s.layers.size(); ++l) {
    int d = shard_of_layer[l];
    if (d < 0 || group_of_shard[d] >= 0) continue;
    GroupInfo g;
    g.name = Name(s.shards[d].modules[0]);
    g.tied_head = s.shards[d].tied_head;
    g.raf = resolve_raf(s.shards[d], false);
    g.mp_param = s.policy_of(s.shards[d]).param_dtype;
    g.mp_reduce = s.policy_of(s.shards[d]).reduce_dtype;
    set_forward_casts(g, s.policy_of(s.shards[d]));
    group_of_shard[d] = static_cast<int>(t.groups.size());
    t.groups.push_back(g);
  }
  // At most a weight, a bias and per adapter two LoRA or two saved-copy tensors per layer: the
  // lists below are sized once.
  const size_t max_params = s.layers.size() * (2 + 3 * s.adapters.size());
  t.params.reserve(max_params);
  t.layers.reserve(s.layers.size());
  t.state_dict_order.reserve(max_params);
  for (GroupInfo& gi : t.groups) gi.params.reserve(max_params), gi.layers.reserve(s.layers.size());
  // Parameter names are joined in one buffer: interning copies each text once per process.
  std::string joined;
  auto dotted = [&](std::string_view a, std::string_view b, std::string_view c = {}) -> std::string_view {
    joined.assign(a).append(b).append(c);
    return joined;
  };
  auto add_param = [&](std::string_view name, ParamKind kind, int layer, int adapter, int dim0, int rest, int group) {
    ParamInfo pi{Name(name), kind, layer, adapter, dim0, rest, group, 0};
    pi.chunk_rows = (dim0 + s.world - 1) / s.world;
    pi.shard_numel = static_cast<int64_t>(pi.chunk_rows) * rest;
    int idx = static_cast<int>(t.params.size());
    t.params.push_back(pi);
    if (group >= 0) {
      t.groups[group].params.push_back(idx);
      t.groups[group].numel += pi.shard_numel;
    }
    return idx;
  };
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerDecl& ld = s.layers[l];
    int d = shard_of_layer[l] >= 0 ? shard_of_layer[l] : root_shard;
    int g = group_of_shard[d];
    LayerInfo li;
    li.name = Name(ld.name);
    li.experts = ld.experts;
    li.fan_in = ld.in;
    li.fan_out = ld.out;
    li.checkpoint = s.checkpointed(ld.name);
    li.quant = ld.quant;
    li.compute_dtype = ld.compute_dtype;
    li.group = g;
    li.A.fill(-1);
    li.B.fill(-1);
    li.M.fill(-1);
    GroupInfo& gi = t.groups[g];
    gi.layers.push_back(static_cast<int>(l));
    if (gi.first_layer < 0) gi.first_layer = static_cast<int>(l);
    gi.last_layer = static_cast<int>(l);
    // Registration order of a LoRA Linear: base_layer.weight, base_layer.bias,
    // lora_A.<each adapter>, lora_B.<each adapter> (peft/tuners/lora/layer.py::LoraLayer).
    // A ParamWrapper target is one (E, in, out) parameter; its lora_A is
    // Linear(in, r*E) and lora_B Linear(r*E, out) (peft/tuners/lora/layer.py::ParamWrapper).
    const int E = ld.experts;
    li.SW.fill(-1);
    li.SB.fill(-1);
    li.saved_module = s.saved_module(ld.name);
    if (E > 0) {
      li.weight = add_param(dotted(ld.name, ".weight"), ParamKind::Weight, static_cast<int>(l), -1, E, ld.in * ld.out, g);
    } else if (li.saved_module) {
      // peft/utils/other.py::ModulesToSaveWrapper: original_module first, then the
      // modules_to_save ModuleDict with one deep copy per adapter, in injection order.
      li.weight = add_param(original_module_name(ld.name, "weight"), ParamKind::Weight, static_cast<int>(l), -1, ld.out, ld.in, g);
      li.bias = add_param(original_module_name(ld.name, "bias"), ParamKind::Bias, static_cast<int>(l), -1, ld.out, 1, g);
      for (int a : order) {
        if (!s.adapters[a].saves(ld.name)) continue;
        const int ga = ((wrapped >> a) & 1) ? g : -1;
        li.SW[a] = add_param(saved_copy_name(ld.name, s.adapters[a].name, "weight"), ParamKind::SavedWeight, static_cast<int>(l), a, ld.out, ld.in, ga);
        li.SB[a] = add_param(saved_copy_name(ld.name, s.adapters[a].name, "bias"), ParamKind::SavedBias, static_cast<int>(l), a, ld.out, 1, ga);
      }
    } else if (ld.quant) {
      // bitsandbytes Params4bit: two 4-bit codes a byte, stored (in*out/2, 1); a direct fully_shard
      // shards those bytes along dim 0, accelerate leaves it whole (its ignored_params).
      li.weight = add_param(dotted(ld.name, ".weight"), ParamKind::Weight, static_cast<int>(l), -1, (ld.in * ld.out + 1) / 2, 1,
                            t.params4bit_ignored ? -1 : g);
      li.bias = add_param(dotted(ld.name, ".bias"), ParamKind::Bias, static_cast<int>(l), -1, ld.out, 1, g);
    } else {
      // A model scenario's module (model_lowering.hpp): a Conv1D stores its weight (in, out), so
      // FSDP2's Shard(0) splits its input rows; llama's projections and norms have no bias.
      const ModuleShape shape = module_shape(s, ld.name);
      li.conv1d = shape.transposed;
      li.weight = shape.transposed ? add_param(dotted(ld.name, ".weight"), ParamKind::Weight, static_cast<int>(l), -1, ld.in, ld.out, g)
                                   : add_param(dotted(ld.name, ".weight"), ParamKind::Weight, static_cast<int>(l), -1, ld.out, ld.in, g);
      if (shape.bias) li.bias = add_param(dotted(ld.name, ".bias"), ParamKind::Bias, static_cast<int>(l), -1, ld.out, 1, g);
      li.sharded_call_op = shape.sharded_call_op;
    }
    const int fan = E > 0 ? E : 1;
    auto targets = [&](const AdapterDecl& a) {
      for (const auto& n : a.targets)
        if (n == ld.name) return true;
      return false;
    };
    for (size_t a = 0; a < s.adapters.size(); ++a)
      if (targets(s.adapters[a]))
        li.A[a] = add_param(dotted(ld.name, ".lora_A.", s.adapters[a].name), ParamKind::LoraA, static_cast<int>(l),
                            static_cast<int>(a), s.adapters[a].r * fan, ld.in, ((wrapped >> a) & 1) ? g : -1);
    for (size_t a = 0; a < s.adapters.size(); ++a)
      if (targets(s.adapters[a]))
        li.B[a] = add_param(dotted(ld.name, ".lora_B.", s.adapters[a].name), ParamKind::LoraB, static_cast<int>(l),
                            static_cast<int>(a), ld.out, s.adapters[a].r * fan, ((wrapped >> a) & 1) ? g : -1);
    // peft/tuners/lora/variants.py::DoraLinearVariant.init: the lora_magnitude_vector ModuleDict is
    // registered after lora_A and lora_B; one (out,) vector per DoRA adapter, in injection order.
    for (size_t a = 0; a < s.adapters.size(); ++a)
      if (targets(s.adapters[a]) && s.adapters[a].use_dora)
        li.M[a] = add_param(dotted(ld.name, ".lora_magnitude_vector.", s.adapters[a].name), ParamKind::LoraM, static_cast<int>(l),
                            static_cast<int>(a), ld.out, 1, ((wrapped >> a) & 1) ? g : -1);
    t.layers.push_back(li);
  }
  // Parameters are listed in file order, but a group packs its members in
  // named_parameters order, where lora_A/lora_B keep injection order
  // (torch _fsdp_init.py::_get_managed_states over peft's ModuleDicts), module by module in the
  // order fully_shard([...]) was given them (_fsdp_init.py::_get_managed_modules), not layer order.
  for (size_t g = 0; g < t.groups.size(); ++g) {
    GroupInfo& gi = t.groups[g];
    const auto d = std::find(group_of_shard.begin(), group_of_shard.end(), static_cast<int>(g)) - group_of_shard.begin();
    const std::vector<int> packing = gi.is_root ? gi.layers : s.packing_order(s.shards[d]);
    std::vector<int> members;
    members.reserve(gi.params.size());
    for (int l : packing) {
      const LayerInfo& li = t.layers[l];
      for (int p : {li.weight, li.bias})
        if (p >= 0 && t.params[p].group >= 0) members.push_back(p);  // an ignored 4-bit weight has none
      for (const auto* side : {&li.A, &li.B, &li.M})
        for (int a : order)
          if ((*side)[a] >= 0 && t.params[(*side)[a]].group >= 0) members.push_back((*side)[a]);
      for (int a : order)
        for (int p : {li.SW[a], li.SB[a]})
          if (p >= 0 && t.params[p].group >= 0) members.push_back(p);
    }
    gi.params = std::move(members);
  }
  // Only experts layers have target_parameters.
  const bool experts = std::any_of(s.layers.begin(), s.layers.end(), [](const LayerDecl& l) { return l.experts > 0; });
  for (size_t a = 0; a < s.adapters.size(); ++a)
    t.target_parameters.push_back(experts ? target_parameters_text(s, static_cast<int>(a)) : std::string());
  // state_dict() walks the same modules: per layer its base, then lora_A and
  // lora_B in injection order (torch nn/modules/module.py::Module._save_to_state_dict).
  for (const LayerInfo& li : t.layers) {
    for (int p : {li.weight, li.bias})
      if (p >= 0) t.state_dict_order.push_back(p);
    for (const auto* side : {&li.A, &li.B, &li.M})
      for (int a : order)
        if ((*side)[a] >= 0) t.state_dict_order.push_back((*side)[a]);
    for (int a : order)
      for (int p : {li.SW[a], li.SB[a]})
        if (p >= 0) t.state_dict_order.push_back(p);
  }
  // Units nested in units (model scenarios only: a `layer` name has no dots): FSDP2's hooks are
  // per module, so an enclosing unit's pre-forward runs as its module is called, before a nested
  // unit's, and its post-forward once the module returns (torch _fully_shard/_fsdp_state.py::
  // FSDPState._pre_forward / _post_forward, registered on each fully_shard module).
  for (GroupInfo& gi : t.groups) {
    gi.span_last = gi.tied_head ? static_cast<int>(t.layers.size()) : gi.last_layer;
    if (gi.is_root) continue;
    for (size_t l = 0; l < t.layers.size(); ++l)
      if (under_module(t.layers[l].name, gi.name)) gi.span_last = std::max(gi.span_last, static_cast<int>(l));
    for (size_t h = 0; h < t.groups.size(); ++h) {
      const GroupInfo& outer = t.groups[h];
      if (outer.is_root || outer.name == gi.name || !under_module(gi.name, outer.name)) continue;
      if (gi.parent < 0 || outer.name.size() > t.groups[gi.parent].name.size()) gi.parent = static_cast<int>(h);
    }
  }
  std::vector<int> span_first(t.groups.size()), depth(t.groups.size(), 0);
  for (size_t g = 0; g < t.groups.size(); ++g) {
    t.states_order.push_back(static_cast<int>(g));
    span_first[g] = t.groups[g].is_root ? -1 : t.groups[g].first_layer;
  }
  for (size_t g = 0; g < t.groups.size(); ++g) {
    for (int a = t.groups[g].parent; a >= 0; a = t.groups[a].parent) {
      ++depth[g];
      span_first[a] = std::min(span_first[a], t.groups[g].first_layer);
    }
  }
  std::stable_sort(t.states_order.begin(), t.states_order.end(),
                   [&](int a, int b) { return span_first[a] != span_first[b] ? span_first[a] < span_first[b] : depth[a] < depth[b]; });
  const std::string tied = tied_head_source(s);
  if (!tied.empty() && s.layer_index(tied) >= 0) t.tied_head_param = t.layers[s.layer_index(tied)].weight;
  return t;
}

namespace {
// What compile_topology(SeqFile) reads of a file.
struct CompileKey {
  Scenario scenario;
  uint8_t wrapped = 0, injected = 0;
  std::vector<int> order;
  bool explicit_prepare = false;
  bool same(const SeqFile& f, uint8_t w, uint8_t inj, const std::vector<int>& ord, bool explicit_prep) const {
    return w == wrapped && inj == injected && explicit_prep == explicit_prepare && ord == order && f.scenario == scenario;
  }
};
}  // namespace

namespace {
// compile_topology(f) given what its ops bring into the model at prepare.
Topology compile_file(const SeqFile& f, const AdaptersAtPrepare& at) {
  Topology t = compile_topology(f.scenario, at.wrapped, at.order);
  t.explicit_prepare = prepare_index(f) >= 0;
  // peft/tuners/tuners_utils.py::BaseTuner.inject_adapter replaces a module not yet a
  // LoRA layer by one whose base_layer is that module (here the FSDP module).
  for (LayerInfo& li : t.layers) {
    // A ModulesToSaveWrapper is made at get_peft_model, before fully_shard: it is the FSDP module.
    if (t.groups[li.group].is_root || li.saved_module) continue;
    bool early = false;
    for (int a = 0; a < t.n_adapters(); ++a) early = early || (li.A[a] >= 0 && ((at.injected >> a) & 1));
    (li.experts > 0 ? li.wrapper_after_fsdp : li.lora_after_fsdp) = !early;
  }
  return t;
}
}  // namespace

const Topology& compile_topology_reused(const SeqFile& f) {
  thread_local CompileKey key;
  thread_local Topology topo;
  thread_local bool valid = false;
  AdaptersAtPrepare at = adapters_at_prepare(f);
  const bool explicit_prepare = prepare_index(f) >= 0;
  if (valid && key.same(f, at.wrapped, at.injected, at.order, explicit_prepare)) return topo;
  valid = false;  // a compile that throws leaves none kept
  topo = compile_file(f, at);
  key.scenario = f.scenario;
  key.wrapped = at.wrapped, key.injected = at.injected, key.order = std::move(at.order), key.explicit_prepare = explicit_prepare;
  valid = true;
  return topo;
}

Topology compile_topology(const SeqFile& f) { return compile_file(f, adapters_at_prepare(f)); }

bool has_padding_only_rank(const Topology& t) {
  for (const auto& p : t.params)
    if (p.group >= 0 && !p.rows_on(t.world - 1)) return true;  // the last rank is the first to run out of rows
  return false;
}

}  // namespace fsdpsim
