#include "model/vocab/module_tree.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "model/vocab/enum_names.hpp"
#include "model/vocab/text.hpp"

namespace fsdpsim {

const std::vector<std::string>& family_names() {
  static const std::vector<std::string> names = {"llama", "qwen2", "mistral", "gpt2", "qwen2_moe"};
  return names;
}
const char* family_name(Family f) { return family_names()[static_cast<size_t>(f)].c_str(); }
bool family_from_name(const std::string& s, Family* out) {
  for (size_t i = 0; i < family_names().size(); ++i)
    if (family_names()[i] == s) {
      *out = static_cast<Family>(i);
      return true;
    }
  return false;
}
const char* shard_plan_name(ShardPlan p) { return enum_names<ShardPlan>("none", "transformer_layers", "lora_modules")[p]; }

int ModuleTree::module_index(const std::string& name) const {
  for (size_t i = 0; i < modules.size(); ++i)
    if (modules[i].name == name) return static_cast<int>(i);
  return -1;
}

namespace {

// Appends modules and parameters in the order nn.Module registers them (named_modules() is a
// pre-order walk of the children in registration order; named_parameters() follows it).
struct TreeBuilder {
  ModuleTree t;
  void mod(const std::string& name, const std::string& type, ModuleKind kind = ModuleKind::Other) {
    t.modules.push_back({name, type, kind});
  }
  void param(const std::string& name, std::vector<int> shape, const std::string& tied_to = "") {
    t.params.push_back({name, std::move(shape), tied_to});
  }
  // nn.Linear(in, out, bias): weight (out, in).
  void linear(const std::string& name, int in, int out, bool bias) {
    mod(name, "Linear", ModuleKind::Linear);
    param(name + ".weight", {out, in});
    if (bias) param(name + ".bias", {out});
  }
  // transformers pytorch_utils.py::Conv1D(nf=out, nx=in): weight (in, out), bias (out).
  void conv1d(const std::string& name, int in, int out) {
    mod(name, "Conv1D", ModuleKind::Conv1D);
    param(name + ".weight", {in, out});
    param(name + ".bias", {out});
  }
  void norm(const std::string& name, const std::string& type, int size, bool bias) {
    mod(name, type);
    param(name + ".weight", {size});
    if (bias) param(name + ".bias", {size});
  }
};

// The class-name prefix of a Llama-shaped family (transformers models/<family>/modeling_<family>.py).
std::string prefix_of(Family f) {
  switch (f) {
    case Family::Llama: return "Llama";
    case Family::Qwen2: return "Qwen2";
    case Family::Mistral: return "Mistral";
    case Family::Qwen2Moe: return "Qwen2Moe";
    case Family::Gpt2: return "GPT2";
  }
  return "";
}

// SwiGLU MLP (modeling_llama.py::LlamaMLP; qwen2 / mistral / qwen2_moe's shared expert alike).
void gated_mlp(TreeBuilder& b, const std::string& at, const std::string& type, int hidden, int inter) {
  b.mod(at, type);
  b.linear(at + ".gate_proj", hidden, inter, false);
  b.linear(at + ".up_proj", hidden, inter, false);
  b.linear(at + ".down_proj", inter, hidden, false);
  b.mod(at + ".act_fn", "SiLUActivation");  // hidden_act "silu", every Llama-shaped config's default
}

// LlamaForCausalLM and its kin: model.{embed_tokens, layers.N.{self_attn, mlp, norms}, norm,
// rotary_emb}, lm_head. qwen2 and qwen2_moe give q/k/v a bias (modeling_qwen2.py::Qwen2Attention);
// qwen2_moe's mlp is a Qwen2MoeSparseMoeBlock (router, 3-D experts, shared expert and its gate).
ModuleTree llama_like(const ModelDecl& m) {
  TreeBuilder b;
  const std::string p = prefix_of(m.family);
  const int head_dim = m.hidden / m.heads;
  const bool qkv_bias = m.family == Family::Qwen2 || m.family == Family::Qwen2Moe;
  b.mod("", p + "ForCausalLM");
  b.mod("model", p + "Model");
  b.mod("model.embed_tokens", "Embedding", ModuleKind::Embedding);
  b.param("model.embed_tokens.weight", {m.vocab, m.hidden});
  b.mod("model.layers", "ModuleList");
  for (int i = 0; i < m.layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i);
    b.t.decoder_layers.push_back(l);
    b.mod(l, p + "DecoderLayer");
    b.mod(l + ".self_attn", p + "Attention");
    b.linear(l + ".self_attn.q_proj", m.hidden, m.heads * head_dim, qkv_bias);
    b.linear(l + ".self_attn.k_proj", m.hidden, m.kv_heads * head_dim, qkv_bias);
    b.linear(l + ".self_attn.v_proj", m.hidden, m.kv_heads * head_dim, qkv_bias);
    b.linear(l + ".self_attn.o_proj", m.heads * head_dim, m.hidden, false);
    if (m.family == Family::Qwen2Moe) {
      // modeling_qwen2_moe.py::Qwen2MoeSparseMoeBlock: `intermediate=` sizes the experts and the shared expert
      const std::string mlp = l + ".mlp";
      b.mod(mlp, "Qwen2MoeSparseMoeBlock");
      b.mod(mlp + ".gate", "Qwen2MoeTopKRouter");
      b.param(mlp + ".gate.weight", {m.experts, m.hidden});
      b.mod(mlp + ".experts", "Qwen2MoeExperts");
      b.param(mlp + ".experts.gate_up_proj", {m.experts, 2 * m.intermediate, m.hidden});
      b.param(mlp + ".experts.down_proj", {m.experts, m.hidden, m.intermediate});
      b.mod(mlp + ".experts.act_fn", "SiLUActivation");
      gated_mlp(b, mlp + ".shared_expert", "Qwen2MoeMLP", m.hidden, m.intermediate);
      b.linear(mlp + ".shared_expert_gate", m.hidden, 1, false);
    } else {
      gated_mlp(b, l + ".mlp", p + "MLP", m.hidden, m.intermediate);
    }
    b.norm(l + ".input_layernorm", p + "RMSNorm", m.hidden, false);
    b.norm(l + ".post_attention_layernorm", p + "RMSNorm", m.hidden, false);
  }
  b.norm("model.norm", p + "RMSNorm", m.hidden, false);
  b.mod("model.rotary_emb", p + "RotaryEmbedding");
  b.mod("lm_head", "Linear", ModuleKind::Linear);
  b.param("lm_head.weight", {m.vocab, m.hidden}, m.tie_embeddings ? "model.embed_tokens.weight" : "");
  b.t.output_head = "lm_head";
  return b.t;
}

// GPT2LMHeadModel (modeling_gpt2.py): transformer.{wte, wpe, drop, h.N, ln_f}, lm_head; attention
// and MLP are Conv1D; wpe has the config's default n_positions (1024) rows.
ModuleTree gpt2(const ModelDecl& m) {
  constexpr int kPositions = 1024;
  TreeBuilder b;
  b.mod("", "GPT2LMHeadModel");
  b.mod("transformer", "GPT2Model");
  b.mod("transformer.wte", "Embedding", ModuleKind::Embedding);
  b.param("transformer.wte.weight", {m.vocab, m.hidden});
  b.mod("transformer.wpe", "Embedding", ModuleKind::Embedding);
  b.param("transformer.wpe.weight", {kPositions, m.hidden});
  b.mod("transformer.drop", "Dropout");
  b.mod("transformer.h", "ModuleList");
  for (int i = 0; i < m.layers; ++i) {
    const std::string l = "transformer.h." + std::to_string(i);
    b.t.decoder_layers.push_back(l);
    b.mod(l, "GPT2Block");
    b.norm(l + ".ln_1", "LayerNorm", m.hidden, true);
    b.mod(l + ".attn", "GPT2Attention");
    b.conv1d(l + ".attn.c_attn", m.hidden, 3 * m.hidden);
    b.conv1d(l + ".attn.c_proj", m.hidden, m.hidden);
    b.mod(l + ".attn.attn_dropout", "Dropout");
    b.mod(l + ".attn.resid_dropout", "Dropout");
    b.norm(l + ".ln_2", "LayerNorm", m.hidden, true);
    b.mod(l + ".mlp", "GPT2MLP");
    b.conv1d(l + ".mlp.c_fc", m.hidden, m.intermediate);
    b.conv1d(l + ".mlp.c_proj", m.intermediate, m.hidden);
    b.mod(l + ".mlp.act", "NewGELUActivation");  // activation_function "gelu_new", GPT2Config's default
    b.mod(l + ".mlp.dropout", "Dropout");
  }
  b.norm("transformer.ln_f", "LayerNorm", m.hidden, true);
  b.mod("lm_head", "Linear", ModuleKind::Linear);
  b.param("lm_head.weight", {m.vocab, m.hidden}, m.tie_embeddings ? "transformer.wte.weight" : "");
  b.t.output_head = "lm_head";
  return b.t;
}

bool ends_with_piece(const std::string& name, const std::string& suffix) {
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         name[name.size() - suffix.size() - 1] == '.';
}

}  // namespace

