// `.seq` parser: a line-oriented lexer (tokens split on blanks, brackets and
// braces keep their contents together) and one small parse function per
// directive; the op lines after `---` and their expectations are seq_op_parser.cpp's.
// Every error names file:line:column and what was expected.
#include <algorithm>

#include <cctype>
#include <cstdio>
#include <cstring>

#include "model/vocab/input_file.hpp"
#include "model/vocab/limits.hpp"
#include "model/vocab/model_lowering.hpp"
#include "model/vocab/name_rules.hpp"
#include "model/vocab/number.hpp"
#include "model/vocab/op_rules.hpp"
#include "model/vocab/placement.hpp"
#include "model/vocab/profile.hpp"
#include "model/vocab/seq.hpp"
#include "model/vocab/seq_lexer.hpp"
#include "model/vocab/seq_parse_helpers.hpp"
#include "model/vocab/seq_words.hpp"
#include "model/vocab/suggest.hpp"

namespace fsdpsim {

// The header's directives, for "unknown directive" and its suggestion (and for the
// coverage table, which must know every one).
const std::vector<std::string>& directive_names() {
  static const std::vector<std::string> names = {"world", "seed", "profile", "set", "layer", "adapter", "fully_shard",
                                                 "optimizer", "loading", "dtype", "data", "checkpoint", "mixed_precision", "---"};
  return names;
}

const std::vector<std::string>& model_directive_names() {
  static const std::vector<std::string> names = {"model", "fully_shard_plan"};
  return names;
}

std::vector<std::string> all_directive_names() {
  std::vector<std::string> out = directive_names();
  out.insert(out.end() - 1, model_directive_names().begin(), model_directive_names().end());
  return out;
}

const std::vector<std::string>& adapter_option_names() {
  static const std::vector<std::string> names = {"r", "alpha", "targets", "modules_to_save", "init", "autocast", "inference_mode", "deferred", "use_dora"};
  return names;
}

namespace seq_parse {

using seq_lexer::LineParser;
using seq_lexer::Token;

// " (KINDs declared above: a, b; did you mean 'a'?)": what an unknown name could
// have been, so the message gives the fix.
std::string declared_hint(const std::string& word, const std::vector<std::string>& names, const char* kind) {
  if (names.empty()) return std::string(" (no ") + kind + " is declared: declare one with `" + kind + "` above the `---` line)";
  std::string list;
  for (size_t i = 0; i < names.size() && i < 12; ++i) list += (i ? ", " : "") + names[i];
  if (names.size() > 12) list += ", ...";
  return std::string(" (") + kind + "s declared above: " + list + did_you_mean(word, names) + ")";
}

std::string layer_hint(const Scenario& s, const std::string& word, bool with_root) {
  std::vector<std::string> names;
  for (const auto& l : s.layers) names.push_back(l.name);
  if (with_root) names.push_back("root");
  return declared_hint(word, names, with_root ? "module" : "layer");
}


std::vector<std::string> all_op_names() {
  std::vector<std::string> out;
  for (int i = 0; i < kOpKindCount; ++i) out.push_back(op_name(static_cast<OpKind>(i)));
  return out;
}

// What a rejected name breaks, for the error message.
std::string name_rule(const std::string& s) {
  if (s.find('.') != std::string::npos)
    return " (names may not contain '.': parameter names join names with dots, e.g. lin0.lora_A.NAME)";
  if (s.size() > 64) return " (names are at most 64 characters)";
  return " (names are letters, digits, '_' and '-', starting with a letter or '_')";
}

// `s` is the end of token `t` (`r=` VALUE) unless `at` says where it starts: the column is the value's own.
int64_t parse_int(LineParser& lp, const Token& t, const std::string& s, int64_t lo, int64_t hi, const char* what,
                  size_t at) {
  int64_t v = 0;
  const std::string why = read_whole_number(s, lo, hi, &v);
  if (at == std::string::npos) at = t.text.size() >= s.size() ? t.text.size() - s.size() : 0;
  if (!why.empty()) lp.fail(t.column + static_cast<int>(at), std::string("expected ") + what + ", " + why);
  return v;
}

// "a,b" or "[a,b]" or "{a,b}" (empty allowed only for the bracketed forms).
std::vector<std::string> parse_names(LineParser& lp, const Token& t, std::string s, const char* what) {
  bool bracketed = false;
  if (!s.empty() && (s.front() == '[' || s.front() == '{')) {
    char close = s.front() == '[' ? ']' : '}';
    if (s.back() != close) lp.fail(t, std::string("expected '") + close + "' to close the list");
    s = s.substr(1, s.size() - 2);
    bracketed = true;
  }
  std::vector<std::string> out;
  if (s.empty()) {
    if (!bracketed) lp.fail(t, std::string("expected ") + what);
    return out;
  }
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!is_name(item)) lp.fail(t, std::string("expected ") + what + ", got '" + item + "'" + (item.empty() ? "" : name_rule(item)));
    for (const auto& o : out)
      if (o == item) lp.fail(t, "duplicate name '" + item + "' in list");
    out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::pair<std::string, std::string> split_kv(LineParser& lp, const Token& t, const char* what) {
  size_t eq = t.text.find('=');
  if (eq == std::string::npos || eq == 0) lp.fail(t, std::string("expected ") + what);
  return {t.text.substr(0, eq), t.text.substr(eq + 1)};
}

}  // namespace seq_parse

namespace {

using seq_lexer::LineParser;
using seq_lexer::Token;
using namespace seq_parse;

void parse_layer(LineParser& lp, Scenario& s, const Token& kw) {
  if (s.model) lp.fail(kw, "a `model` line and `layer` lines cannot be in one file: the model line declares every module");
  LayerDecl l;
  l.pos = lp.pos(kw);
  Token name = lp.next("a layer name");
  if (name.text == "expect") lp.fail(name, "'expect' is reserved (it starts an expectation) and cannot name a layer");
  if (!is_name(name.text) || name.text == "root")
    lp.fail(name, "expected a layer name (not 'root'), got '" + name.text + "'" + (name.text == "root" ? "" : name_rule(name.text)));
  // what the pinned torch / PEFT refuse or mis-handle (name_rules.cpp cites each rule)
  if (std::string why = layer_name_refusal(name.text); !why.empty()) lp.fail(name, why);
  if (s.adapter_index(name.text) >= 0) lp.fail(name, shared_name_refusal(name.text, false));
  l.name = name.text;
  Token in = lp.next("the input size");
  l.in = static_cast<int>(parse_int(lp, in, in.text, 1, 4096, "the input size"));
  Token out = lp.next("the output size");
  l.out = static_cast<int>(parse_int(lp, out, out.text, 1, 4096, "the output size"));
  // options in any order, each at most once: experts=E, or quant=nf4|fp4 [compute_dtype=bf16|fp32]
  // (a bitsandbytes Linear4bit base: a Linear layer, never an experts parameter)
  std::optional<Token> experts_at, quant_at, compute_at;
  while (!lp.done()) {
    Token t = lp.next("a layer option");
    auto [k, v] = split_kv(lp, t, "experts=E, quant=nf4|fp4 or compute_dtype=bf16|fp32");
    std::optional<Token>* seen = k == "experts" ? &experts_at : k == "quant" ? &quant_at : k == "compute_dtype" ? &compute_at : nullptr;
    if (!seen)
      lp.fail(t, "unknown layer option '" + k + "' (expected experts=E, quant=nf4|fp4 or compute_dtype=bf16|fp32" +
                     did_you_mean(k, {"experts", "quant", "compute_dtype"}) + ")");
    if (*seen) lp.fail(t, "layer option '" + k + "' given twice");
    *seen = t;
    if (k == "experts") {
      l.experts = static_cast<int>(parse_int(lp, t, v, 1, 64, "the number of experts"));
    } else if (k == "quant") {
      if (v == "nf4") l.quant = Quant::NF4;
      else if (v == "fp4") l.quant = Quant::FP4;
      else lp.fail(t, "expected quant=nf4|fp4, got '" + v + "'");
    } else {
      DType d;
      if (!dtype_from_name(v, &d) || d == DType::U8) lp.fail(t, "expected compute_dtype=bf16|fp32, got '" + v + "'");
      l.compute_dtype = d;
    }
  }
  if (compute_at && !quant_at) lp.fail(*compute_at, "compute_dtype= is the compute dtype of a 4-bit layer: it needs quant=nf4|fp4 on the same line");
  if (quant_at && experts_at)
    lp.fail(*quant_at, "quant= makes the layer a bitsandbytes Linear4bit; an experts layer (experts=E) cannot be quantized");
  if (s.layer_index(l.name) >= 0) lp.fail(name, "layer '" + l.name + "' is declared twice");
  s.layers.push_back(l);
}

void parse_adapter(LineParser& lp, Scenario& s, const Token& kw) {
  AdapterDecl a;
  a.pos = lp.pos(kw);
  Token name = lp.next("an adapter name");
  if (name.text == "expect") lp.fail(name, "'expect' is reserved (it starts an expectation) and cannot name an adapter");
  if (!is_name(name.text)) lp.fail(name, "expected an adapter name, got '" + name.text + "'" + name_rule(name.text));
  if (name.text == "base" || name.text == "total")
    lp.fail(name, "'" + name.text + "' is reserved (the cost table's base and total rows) and cannot name an adapter");
  if (std::string why = adapter_name_refusal(name.text); !why.empty()) lp.fail(name, why);
  if (s.layer_index(name.text) >= 0) lp.fail(name, shared_name_refusal(name.text, true));
  a.name = name.text;
  if (s.adapter_index(a.name) >= 0) lp.fail(name, "adapter '" + a.name + "' is declared twice");
  bool have_targets = false;
  while (!lp.done()) {
    Token t = lp.next("an adapter option");
    if (t.text == "inference_mode") {
      a.inference_mode = true;
      continue;
    }
    if (t.text == "deferred") {
      a.deferred = true;
      continue;
    }
    if (t.text == "use_dora") {
      if (a.use_dora) lp.fail(t, "use_dora given twice for adapter '" + a.name + "'");
      a.use_dora = true;
      continue;
    }
    const std::vector<std::string>& options = adapter_option_names();
    if (t.text.find('=') == std::string::npos && !did_you_mean(t.text, options).empty())
      lp.fail(t, "unknown adapter option '" + t.text + "'" + did_you_mean(t.text, options));
    auto [k, v] = split_kv(lp, t, "r=N, alpha=N, targets=L1,L2, modules_to_save=L1,L2, init=zero|random, autocast=true|false, inference_mode, deferred or use_dora");
    if (k == "r") {
      a.r = static_cast<int>(parse_int(lp, t, v, 1, 1024, "the rank r"));
    } else if (k == "alpha") {
      a.alpha = static_cast<int>(parse_int(lp, t, v, 1, 1 << 20, "alpha"));
    } else if (k == "targets" && s.model) {
      a.targets = parse_model_targets(lp, s, t, v);
      have_targets = true;
    } else if (k == "modules_to_save" && s.model) {
      lp.fail(t, "modules_to_save= on a `model` scenario is not modelled yet (docs/design/known-limits.md)");
    } else if (k == "targets") {
      a.targets = parse_names(lp, t, v, "a list of layer names");
      if (a.targets.empty()) lp.fail(t, "expected at least one target layer in targets=");
      for (const auto& target : a.targets)
        if (s.layer_index(target) < 0) lp.fail(t, "unknown layer '" + target + "' in targets" + layer_hint(s, target));
      have_targets = true;
    } else if (k == "modules_to_save") {
      a.modules_to_save = parse_names(lp, t, v, "a list of layer names");
      if (a.modules_to_save.empty()) lp.fail(t, "expected at least one layer in modules_to_save=");
      for (const auto& m : a.modules_to_save)
        if (s.layer_index(m) < 0) lp.fail(t, "unknown layer '" + m + "' in modules_to_save" + layer_hint(s, m));
    } else if (k == "init") {
      if (v == "zero") a.init = LoraInit::Zero;
      else if (v == "random") a.init = LoraInit::Random;
      else lp.fail(t, "expected init=zero or init=random, got '" + v + "'");
    } else if (k == "autocast") {
      if (a.autocast) lp.fail(t, "autocast= given twice for adapter '" + a.name + "'");
      if (v != "true" && v != "false") lp.fail(t, "expected autocast=true or autocast=false, got '" + v + "'");
      a.autocast = v == "true";
    } else {
      lp.fail(t, "unknown adapter option '" + k + "'" + suggest_or_list(k, options));
    }
  }
  if (!have_targets)
    lp.fail(lp.end_column(), "expected targets=" + std::string(s.model ? "MODULES" : "L1,L2") + " for adapter '" + a.name + "'");
  s.adapters.push_back(a);
}

const std::vector<std::string>& mixed_precision_keys() {
  static const std::vector<std::string> keys = {"param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs"};
  return keys;
}

// One key of a MixedPrecisionPolicy (torch _fsdp_api.py) into m; false when k is not one. A key
// given twice on one line is refused (the second would silently win).
bool parse_mixed_precision_key(LineParser& lp, const Token& t, const std::string& k, const std::string& v, MixedPrecision& m) {
  std::optional<DType>* dt = k == "param_dtype" ? &m.param_dtype : k == "reduce_dtype" ? &m.reduce_dtype
                             : k == "output_dtype" ? &m.output_dtype : nullptr;
  if (dt) {
    if (dt->has_value()) lp.fail(t, "`" + k + "` is given twice on this line");
    DType d;
    if (!dtype_from_name(v, &d) || d == DType::U8) lp.fail(t, "expected " + k + "=fp32|bf16, got '" + v + "'");
    *dt = d;
    return true;
  }
  if (k != "cast_forward_inputs") return false;
  if (m.cast_forward_inputs) lp.fail(t, "`" + k + "` is given twice on this line");
  if (v != "true" && v != "false") lp.fail(t, "expected cast_forward_inputs=true|false, got '" + v + "'");
  m.cast_forward_inputs = v == "true";
  return true;
}

// `mixed_precision param_dtype=bf16 reduce_dtype=fp32 [output_dtype=D] [cast_forward_inputs=B]`.
void parse_mixed_precision(LineParser& lp, Scenario& s) {
  const char* what = "param_dtype=, reduce_dtype=, output_dtype= (fp32|bf16) or cast_forward_inputs=true|false";
  if (lp.done()) lp.fail(lp.end_column(), std::string("expected at least one of ") + what);
  while (!lp.done()) {
    Token t = lp.next(what);
    auto [k, v] = split_kv(lp, t, what);
    if (!parse_mixed_precision_key(lp, t, k, v, s.mp))
      lp.fail(t, "unknown mixed_precision key '" + k + "' (expected " + what + did_you_mean(k, mixed_precision_keys()) + ")");
  }
}

void parse_fully_shard(LineParser& lp, Scenario& s, const Token& kw) {
  ShardDecl d;
  d.pos = lp.pos(kw);
  if (s.plan != ShardPlan::None)
    lp.fail(kw, "fully_shard_plan and fully_shard lines cannot be in one file: the plan makes every call");
  Token mods = lp.next("a module name, a list a,b, or root");
  if (s.model) d.modules = parse_model_shard_modules(lp, s, mods);
  else d.modules = parse_names(lp, mods, mods.text, "module names (layers or root)");
  if (d.modules.empty()) lp.fail(mods, "expected at least one module in fully_shard");
  for (const auto& m : d.modules) {
    if (m == "root") {
      if (d.modules.size() > 1) lp.fail(mods, "root cannot be grouped with layers");
      continue;
    }
    if (s.model) continue;  // parse_model_shard_modules checked it
    if (s.layer_index(m) < 0) lp.fail(mods, "unknown module '" + m + "'" + layer_hint(s, m, true));
    for (const auto& prev : s.shards)
      for (const auto& pm : prev.modules)
        if (pm == m) lp.fail(mods, "module '" + m + "' is already sharded by an earlier fully_shard");
  }
  for (const auto& prev : s.shards)
    if (prev.is_root()) lp.fail(kw, "fully_shard after the root: calls go bottom-up, root last");
  const char* what = "reshard_after_forward=true|false|none or a mixed_precision key (param_dtype=, reduce_dtype=, "
                     "output_dtype=, cast_forward_inputs=)";
  while (!lp.done()) {
    Token t = lp.next(what);
    auto [k, v] = split_kv(lp, t, what);
    if (parse_mixed_precision_key(lp, t, k, v, d.mp)) continue;
    if (k != "reshard_after_forward") {
      std::vector<std::string> keys = mixed_precision_keys();
      keys.push_back("reshard_after_forward");
      lp.fail(t, "unknown fully_shard option '" + k + "' (expected " + what + did_you_mean(k, keys) + ")");
    }
    if (v == "true") d.raf = Raf::True;
    else if (v == "false") d.raf = Raf::False;
    else if (v == "none") d.raf = Raf::None;
    else lp.fail(t, "expected reshard_after_forward=true|false|none, got '" + v + "'");
  }
  s.shards.push_back(d);
}

// `checkpoint lin0,lin1`: declared Linear layers, each once; kept in module order, the order
// fsdp2_apply_ac meets them in.
void parse_checkpoint(LineParser& lp, Scenario& s) {
  Token mods = lp.next("a layer name or a list a,b");
  std::vector<std::string> names = parse_names(lp, mods, mods.text, "layer names");
  for (size_t i = 0; i < names.size(); ++i) {
    int l = s.layer_index(names[i]);
    if (l < 0) lp.fail(mods, "unknown layer '" + names[i] + "'" + layer_hint(s, names[i]));
    if (s.layers[l].experts > 0)
      lp.fail(mods, "layer '" + names[i] + "' is an experts layer: activation checkpointing is modelled for Linear layers only");
    for (size_t j = 0; j < i; ++j)
      if (names[j] == names[i]) lp.fail(mods, "layer '" + names[i] + "' is listed twice");
  }
  for (const auto& l : s.layers)
    if (std::find(names.begin(), names.end(), l.name) != names.end()) s.checkpoint.push_back(l.name);
}

// Directives that set one value: a second line would silently win, so it is
// an error like a second `layer` of the same name.
struct SeenOnce {
  std::vector<std::pair<std::string, int>> lines;  // directive, first line
  void note(LineParser& lp, const Token& kw, int line_no) {
    for (const auto& [k, l] : lines)
      if (k == kw.text) lp.fail(kw, "`" + k + "` is given twice (first at line " + std::to_string(l) + ")");
    lines.push_back({kw.text, line_no});
  }
};

bool parse_header_line(LineParser& lp, Scenario& s, SeenOnce& once, int line_no) {
  Token kw = lp.next("a directive");
  const std::string& k = kw.text;
  if (k == "---") return true;
  if (k == "world" || k == "seed" || k == "profile" || k == "loading" || k == "dtype" || k == "optimizer" ||
      k == "data" || k == "checkpoint" || k == "mixed_precision" || k == "model" || k == "fully_shard_plan")
    once.note(lp, kw, line_no);
  if (k == "world") {
    Token n = lp.next("the world size");
    s.world = static_cast<int>(parse_int(lp, n, n.text, 1, kMaxWorld, "the world size"));
  } else if (k == "seed") {
    Token n = lp.next("a seed");
    s.seed = static_cast<uint64_t>(parse_int(lp, n, n.text, 0, 999999999999999999LL, "a seed"));
  } else if (k == "profile") {
    Token n = lp.next("a profile name");
    if (!profile_by_name(n.text)) lp.fail(n, "unknown profile '" + n.text + "'" + suggest_or_list(n.text, profile_names()));
    s.profile = n.text;
  } else if (k == "set") {
    Token t = lp.next("switch=value");
    auto [name, value] = split_kv(lp, t, "switch=value");
    Profile probe = *profile_by_name("upstream");
    std::string err = apply_override(probe, name, value);
    if (!err.empty()) lp.fail(t, err);
    s.overrides.push_back({name, value, lp.pos(t)});
  } else if (k == "layer") {
    parse_layer(lp, s, kw);
  } else if (k == "model") {
    parse_model(lp, s, kw);
  } else if (k == "fully_shard_plan") {
    parse_fully_shard_plan(lp, s, kw);
  } else if (k == "adapter") {
    parse_adapter(lp, s, kw);
  } else if (k == "fully_shard") {
    parse_fully_shard(lp, s, kw);
  } else if (k == "loading") {
    s.loading_pos = lp.pos(kw);
    Token t = lp.next("full or ram_efficient");
    if (t.text == "full") s.loading = Loading::Full;
    else if (t.text == "ram_efficient") s.loading = Loading::RamEfficient;
    else lp.fail(t, "expected loading full|ram_efficient, got '" + t.text + "'");
  } else if (k == "dtype") {
    Token t = lp.next("fp32 or bf16");
    if (!dtype_from_name(t.text, &s.dtype)) lp.fail(t, "expected dtype fp32|bf16, got '" + t.text + "'");
    if (!lp.done()) {
      Token o = lp.next("autocast_adapter_dtype=true|false");
      auto [ok, ov] = split_kv(lp, o, "autocast_adapter_dtype=true|false");
      if (ok != "autocast_adapter_dtype" || (ov != "true" && ov != "false"))
        lp.fail(o, "expected autocast_adapter_dtype=true|false" + did_you_mean(ok, {"autocast_adapter_dtype"}));
      s.autocast_adapter_dtype = ov == "true";
    }
  } else if (k == "data") {
    Token t = lp.next("same or per_rank");
    if (t.text == "same") s.data = Data::Same;
    else if (t.text == "per_rank") s.data = Data::PerRank;
    else lp.fail(t, "expected data same|per_rank, got '" + t.text + "'");
  } else if (k == "checkpoint") {
    if (s.model) lp.fail(kw, "`checkpoint` on a `model` scenario is not modelled yet (docs/design/known-limits.md)");
    parse_checkpoint(lp, s);
  } else if (k == "mixed_precision") {
    s.mp_pos = lp.pos(kw);
    parse_mixed_precision(lp, s);
  } else if (k == "optimizer") {
    Token t = lp.next("trainable or all");
    if (t.text == "trainable") s.optimizer = OptimizerParams::Trainable;
    else if (t.text == "all") s.optimizer = OptimizerParams::AllLora;
    else lp.fail(t, "expected optimizer trainable|all, got '" + t.text + "'");
  } else if (op_from_name(k) || (k.size() > 1 && k[0] == '@')) {
    // The usual cause: the `---` line that ends the scenario is missing.
    lp.fail(kw, "unknown directive '" + k + "': it is an op, and ops go after a `---` line that ends the scenario (add `---` above line " +
                    std::to_string(line_no) + ")");
  } else {
    std::string hint = did_you_mean(k, all_directive_names());
    if (hint.empty() && !did_you_mean(k, all_op_names()).empty())
      hint = did_you_mean(k, all_op_names()) + " (an op: ops go after the `---` line)";
    lp.fail(kw, "unknown directive '" + k + "'" +
                    (hint.empty() ? " (expected world, seed, profile, set, layer, model, adapter, fully_shard, fully_shard_plan, optimizer, loading, dtype, data, checkpoint, mixed_precision or ---)"
                                  : hint));
  }
  if (!lp.done()) lp.fail(lp.peek(), "unexpected '" + lp.peek().text + "' at end of " + k + " line");
  return false;
}

// Lines end at "\n", "\r\n" or a lone "\r" (old Mac editors); a leading
// UTF-8 byte-order mark is skipped (Windows editors write one).
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t p = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  std::string cur;
  for (; p < text.size(); ++p) {
    char c = text[p];
    if (c == '\n' || c == '\r') {
      lines.push_back(std::move(cur));
      cur.clear();
      if (c == '\r' && p + 1 < text.size() && text[p + 1] == '\n') ++p;
      continue;
    }
    cur += c;
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  return lines;
}

}  // namespace

SeqFile parse_seq(const std::string& text, const std::string& file) {
  SeqFile f;
  int line_no = 0;
  bool in_ops = false, seen_content = false;
  SeenOnce once;
  Scenario lowered;  // a `model` scenario lowered at its `---` (model_lowering.hpp): what the ops name
  for (const std::string& line : split_lines(text)) {
    ++line_no;
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (line[first] == '#') {
      if (!seen_content) {
        std::string c = line.substr(first + 1);
        if (!c.empty() && c[0] == ' ') c.erase(0, 1);
        while (!c.empty() && c.back() == ' ') c.pop_back();
        f.comments.push_back(c);
      }
      continue;
    }
    seen_content = true;
    LineParser lp(file, line_no, line);
    if (lp.done()) continue;
    if (!in_ops) {
      SourcePos at = lp.pos(lp.peek());
      in_ops = parse_header_line(lp, f.scenario, once, line_no);
      if (in_ops && !lp.done()) lp.fail(lp.peek(), "unexpected text after ---");
      if (in_ops && f.scenario.model) {
        // The ops and expectations name the lowered modules and their parameters; the file keeps
        // its targets and calls as written (and the lowered layers, which the printer leaves out).
        lowered = f.scenario;
        SourcePos refused;  // what the machine does not run yet: sim/core/crosscheck.cpp model_refusal
        lower_model(lowered, &refused);
        f.scenario.layers = lowered.layers;
      }
      if (in_ops) f.separator = at;
      continue;
    }
    if (lp.peek().text == "expect") {
      if (f.ops.empty()) lp.fail(lp.peek(), "`expect` before any op");
      seq_parse::parse_expects(lp, f.ops.back(), f.scenario.model ? lowered : f.scenario);
      continue;
    }
    f.ops.push_back(seq_parse::parse_op_line(lp, f.scenario.model ? lowered : f.scenario));
  }
  if (!in_ops) throw SourceError(file, {line_no + 1, 1}, "expected a `---` line between the scenario and the ops");
  validate(f, file);
  return f;
}

std::string model_scenario_refusal() {
  return "a `model` scenario runs with `fsdpsim check` and `run` (backend model); this "
         "command takes `layer` scenarios only (docs/design/known-limits.md)";
}

SeqFile parse_seq_file(const std::string& path, bool allow_model) {
  // A FIFO, a device or a directory is refused from its type; a file over the
  // limits of model/vocab/input_file.hpp at the line where it crosses them.
  SeqFile f = parse_seq(read_input_file(path, kSeqInput), path);
  if (f.scenario.model && !allow_model) throw SourceError(path, f.scenario.model->pos, model_scenario_refusal());
  return f;
}

}  // namespace fsdpsim
