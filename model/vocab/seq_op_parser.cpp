// `.seq` parser, the op lines after `---`: an op with its rank and arguments, checked against
// the scenario the header declared, and its `expect` clauses. Every error names
// file:line:column and what was expected (seq_parser.cpp reads the header and the file).
#include <algorithm>
#include <string>
#include <vector>

#include "model/vocab/limits.hpp"
#include "model/vocab/module_tree.hpp"
#include "model/vocab/op_rules.hpp"
#include "model/vocab/placement.hpp"
#include "model/vocab/seq.hpp"
#include "model/vocab/seq_lexer.hpp"
#include "model/vocab/seq_parse_helpers.hpp"
#include "model/vocab/seq_words.hpp"
#include "model/vocab/suggest.hpp"

namespace fsdpsim::seq_parse {

using seq_lexer::LineParser;
using seq_lexer::Token;

namespace {

// What `reshard`/`unshard` and `state=` take: root, a layer, or on a `model` scenario any module
// path of its tree (a fully_shard call's group is named after its first path: model_lowering.hpp).
bool unit_name(const Scenario& s, const std::string& name) {
  return name == "root" || s.layer_index(name) >= 0 || (s.model && module_tree(*s.model).module_index(name) >= 0);
}

int parse_rank(LineParser& lp, const Token& t, const Scenario& s) {
  int r = static_cast<int>(parse_int(lp, t, t.text.substr(1), 0, 63, "a rank after @"));
  if (r >= s.world)
    lp.fail(t, "rank @" + std::to_string(r) + " out of range (world " + std::to_string(s.world) + ": @0..@" +
                   std::to_string(s.world - 1) + ")");
  return r;
}

void check_adapter(LineParser& lp, const Token& t, const Scenario& s, const std::string& a) {
  if (s.adapter_index(a) >= 0) return;
  std::vector<std::string> names;
  for (const auto& d : s.adapters) names.push_back(d.name);
  lp.fail(t, "unknown adapter '" + a + "'" + declared_hint(a, names, "adapter"));
}

ExpectItem parse_expect_item(LineParser& lp, const Token& t, const Scenario& s) {
  ExpectItem it;
  it.pos = lp.pos(t);
  if (t.text == "ok") {
    it.key = ExpectItem::Key::Ok;
    return it;
  }
  const char* kinds = "ok, error=CLASS, grads={..}, index=N, missing=K/N, stored=LAYER:CLASS, "
                      "merged=LAYER:[..], state=GROUP:SHARDED|UNSHARDED, placed=PARAM:DEVICE/DTYPE or finding=SN";
  const auto kv = split_kv(lp, t, kinds);  // named, not bound: lambdas below capture them
  const std::string& k = kv.first;
  const std::string& v = kv.second;
  auto layer_colon = [&](std::string* rest) {
    size_t c = v.find(':');
    if (c == std::string::npos) lp.fail(t, "expected " + k + "=NAME:VALUE");
    it.target = v.substr(0, c);
    *rest = v.substr(c + 1);
  };
  if (k == "error") {
    it.key = ExpectItem::Key::Error;
    if (!status_from_name(v, &it.status) || it.status == Status::Ok || it.status == Status::NotRun)
      lp.fail(t, "expected error=no_grad_fn|key_error|shape_error|value_error|assertion_error|hang|mismatch|exception, got '" + v + "'");
  } else if (k == "grads") {
    it.key = ExpectItem::Key::Grads;
    if (v.empty() || v.front() != '{') lp.fail(t, "expected grads={a,b} (braces, possibly empty)");
    it.names = parse_names(lp, t, v, "adapter names");
    for (const auto& a : it.names) check_adapter(lp, t, s, a);
  } else if (k == "index") {
    it.key = ExpectItem::Key::Index;
    it.a = parse_int(lp, t, v, 0, 1 << 30, "an optimizer index");
  } else if (k == "missing") {
    it.key = ExpectItem::Key::Missing;
    size_t sl = v.find('/');
    if (sl == std::string::npos) lp.fail(t, "expected missing=K/N");
    it.a = parse_int(lp, t, v.substr(0, sl), 0, 1 << 30, "a count K in missing=K/N", t.text.size() - v.size());
    it.b = parse_int(lp, t, v.substr(sl + 1), 0, 1 << 30, "a count N in missing=K/N");
  } else if (k == "stored") {
    it.key = ExpectItem::Key::Stored;
    layer_colon(&it.value);
    if (s.layer_index(it.target) < 0) lp.fail(t, "unknown layer '" + it.target + "'" + layer_hint(s, it.target));
    WeightClass w;
    if (!weight_class_from_name(it.value, &w))
      lp.fail(t, "expected stored=LAYER:exact|missing_delta|extra_delta|corrupt|unjudged, got '" + it.value + "'");
  } else if (k == "merged") {
    it.key = ExpectItem::Key::Merged;
    std::string rest;
    layer_colon(&rest);
    if (s.layer_index(it.target) < 0) lp.fail(t, "unknown layer '" + it.target + "'" + layer_hint(s, it.target));
    if (rest.empty() || rest.front() != '[') lp.fail(t, "expected merged=LAYER:[a,b]");
    it.names = parse_names(lp, t, rest, "adapter names");
    for (const auto& a : it.names) check_adapter(lp, t, s, a);
  } else if (k == "state") {
    it.key = ExpectItem::Key::State;
    layer_colon(&it.value);
    if (!unit_name(s, it.target)) lp.fail(t, "unknown group '" + it.target + "'" + layer_hint(s, it.target, true));
    if (it.value != "SHARDED" && it.value != "UNSHARDED") lp.fail(t, "expected state=GROUP:SHARDED|UNSHARDED");
  } else if (k == "placed") {
    it.key = ExpectItem::Key::Placed;
    layer_colon(&it.value);
    size_t sl = it.value.find('/');
    Device d;
    DType dt;
    if (sl == std::string::npos || !device_from_name(it.value.substr(0, sl), &d) ||
        !dtype_from_name(it.value.substr(sl + 1), &dt))
      lp.fail(t, "expected placed=PARAM:cpu|meta/fp32|bf16, got '" + v + "'");
    if (s.adapter_of_param(it.target) < 0)  // one the declarations produce, matched whole
      lp.fail(t, "expected an adapter parameter such as lin0.lora_A.NAME, got '" + it.target + "'");
  } else if (k == "finding") {
    it.key = ExpectItem::Key::Finding;
    static const char* specs[] = {"S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8"};
    bool ok = false;
    for (const char* sp : specs) ok = ok || v == sp;
    if (!ok) lp.fail(t, "expected finding=S1..S8, got '" + v + "'");
    it.target = v;
  } else {
    static const std::vector<std::string> keys = {"error", "grads", "index", "missing", "stored", "merged", "state", "placed", "finding"};
    const std::string hint = did_you_mean(k, keys);
    lp.fail(t, std::string("unknown expectation '") + k + "'" + (hint.empty() ? std::string(" (expected ") + kinds + ")" : hint));
  }
  return it;
}

std::string module_or_root(LineParser& lp, const Token& t, const Scenario& s) {
  if (!unit_name(s, t.text))
    lp.fail(t, "unknown module '" + t.text + "'" + layer_hint(s, t.text, true));
  return t.text;
}

}  // namespace

// Parses `expect [@R] item...` clauses until the end of the line.
void parse_expects(LineParser& lp, Op& op, const Scenario& s) {
  while (!lp.done()) {
    Token kw = lp.next("expect");
    if (kw.text != "expect") lp.fail(kw, "expected `expect` or end of line, got '" + kw.text + "'");
    Expect e;
    e.pos = lp.pos(kw);
    if (!lp.done() && lp.peek().text.size() > 1 && lp.peek().text[0] == '@') {
      Token r = lp.next("@R");
      e.rank = parse_rank(lp, r, s);
      if (op.rank >= 0 && e.rank != op.rank)
        lp.fail(r, "expectation for @" + std::to_string(e.rank) + " on an op that runs on @" + std::to_string(op.rank) + " only");
    }
    while (!lp.done() && lp.peek().text != "expect") e.items.push_back(parse_expect_item(lp, lp.next("an expectation"), s));
    if (e.items.empty()) lp.fail(lp.end_column(), "expected at least one expectation after `expect`");
    op.expects.push_back(std::move(e));
  }
}

Op parse_op_line(LineParser& lp, const Scenario& s) {
  Op op;
  Token first = lp.next("an op");
  op.pos = lp.pos(first);
  if (first.text.size() > 1 && first.text[0] == '@') {
    op.rank = parse_rank(lp, first, s);
    first = lp.next("an op after @R");
  }
  auto kind = op_from_name(first.text);
  if (!kind) {
    const std::vector<std::string> directives = all_directive_names();
    if (std::find(directives.begin(), directives.end(), first.text) != directives.end())
      lp.fail(first, "unknown op '" + first.text + "': it is a scenario directive, and those go above the `---` line");
    lp.fail(first, "unknown op '" + first.text + "'" + suggest_or_list(first.text, all_op_names()));
  }
  op.kind = *kind;
  auto has_arg = [&]() { return !lp.done() && lp.peek().text != "expect"; };
  switch (op.kind) {
    case OpKind::Merge:
    case OpKind::SaveAdapters:
    case OpKind::SetAdapter: {
      if (!has_arg()) {
        if (op.kind == OpKind::SetAdapter) lp.fail(lp.end_column(), "expected an adapter name or [a,b] after set_adapter");
        break;
      }
      Token t = lp.next("adapter names");
      op.list_form = t.text.front() == '[';
      op.names = parse_names(lp, t, t.text, "adapter names");
      if (op.kind == OpKind::SetAdapter && op.names.empty()) lp.fail(t, "expected at least one adapter in set_adapter");
      if (op.kind == OpKind::SetAdapter && !op.list_form && op.names.size() > 1)
        lp.fail(t, "expected one adapter name or a bracketed list [a,b] after set_adapter");
      for (const auto& a : op.names) check_adapter(lp, t, s, a);
      if (op.kind != OpKind::SetAdapter) op.list_form = op.names.size() != 1;
      break;
    }
    case OpKind::AddAdapter:
    case OpKind::DeleteAdapter:
    case OpKind::LoadAdapter: {
      Token t = lp.next("an adapter name");
      check_adapter(lp, t, s, t.text);
      op.names = {t.text};
      if (OpRules::injects(op.kind) && !OpRules::may_name(s, op.kind, s.adapter_index(t.text)))
        lp.fail(t, "adapter '" + t.text + "' is already in the model; only `deferred` adapters can be added "
                   "(load_adapter loads into an existing one)");
      if (op.kind == OpKind::LoadAdapter) {
        Token m = lp.next("trainable or frozen");
        if (m.text == "trainable") op.trainable = true;
        else if (m.text != "frozen") lp.fail(m, "expected trainable or frozen, got '" + m.text + "'");
      }
      break;
    }
    case OpKind::Reshard:
    case OpKind::Unshard:
      if (has_arg()) op.names = {module_or_root(lp, lp.next("a module"), s)};
      break;
    case OpKind::GradientSync: {
      Token t = lp.next("on or off");
      if (t.text == "off") op.sync = false;
      else if (t.text != "on") lp.fail(t, "expected gradient_sync on|off, got '" + t.text + "'");
      break;
    }
    case OpKind::SaveModel:
    case OpKind::LoadModel: {
      // save_model full|sharded (DCP get_model_state_dict); load_model full|sharded (set_model_state_dict)
      // or plain (nn.Module.load_state_dict of the full tensors)
      const bool load = op.kind == OpKind::LoadModel;
      Token t = lp.next(load ? "full, sharded or plain" : "full or sharded");
      if (t.text != "full" && t.text != "sharded" && !(load && t.text == "plain"))
        lp.fail(t, std::string("expected ") + (load ? "load_model full|sharded|plain" : "save_model full|sharded") + ", got '" +
                       t.text + "'");
      op.names = {t.text};
      break;
    }
    case OpKind::Generate: {
      // generate N: N greedy decode steps under no_grad (an RL rollout); N in 1..kMaxGenerateSteps
      Token t = lp.next("a step count");
      const bool digits = !t.text.empty() && t.text.size() <= 2 && t.text.find_first_not_of("0123456789") == std::string::npos;
      const int n = digits ? std::stoi(t.text) : 0;
      if (n < 1 || n > kMaxGenerateSteps)
        lp.fail(t, "expected generate N with N from 1 to " + std::to_string(kMaxGenerateSteps) + ", got '" + t.text + "'");
      op.names = {std::to_string(n)};
      break;
    }
    case OpKind::DeltaWeight: {
      Token t = lp.next("a layer name");  // every layer: a Linear or a ParamWrapper target
      if (s.layer_index(t.text) < 0) lp.fail(t, "unknown layer '" + t.text + "'" + layer_hint(s, t.text));
      op.names = {t.text};
      break;
    }
    default:
      break;
  }
  if (has_arg()) lp.fail(lp.peek(), "unexpected argument '" + lp.peek().text + "' for " + op_name(op.kind));
  parse_expects(lp, op, s);
  return op;
}

}  // namespace fsdpsim::seq_parse