ModuleTree module_tree(const ModelDecl& m) { return m.family == Family::Gpt2 ? gpt2(m) : llama_like(m); }

TargetResolution resolve_targets(const ModuleTree& tree, const std::vector<std::string>& targets) {
  TargetResolution r;
  const bool all_linear = targets.size() == 1 && targets[0] == "all-linear";
  for (const auto& mod : tree.modules) {
    if (mod.name.empty()) continue;
    bool hit = false;
    if (all_linear) {
      // tuners_utils.py::_maybe_include_all_linear_layers: nn.Linear and Conv1D, less get_output_embeddings()
      hit = (mod.kind == ModuleKind::Linear || mod.kind == ModuleKind::Conv1D) && mod.name != tree.output_head;
    } else {
      for (const auto& t : targets) hit = hit || mod.name == t || ends_with_piece(mod.name, t);
    }
    if (!hit) continue;
    // lora/model.py::LoraModel._create_new_module raises on the first matched module it cannot wrap
    if (mod.kind == ModuleKind::Other) {
      r.error = "PEFT cannot wrap module '" + mod.name + "' (a " + mod.type +
                "): LoRA targets Linear, Conv1D and Embedding modules (peft lora/model.py::_create_new_module raises "
                "\"Target module ... is not supported\")";
      return r;
    }
    if (mod.kind == ModuleKind::Embedding) {
      r.error = "module '" + mod.name + "' is an Embedding: PEFT wraps it as a LoRA Embedding, which fsdpsim does not "
                "model yet (target its Linear modules)";
      return r;
    }
    r.modules.push_back(mod.name);
  }
  if (r.modules.empty())  // tuners_utils.py::BaseTuner.inject_adapter: "Target modules ... not found in the base model"
    r.error = "PEFT finds none of targets=" + join(targets) +
              " in the model (its target_modules match a module's whole name or a dotted suffix of it, e.g. q_proj or "
              "self_attn.q_proj; get_peft_model raises \"Target modules ... not found in the base model\")";
  return r;
}

bool is_module_path(const std::string& s) {
  if (s.empty() || s.size() > 200 || s.front() == '.' || s.back() == '.') return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.' && s[i + 1] == '.') return false;
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  }
  return true;
}

std::string module_tree_text(const ModuleTree& tree) {
  std::ostringstream os;
  for (const auto& m : tree.modules) os << "module " << (m.name.empty() ? "." : m.name) << " " << m.type << "\n";
  for (const auto& p : tree.params) {
    os << "param " << p.name << " [";
    for (size_t i = 0; i < p.shape.size(); ++i) os << (i ? "," : "") << p.shape[i];
    os << "]";
    if (!p.tied_to.empty()) os << " tied=" << p.tied_to;
    os << "\n";
  }
  return os.str();
}

}  // namespace fsdpsim
