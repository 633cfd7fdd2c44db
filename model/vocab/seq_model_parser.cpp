// The `.seq` directives of real-model scenarios (docs/guide/seq-format.md, "Real models"): the
// `model` line, `fully_shard_plan`, and the dotted module paths that adapters' `targets=` and
// `fully_shard` take when a `model` line declares the modules.
#include <algorithm>

#include "model/vocab/limits.hpp"
#include "model/vocab/module_tree.hpp"
#include "model/vocab/seq_parse_helpers.hpp"
#include "model/vocab/suggest.hpp"
#include "model/vocab/text.hpp"

namespace fsdpsim::seq_parse {

using seq_lexer::LineParser;
using seq_lexer::Token;

namespace {

struct ModelKey {
  const char* name;
  int ModelDecl::*field;
  int lo, hi;
  const char* what;
};

const std::vector<ModelKey>& model_keys() {
  static const std::vector<ModelKey> keys = {
      {"hidden", &ModelDecl::hidden, 1, 8192, "the hidden size"},
      {"intermediate", &ModelDecl::intermediate, 1, 32768, "the intermediate (MLP) size"},
      {"layers", &ModelDecl::layers, 1, 64, "the number of decoder layers"},
      {"heads", &ModelDecl::heads, 1, 256, "the number of attention heads"},
      {"kv_heads", &ModelDecl::kv_heads, 1, 256, "the number of key/value heads"},
      {"vocab", &ModelDecl::vocab, 2, 262144, "the vocabulary size"},
      {"experts", &ModelDecl::experts, 1, 64, "the number of experts"},
      {"top_k", &ModelDecl::top_k, 1, 64, "the experts per token"},
      {"seq_len", &ModelDecl::seq_len, 1, 4096, "the sequence length"},
  };
  return keys;
}

std::vector<std::string> model_key_names() {
  std::vector<std::string> out;
  for (const auto& k : model_keys()) out.push_back(k.name);
  out.push_back("tie_embeddings");
  return out;
}

}  // namespace

// `model FAMILY hidden=H intermediate=I layers=L heads=A kv_heads=K vocab=V [tie_embeddings=B]
// [experts=E top_k=T] [seq_len=S]`: the sizes go to the family's config as transformers names
// them (hidden_size, intermediate_size, num_hidden_layers, ...; gpt2: n_embd, n_inner, n_layer, n_head).
void parse_model(LineParser& lp, Scenario& s, const Token& kw) {
  if (!s.layers.empty())
    lp.fail(kw, "a `model` line and `layer` lines cannot be in one file: the model line declares every module");
  if (!s.adapters.empty() || !s.shards.empty() || !s.checkpoint.empty())
    lp.fail(kw, "the `model` line comes before the adapter, fully_shard and checkpoint lines (they name its modules)");
  ModelDecl m;
  m.pos = lp.pos(kw);
  const std::string expected = "a model family (" + join(family_names(), "|") + ")";
  Token fam = lp.next(expected.c_str());
  if (!family_from_name(fam.text, &m.family))
    lp.fail(fam, "unknown model family '" + fam.text + "'" + suggest_or_list(fam.text, family_names()));
  m.tie_embeddings = m.family == Family::Gpt2;  // GPT2Config ties by default, the others' configs do not
  std::vector<std::string> seen;
  std::vector<Token> at;
  while (!lp.done()) {
    Token t = lp.next("a model option");
    auto [k, v] = split_kv(lp, t, "KEY=VALUE (hidden=, intermediate=, layers=, heads=, kv_heads=, vocab=, ...)");
    if (std::find(seen.begin(), seen.end(), k) != seen.end()) lp.fail(t, "model option '" + k + "' given twice");
    if (k == "tie_embeddings") {
      if (v != "true" && v != "false") lp.fail(t, "expected tie_embeddings=true|false, got '" + v + "'");
      m.tie_embeddings = v == "true";
    } else {
      const std::string name = k;  // C++17 lambdas cannot capture a structured binding
      auto key = std::find_if(model_keys().begin(), model_keys().end(), [&](const ModelKey& mk) { return name == mk.name; });
      if (key == model_keys().end())
        lp.fail(t, "unknown model option '" + k + "'" + suggest_or_list(k, model_key_names()));
      m.*(key->field) = static_cast<int>(parse_int(lp, t, v, key->lo, key->hi, key->what));
    }
    seen.push_back(k);
    at.push_back(t);
  }
  auto given = [&](const char* k) { return std::find(seen.begin(), seen.end(), k) != seen.end(); };
  auto token_of = [&](const char* k) { return at[std::find(seen.begin(), seen.end(), k) - seen.begin()]; };
  for (const char* k : {"hidden", "intermediate", "layers", "heads", "kv_heads", "vocab"})
    if (!given(k)) lp.fail(lp.end_column(), std::string("expected ") + k + "=N on the model line");
  const bool moe = m.family == Family::Qwen2Moe;
  for (const char* k : {"experts", "top_k"}) {
    if (moe && !given(k)) lp.fail(lp.end_column(), std::string("expected ") + k + "=N on the model line (qwen2_moe routes tokens to experts)");
    if (!moe && given(k)) lp.fail(token_of(k), std::string(k) + "= is qwen2_moe's (num_experts / num_experts_per_tok); " + fam.text + " has no experts");
  }
  if (moe && m.top_k > m.experts) lp.fail(token_of("top_k"), "top_k=" + std::to_string(m.top_k) + " is more than experts=" + std::to_string(m.experts));
  // head_dim = hidden // heads; the projections' sizes and repeat_kv need whole heads
  // (modeling_llama.py::LlamaAttention, repeat_kv; modeling_gpt2.py::GPT2Attention raises on a remainder)
  if (m.hidden % m.heads != 0)
    lp.fail(token_of("heads"), "heads=" + std::to_string(m.heads) + " does not divide hidden=" + std::to_string(m.hidden));
  if (m.family != Family::Gpt2 && (m.hidden / m.heads) % 2 != 0)
    lp.fail(token_of("heads"), "the head size hidden/heads = " + std::to_string(m.hidden / m.heads) +
                                   " is odd: rotary embeddings rotate pairs of features (pick an even head size)");
  if (m.heads % m.kv_heads != 0)
    lp.fail(token_of("kv_heads"), "kv_heads=" + std::to_string(m.kv_heads) + " does not divide heads=" + std::to_string(m.heads) +
                                      " (repeat_kv gives each key/value head heads/kv_heads query heads)");
  if (m.family == Family::Gpt2 && m.kv_heads != m.heads)
    lp.fail(token_of("kv_heads"), "gpt2 has no grouped-query attention: kv_heads must equal heads (" + std::to_string(m.heads) + ")");
  if (m.family == Family::Gpt2 && m.seq_len > 1024)
    lp.fail(token_of("seq_len"), "gpt2's position table has n_positions=1024 rows: seq_len is at most 1024");
  s.model = m;
}

// `fully_shard_plan transformer_layers|lora_modules`, instead of fully_shard lines.
void parse_fully_shard_plan(LineParser& lp, Scenario& s, const Token& kw) {
  if (!s.model) lp.fail(kw, "fully_shard_plan needs a `model` line above it (its units are the model's decoder layers)");
  if (!s.shards.empty()) lp.fail(kw, "fully_shard_plan and fully_shard lines cannot be in one file: the plan makes every call");
  s.plan_pos = lp.pos(kw);
  Token t = lp.next("transformer_layers or lora_modules");
  if (t.text == "transformer_layers") s.plan = ShardPlan::TransformerLayers;
  else if (t.text == "lora_modules") s.plan = ShardPlan::LoraModules;
  else lp.fail(t, "expected fully_shard_plan transformer_layers|lora_modules, got '" + t.text + "'" +
                      did_you_mean(t.text, {"transformer_layers", "lora_modules"}));
}

// "a,b.c" or "[a,b.c]": dotted module paths (targets and fully_shard lines of a model scenario).
std::vector<std::string> parse_paths(LineParser& lp, const Token& t, std::string s, const char* what) {
  if (!s.empty() && s.front() == '[') {
    if (s.back() != ']') lp.fail(t, "expected ']' to close the list");
    s = s.substr(1, s.size() - 2);
  }
  if (s.empty()) lp.fail(t, std::string("expected ") + what);
  std::vector<std::string> out;
  for (const std::string& item : split(s)) {
    if (!is_module_path(item))
      lp.fail(t, std::string("expected ") + what + ", got '" + item + "' (module paths are names joined by '.', e.g. model.layers.0.self_attn.q_proj)");
    if (std::find(out.begin(), out.end(), item) != out.end()) lp.fail(t, "duplicate name '" + item + "' in list");
    out.push_back(item);
  }
  return out;
}

// An adapter's `targets=` on a model scenario: PEFT target_modules, kept as written.
std::vector<std::string> parse_model_targets(LineParser& lp, const Scenario& s, const Token& t, const std::string& v) {
  std::vector<std::string> targets = parse_paths(lp, t, v, "a list of module names or suffixes (q_proj,v_proj) or all-linear");
  if (std::find(targets.begin(), targets.end(), "all-linear") != targets.end() && targets.size() > 1)
    lp.fail(t, "all-linear stands alone: it already selects every Linear but the output head");
  const TargetResolution r = resolve_targets(module_tree(*s.model), targets);
  if (!r.error.empty()) lp.fail(t, r.error);
  return targets;
}

namespace {

// `TARGET.lora_A.ADAPTER` (or lora_B, or DoRA's lora_magnitude_vector) of an adapter declared
// above and built by get_peft_model (not deferred): a LoRA submodule as its own unit.
bool is_lora_submodule(const Scenario& s, const std::string& path) {
  const ModuleTree tree = module_tree(*s.model);
  for (const auto& a : s.adapters) {
    if (a.deferred) continue;
    for (const char* part : {".lora_A.", ".lora_B.", ".lora_magnitude_vector."}) {
      const std::string tail = part + a.name;
      if (path.size() <= tail.size() || path.compare(path.size() - tail.size(), tail.size(), tail) != 0) continue;
      if (std::string(part) == ".lora_magnitude_vector." && !a.use_dora) continue;
      const std::vector<std::string> mods = resolve_targets(tree, a.targets).modules;
      if (std::find(mods.begin(), mods.end(), path.substr(0, path.size() - tail.size())) != mods.end()) return true;
    }
  }
  return false;
}

}  // namespace

// A `fully_shard` line's modules on a model scenario: tree modules (not the root, which is
// `root`) or LoRA submodules, none inside one an earlier call sharded (calls go bottom-up).
std::vector<std::string> parse_model_shard_modules(LineParser& lp, const Scenario& s, const Token& mods) {
  std::vector<std::string> out = parse_paths(lp, mods, mods.text, "module paths or root");
  const ModuleTree tree = module_tree(*s.model);
  for (const auto& m : out) {
    if (m == "root") {
      if (out.size() > 1) lp.fail(mods, "root cannot be grouped with other modules");
      continue;
    }
    if (tree.module_index(m) < 0 && !is_lora_submodule(s, m)) {
      std::vector<std::string> names;
      for (const auto& tm : tree.modules)
        if (!tm.name.empty()) names.push_back(tm.name);
      lp.fail(mods, "unknown module '" + m + "' (module paths as named_modules() spells them, e.g. " +
                        tree.decoder_layers[0] + ", or TARGET.lora_A.ADAPTER" + did_you_mean(m, names) + ")");
    }
    for (const auto& prev : s.shards)
      for (const auto& pm : prev.modules) {
        if (pm == m) lp.fail(mods, "module '" + m + "' is already sharded by an earlier fully_shard");
        if (m.size() < pm.size() && pm.compare(0, m.size() + 1, m + ".") == 0) continue;  // a child first: bottom-up
        if (pm.size() < m.size() && m.compare(0, pm.size() + 1, pm + ".") == 0)
          lp.fail(mods, "module '" + m + "' is inside '" + pm + "', sharded by an earlier fully_shard: calls go bottom-up");
      }
  }
  return out;
}

}  // namespace fsdpsim::seq_parse
