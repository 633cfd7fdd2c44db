#include "model/vocab/model_lowering.hpp"

#include <algorithm>

#include "model/vocab/module_tree.hpp"
#include "model/vocab/source_error.hpp"
#include "model/vocab/text.hpp"

namespace fsdpsim {

bool under_module(const std::string& name, const std::string& path) {
  return name == path || (name.size() > path.size() && name.compare(0, path.size() + 1, path + ".") == 0);
}

namespace {

// The module's own parameters (not its children's): "<module>.<leaf>" with no further dot.
std::vector<const TreeParam*> own_params(const ModuleTree& tree, const std::string& module) {
  std::vector<const TreeParam*> out;
  for (const auto& p : tree.params)
    if (p.name.size() > module.size() + 1 && p.name.compare(0, module.size() + 1, module + ".") == 0 &&
        p.name.find('.', module.size() + 1) == std::string::npos)
      out.push_back(&p);
  return out;
}

// One module that owns parameters as a layer, in/out as the LoRA layer PEFT puts on it sees them
// (lora_A (r, in), lora_B (out, r)): a Linear's weight is (out, in), a Conv1D's (in, out), an
// Embedding's (num_embeddings, dim), a norm's (dim,) (one input).
LayerDecl layer_of(const TreeModule& m, const std::vector<const TreeParam*>& params, SourcePos pos) {
  LayerDecl l;
  l.name = m.name;
  l.pos = pos;
  for (const TreeParam* p : params) {
    if (p->name.substr(m.name.size() + 1) != "weight") continue;
    if (p->shape.size() == 1) l.out = p->shape[0], l.in = 1;
    else if (m.kind == ModuleKind::Conv1D) l.in = p->shape[0], l.out = p->shape[1];
    else l.out = p->shape[0], l.in = p->shape[1];
  }
  return l;
}

}  // namespace

std::string lower_model(Scenario& s, SourcePos* at) {
  const ModelDecl& md = *s.model;
  std::string why;  // the first refusal; the lowering goes on as far as it can (the parser's names)
  auto fail = [&](SourcePos p, const std::string& what) {
    if (why.empty()) why = what, *at = p;
  };
  if (md.family == Family::Qwen2Moe)
    fail(md.pos, "qwen2_moe is parsed (`fsdpsim scenario --tree FILE` prints it) but not run yet: its experts are 3-D "
                 "parameters the model does not lower (docs/design/known-limits.md); run llama, qwen2, mistral or gpt2");
  if (s.plan == ShardPlan::LoraModules)
    fail(s.plan_pos, "fully_shard_plan lora_modules (each LoRA submodule its own unit) is not run yet "
                     "(docs/design/known-limits.md); use fully_shard_plan transformer_layers or fully_shard lines");
  const ModuleTree tree = module_tree(md);
  for (auto& a : s.adapters) a.targets = resolve_targets(tree, a.targets).modules;  // the parser refused what does not resolve
  // Every module that owns a parameter, in module order (named_parameters() order). A tied output
  // head owns none of its own: its weight is the input embedding's one Parameter, packed where that is.
  s.layers.clear();
  for (const auto& m : tree.modules) {
    const auto params = own_params(tree, m.name);
    if (m.name.empty() || params.empty()) continue;
    const bool tied = std::any_of(params.begin(), params.end(), [](const TreeParam* p) { return !p->tied_to.empty(); });
    if (tied) {
      for (const auto& a : s.adapters)
        if (std::find(a.targets.begin(), a.targets.end(), m.name) != a.targets.end())
          fail(a.pos, "adapter '" + a.name + "' targets '" + m.name + "', whose weight is tied to " + params[0]->tied_to +
                          ": a LoRA layer on a tied output head is not modelled yet (docs/design/known-limits.md)");
      continue;
    }
    s.layers.push_back(layer_of(m, params, md.pos));
  }
  if (s.layers.size() > static_cast<size_t>(kMaxModelModules))
    fail(md.pos, "this model has " + std::to_string(s.layers.size()) + " modules with parameters; at most " +
                     std::to_string(kMaxModelModules) + " are supported (fewer layers=)");
  // Each fully_shard call claims the layers under its paths that no earlier call claimed (calls go
  // bottom-up: torch _fsdp_init.py::_get_managed_states skips what a nested FSDP module manages).
  if (s.plan == ShardPlan::TransformerLayers) {
    // accelerate 1.15 utils/fsdp_utils.py::fsdp2_prepare_model with transformer_based_wrap, as
    // measured (docs/design/known-limits.md#real-models): each decoder layer, then the input
    // embedding's own unit where it is not tied, then the tail fully_shard([final norm (gpt2's
    // ln_f; llama's model.norm is not a child _find_final_norm sees), tied input embedding,
    // output head], reshard_after_forward=False), then the root.
    s.shards.clear();
    auto unit = [&](std::vector<std::string> paths, Raf raf) {
      ShardDecl sd;
      sd.modules = std::move(paths);
      sd.raf = raf;
      sd.pos = s.plan_pos;
      s.shards.push_back(sd);
    };
    std::string embedding;
    for (const auto& m : tree.modules)
      if (m.kind == ModuleKind::Embedding) {
        embedding = m.name;  // get_input_embeddings(): the token embedding, the tree's first Embedding
        break;
      }
    for (const auto& d : tree.decoder_layers) unit({d}, Raf::None);
    if (!md.tie_embeddings) unit({embedding}, Raf::None);
    std::vector<std::string> tail;
    if (md.family == Family::Gpt2) tail.push_back("transformer.ln_f");
    if (md.tie_embeddings) tail.push_back(embedding);
    tail.push_back(tree.output_head);
    unit(tail, Raf::False);
    unit({"root"}, Raf::None);
  }
  std::vector<bool> claimed(s.layers.size(), false);
  for (auto& d : s.shards) {
    if (d.is_root()) continue;
    std::vector<std::string> claims;
    for (const auto& path : d.modules) {
      const auto own = own_params(tree, path);
      d.tied_head |= !own.empty() && std::all_of(own.begin(), own.end(), [](const TreeParam* p) { return !p->tied_to.empty(); });
      if (tree.module_index(path) < 0)
        fail(d.pos, "fully_shard of LoRA submodule '" + path + "' is not run yet (docs/design/known-limits.md)");
      for (size_t l = 0; l < s.layers.size(); ++l)
        if (!claimed[l] && under_module(s.layers[l].name, path)) claims.push_back(s.layers[l].name), claimed[l] = true;
    }
    if (claims.empty()) {
      fail(d.pos, "fully_shard " + join(d.modules) + " claims no parameters (none of its own, a tied head's, or what an "
                  "earlier fully_shard took): an FSDP unit without parameters is not modelled");
      continue;
    }
    if (claims[0] != d.modules[0]) claims.insert(claims.begin(), d.modules[0]);  // the group's name
    d.modules = std::move(claims);
  }
  return why;
}

SeqFile lowered_file(const SeqFile& f) {
  SeqFile out = f;
  SourcePos at;
  if (f.scenario.model) lower_model(out.scenario, &at);  // its refusals: model_refusal, before the run
  return out;
}

ModuleShape module_shape(const Scenario& s, const std::string& layer) {
  ModuleShape out;
  if (!s.model) return out;
  const ModuleTree tree = module_tree(*s.model);
  const int m = tree.module_index(layer);
  out.transposed = m >= 0 && tree.modules[m].kind == ModuleKind::Conv1D;
  out.bias = std::any_of(tree.params.begin(), tree.params.end(), [&](const TreeParam& p) { return p.name == layer + ".bias"; });
  if (m >= 0) {
    const TreeModule& mod = tree.modules[m];
    const std::string& type = mod.type;
    auto ends_with = [&](const char* tail) {
      const std::string t(tail);
      return type.size() >= t.size() && type.compare(type.size() - t.size(), t.size(), t) == 0;
    };
    // F.embedding; LlamaRMSNorm's `weight * hidden`; F.layer_norm; Conv1D's torch.addmm; F.linear
    // (addmm with a bias, mm without; the output head reads a sliced, non-contiguous input: bmm).
    out.sharded_call_op = mod.kind == ModuleKind::Embedding ? "embedding.default"
                          : ends_with("RMSNorm")             ? "mul.Tensor"
                          : ends_with("LayerNorm")           ? "native_layer_norm.default"
                          : mod.kind == ModuleKind::Conv1D   ? "addmm.default"
                          : layer == tree.output_head        ? "bmm.default"
                          : out.bias                         ? "addmm.default"
                                                             : "mm.default";
  }
  return out;
}

std::string tied_head_source(const Scenario& s) {
  if (!s.model || !s.model->tie_embeddings) return "";
  const ModuleTree tree = module_tree(*s.model);
  for (const auto& p : tree.params)
    if (!p.tied_to.empty()) return p.tied_to.substr(0, p.tied_to.rfind('.'));  // "model.embed_tokens.weight" -> its module
  return "";
}

}  // namespace fsdpsim
