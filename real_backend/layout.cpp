#include "real_backend/layout.hpp"

#include <stdexcept>

namespace fsdpsim::real {

int Layout::group_of_module(const std::string& module) const {
  for (size_t g = 0; g < groups.size(); ++g) {
    if (module == "root") {
      if (groups[g].is_root) return static_cast<int>(g);
      continue;
    }
    if (groups[g].is_root) continue;
    for (int l : groups[g].layers)
      if (layers[l].name == module) return static_cast<int>(g);
  }
  return -1;
}

int Layout::layer_named(const std::string& name) const {
  for (size_t l = 0; l < layers.size(); ++l)
    if (layers[l].name == name) return static_cast<int>(l);
  return -1;
}

int Layout::adapter_named(const std::string& name) const {
  for (size_t a = 0; a < adapters.size(); ++a)
    if (adapters[a].name == name) return static_cast<int>(a);
  return -1;
}

namespace {
// torch _fsdp_api.py::MixedPrecisionPolicy as that fully_shard call got it (cast_forward_inputs
// defaults to true, every dtype to None).
void set_policy(GroupSpec& g, const MixedPrecision& mp) {
  g.mp_param = mp.param_dtype;
  g.mp_reduce = mp.reduce_dtype;
  g.mp_output = mp.output_dtype;
  g.mp_cast_inputs = mp.cast_forward_inputs.value_or(true);
}
}  // namespace

Layout make_layout(const SeqFile& f) {
  const Scenario& s = f.scenario;
  Layout out;
  out.world = s.world;
  out.adapters = s.adapters;
  out.optimizer = s.optimizer;
  out.data = s.data;
  out.loading = s.loading;
  out.dtype = s.dtype;
  out.autocast_adapter_dtype = s.autocast_adapter_dtype;
  out.mp_upcast = !s.mp.empty();
  out.mixed_precision = s.mixed_precision();
  out.explicit_prepare = prepare_index(f) >= 0;
  out.wrapped = wrapped_at_prepare(f);
  const std::vector<int> order = adapter_order_at_prepare(f);  // ModuleDict insertion order
  out.profile = effective_profile(s);
  // fully_shard claims the parameters of the modules it is given that no earlier
  // (lower) call claimed; what is left belongs to the root's call.
  std::vector<const ShardDecl*> owner(s.layers.size(), nullptr);
  const ShardDecl* root = nullptr;
  for (const auto& d : s.shards) {
    if (d.is_root()) {
      root = &d;
      continue;
    }
    for (const auto& m : d.modules) {
      int l = s.layer_index(m);
      if (!owner[l]) owner[l] = &d;
    }
  }
  bool root_claims = false;
  for (const auto* o : owner) root_claims |= o == nullptr;
  const bool legacy_root = out.profile.get(Switch::RootReshardRule) == sw::kForceFalse;
  std::vector<std::pair<const ShardDecl*, int>> group_of_decl;
  auto group_for = [&](const ShardDecl* d) {
    for (const auto& [decl, g] : group_of_decl)
      if (decl == d) return g;
    return -1;
  };
  if (root && root_claims) {
    GroupSpec g;
    g.name = "root";
    g.is_root = true;
    // The root's None means "keep the parameters gathered after forward"; torch
    // <= 2.7 forced that whatever was passed.
    g.reshard_after_forward = !legacy_root && root->raf == Raf::True;
    set_policy(g, s.policy_of(*root));
    group_of_decl.push_back({root, 0});
    out.groups.push_back(g);
  }
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const ShardDecl* d = owner[l];
    if (!d || group_for(d) >= 0) continue;
    GroupSpec g;
    g.name = d->modules.front();
    g.reshard_after_forward = d->raf != Raf::False;  // None on a non-root means True
    set_policy(g, s.policy_of(*d));
    group_of_decl.push_back({d, static_cast<int>(out.groups.size())});
    out.groups.push_back(g);
  }
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerDecl& decl = s.layers[l];
    int g = group_for(owner[l] ? owner[l] : root);
    LayerSpec ls;
    ls.name = decl.name;
    ls.in = decl.in;
    ls.out = decl.out;
    ls.experts = decl.experts;
    ls.checkpoint = s.checkpointed(decl.name);
    ls.group = g;
    ls.lora_a.assign(s.adapters.size(), -1);
    ls.lora_b.assign(s.adapters.size(), -1);
    ls.lora_m.assign(s.adapters.size(), -1);
    ls.saved_w.assign(s.adapters.size(), -1);
    ls.saved_b.assign(s.adapters.size(), -1);
    ls.saved_module = s.saved_module(decl.name);
    GroupSpec& gs = out.groups[g];
    gs.layers.push_back(static_cast<int>(l));
    if (gs.first_layer < 0) gs.first_layer = static_cast<int>(l);
    gs.last_layer = static_cast<int>(l);
    auto add = [&](std::string name, Role role, int adapter, int64_t rows, int64_t cols, bool managed) {
      ParamSpec p{std::move(name), role, static_cast<int>(l), adapter, rows, cols, managed ? g : -1, 0};
      p.chunk_rows = (rows + s.world - 1) / s.world;
      int idx = static_cast<int>(out.params.size());
      if (managed) {
        gs.params.push_back(idx);
        gs.numel += p.chunk_numel();
      }
      out.params.push_back(p);
      return idx;
    };
    // A ParamWrapper target (lora/layer.py::ParamWrapper): one (E, in, out)
    // parameter, FSDP2 shards its dim 0 (experts); lora_A (r*E, in), lora_B (out, r*E).
    const int64_t E = decl.experts;
    if (E > 0) {
      ls.weight = add(decl.name + ".weight", Role::Weight, -1, E, int64_t{decl.in} * decl.out, true);
    } else if (ls.saved_module) {
      // peft/utils/other.py::ModulesToSaveWrapper registers original_module, then the
      // modules_to_save ModuleDict: one deep copy per adapter, in injection order.
      ls.weight = add(original_module_name(decl.name, "weight"), Role::Weight, -1, decl.out, decl.in, true);
      ls.bias = add(original_module_name(decl.name, "bias"), Role::Bias, -1, decl.out, 1, true);
      for (int a : order) {
        if (!s.adapters[a].saves(decl.name)) continue;
        const bool managed = (out.wrapped >> a) & 1;
        ls.saved_w[a] = add(saved_copy_name(decl.name, s.adapters[a].name, "weight"), Role::SavedWeight, a, decl.out, decl.in, managed);
        ls.saved_b[a] = add(saved_copy_name(decl.name, s.adapters[a].name, "bias"), Role::SavedBias, a, decl.out, 1, managed);
      }
    } else {
      ls.weight = add(decl.name + ".weight", Role::Weight, -1, decl.out, decl.in, true);
      ls.bias = add(decl.name + ".bias", Role::Bias, -1, decl.out, 1, true);
    }
    const int64_t rank_mult = E > 0 ? E : 1;
    auto targets = [&](const AdapterDecl& a) {
      for (const auto& t : a.targets)
        if (t == decl.name) return true;
      return false;
    };
    // LoraLayer registers lora_A (a ModuleDict over adapters) before lora_B.
    for (size_t a = 0; a < s.adapters.size(); ++a)
      if (targets(s.adapters[a]))
        ls.lora_a[a] = add(decl.name + ".lora_A." + s.adapters[a].name, Role::LoraA, static_cast<int>(a),
                           s.adapters[a].r * rank_mult, decl.in, (out.wrapped >> a) & 1);
    for (size_t a = 0; a < s.adapters.size(); ++a)
      if (targets(s.adapters[a]))
        ls.lora_b[a] = add(decl.name + ".lora_B." + s.adapters[a].name, Role::LoraB, static_cast<int>(a), decl.out,
                           s.adapters[a].r * rank_mult, (out.wrapped >> a) & 1);
    // peft/tuners/lora/variants.py::DoraLinearVariant.init: the lora_magnitude_vector ModuleDict is
    // registered after lora_A and lora_B, one (out,) vector per DoRA adapter (stored 1-D like a bias).
    for (size_t a = 0; a < s.adapters.size(); ++a)
      if (targets(s.adapters[a]) && s.adapters[a].use_dora)
        ls.lora_m[a] = add(decl.name + ".lora_magnitude_vector." + s.adapters[a].name, Role::LoraM, static_cast<int>(a), decl.out, 1,
                           (out.wrapped >> a) & 1);
    out.layers.push_back(ls);
  }
  // A group packs its members in named_parameters order: lora_A/lora_B are
  // ModuleDicts in injection order (torch _fsdp_init.py::_get_managed_states), module by module
  // in the order fully_shard([...]) was given them (Scenario::packing_order).
  for (const auto& [decl, g] : group_of_decl) {
    GroupSpec& gs = out.groups[g];
    std::vector<int> members;
    for (int l : gs.is_root ? gs.layers : s.packing_order(*decl)) {
      const LayerSpec& ls = out.layers[l];
      for (int p : {ls.weight, ls.bias})
        if (p >= 0) members.push_back(p);
      for (const auto* side : {&ls.lora_a, &ls.lora_b, &ls.lora_m})
        for (int a : order)
          if ((*side)[a] >= 0 && out.params[(*side)[a]].group >= 0) members.push_back((*side)[a]);
      for (int a : order)
        for (int p : {ls.saved_w[a], ls.saved_b[a]})
          if (p >= 0 && out.params[p].group >= 0) members.push_back(p);
    }
    gs.params = members;
  }
  for (size_t a = 0; a < s.adapters.size(); ++a) out.target_parameters.push_back(target_parameters_text(s, static_cast<int>(a)));
  // peft/tuners/tuners_utils.py::BaseTuner.inject_adapter wraps a module that is not yet a
  // LoRA layer, here a module fully_shard already made an FSDP module.
  const uint32_t injected = injected_before_prepare(f);
  for (LayerSpec& ls : out.layers) {
    if (out.groups[ls.group].is_root) continue;
    bool early = false;
    for (size_t a = 0; a < ls.lora_a.size(); ++a) early = early || (ls.lora_a[a] >= 0 && ((injected >> a) & 1));
    // A ModulesToSaveWrapper exists before fully_shard (its adapters are never deferred): it is
    // the FSDP module itself.
    (ls.experts > 0 ? ls.wrapper_after_fsdp : ls.lora_after_fsdp) = !early && !ls.saved_module;
  }
  // state_dict() order: per layer the base, then lora_A and lora_B in injection
  // order, then the modules_to_save copies (torch nn/modules/module.py::Module.state_dict
  // over the ModuleDicts).
  for (const LayerSpec& ls : out.layers) {
    for (int p : {ls.weight, ls.bias})
      if (p >= 0) out.state_dict_order.push_back(p);
    for (const auto* side : {&ls.lora_a, &ls.lora_b, &ls.lora_m})
      for (int a : order)
        if ((*side)[a] >= 0) out.state_dict_order.push_back((*side)[a]);
    for (int a : order)
      for (int p : {ls.saved_w[a], ls.saved_b[a]})
        if (p >= 0) out.state_dict_order.push_back(p);
  }
  return out;
}

std::vector<int64_t> param_shape(const Layout& l, const ParamSpec& p, int64_t rows) {
  if (p.role == Role::Bias || p.role == Role::SavedBias || p.role == Role::LoraM) return {rows};
  const LayerSpec& ls = l.layers[p.layer];
  if (p.role == Role::Weight && ls.experts > 0) return {rows, ls.in, ls.out};
  return {rows, p.cols};
}

}  // namespace fsdpsim::real
