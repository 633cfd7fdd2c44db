// Canonical `.seq` printer: fixed directive order, every option spelled out,
// expects inline after the op text padded to one column.
#include <sstream>

#include "model/vocab/seq.hpp"
#include "model/vocab/text.hpp"

namespace fsdpsim {

std::string expect_item_text(const ExpectItem& it) {
  switch (it.key) {
    case ExpectItem::Key::Ok: return "ok";
    case ExpectItem::Key::Error: return std::string("error=") + status_name(it.status);
    case ExpectItem::Key::Grads: return "grads={" + join(it.names) + "}";
    case ExpectItem::Key::Index: return "index=" + std::to_string(it.a);
    case ExpectItem::Key::Missing: return "missing=" + std::to_string(it.a) + "/" + std::to_string(it.b);
    case ExpectItem::Key::Stored: return "stored=" + it.target + ":" + it.value;
    case ExpectItem::Key::Merged: return "merged=" + it.target + ":[" + join(it.names) + "]";
    case ExpectItem::Key::State: return "state=" + it.target + ":" + it.value;
    case ExpectItem::Key::Finding: return "finding=" + it.target;
    case ExpectItem::Key::Placed: return "placed=" + it.target + ":" + it.value;
  }
  return "?";
}

const char* op_name(OpKind k) {
  switch (k) {
#define FSDPSIM_CASE(e, s) \
  case OpKind::e:          \
    return s;
    FSDPSIM_OPS(FSDPSIM_CASE)
#undef FSDPSIM_CASE
  }
  return "?";
}

std::optional<OpKind> op_from_name(const std::string& s) {
#define FSDPSIM_CMP(e, n) \
  if (s == n) return OpKind::e;
  FSDPSIM_OPS(FSDPSIM_CMP)
#undef FSDPSIM_CMP
  return std::nullopt;
}

// Written into `out` (cleared first) so that a caller reusing one string allocates nothing.
void op_text_into(const Op& op, std::string& out) {
  out.clear();
  if (op.rank >= 0) out.append("@").append(std::to_string(op.rank)).append(" ");
  out.append(op_name(op.kind));
  if (op.kind == OpKind::LoadAdapter) {
    out.append(" ").append(op.names[0]).append(op.trainable ? " trainable" : " frozen");
    return;
  }
  if (op.kind == OpKind::GradientSync) {
    out.append(op.sync ? " on" : " off");
    return;
  }
  if (op.list_form) {
    out.append(" [").append(join(op.names)).append("]");
  } else if (!op.names.empty()) {
    out.append(" ").append(op.names[0]);
  }
}

std::string op_text(const Op& op) {
  std::string out;
  op_text_into(op, out);
  return out;
}

// " param_dtype=bf16 reduce_dtype=fp32 ...": the keys a policy sets, in the policy's field order.
std::string mixed_precision_text(const MixedPrecision& m) {
  std::string out;
  if (m.param_dtype) out.append(" param_dtype=").append(dtype_name(*m.param_dtype));
  if (m.reduce_dtype) out.append(" reduce_dtype=").append(dtype_name(*m.reduce_dtype));
  if (m.output_dtype) out.append(" output_dtype=").append(dtype_name(*m.output_dtype));
  if (m.cast_forward_inputs) out.append(" cast_forward_inputs=").append(*m.cast_forward_inputs ? "true" : "false");
  return out;
}

std::string print_scenario(const Scenario& s) {
  std::ostringstream os;
  os << "world " << s.world << "\n";
  os << "seed " << s.seed << "\n";
  os << "profile " << s.profile << "\n";
  for (const auto& o : s.overrides) os << "set " << o.name << "=" << o.value << "\n";
  for (const auto& l : s.layers) {
    if (s.model) break;  // lowered from the model line (model_lowering.hpp), not written
    os << "layer " << l.name << " " << l.in << " " << l.out;
    if (l.experts > 0) os << " experts=" << l.experts;
    if (l.quant) os << " quant=" << quant_name(*l.quant);
    if (l.compute_dtype) os << " compute_dtype=" << dtype_name(*l.compute_dtype);
    os << "\n";
  }
  if (s.model) {
    const ModelDecl& m = *s.model;
    os << "model " << family_name(m.family) << " hidden=" << m.hidden << " intermediate=" << m.intermediate
       << " layers=" << m.layers << " heads=" << m.heads << " kv_heads=" << m.kv_heads << " vocab=" << m.vocab
       << " tie_embeddings=" << (m.tie_embeddings ? "true" : "false");
    if (m.experts > 0) os << " experts=" << m.experts << " top_k=" << m.top_k;
    os << " seq_len=" << m.seq_len << "\n";
  }
  for (const auto& a : s.adapters) {
    os << "adapter " << a.name << " r=" << a.r << " alpha=" << a.alpha << " targets=" << join(a.targets)
       << " init=" << (a.init == LoraInit::Zero ? "zero" : "random");
    if (!a.modules_to_save.empty()) os << " modules_to_save=" << join(a.modules_to_save);
    if (a.inference_mode) os << " inference_mode";
    if (a.deferred) os << " deferred";
    if (a.use_dora) os << " use_dora";
    if (a.autocast) os << " autocast=" << (*a.autocast ? "true" : "false");
    os << "\n";
  }
  for (const auto& d : s.shards)
    os << "fully_shard " << join(d.modules) << " reshard_after_forward=" << raf_name(d.raf) << mixed_precision_text(d.mp) << "\n";
  if (s.plan != ShardPlan::None) os << "fully_shard_plan " << shard_plan_name(s.plan) << "\n";
  os << "optimizer " << (s.optimizer == OptimizerParams::Trainable ? "trainable" : "all") << "\n";
  if (s.loading == Loading::RamEfficient) os << "loading ram_efficient\n";
  if (s.dtype != DType::F32 || !s.autocast_adapter_dtype)
    os << "dtype " << dtype_name(s.dtype) << (s.autocast_adapter_dtype ? "" : " autocast_adapter_dtype=false") << "\n";
  if (s.data == Data::PerRank) os << "data per_rank\n";
  if (!s.checkpoint.empty()) os << "checkpoint " << join(s.checkpoint) << "\n";
  if (!s.mp.empty()) os << "mixed_precision" << mixed_precision_text(s.mp) << "\n";
  return os.str();
}

std::string print_seq(const SeqFile& f) {
  std::ostringstream os;
  for (const auto& c : f.comments) os << "#" << (c.empty() ? "" : " ") << c << "\n";
  os << print_scenario(f.scenario) << "---\n";
  for (const auto& op : f.ops) {
    std::string line = op_text(op);
    if (!op.expects.empty()) {
      if (line.size() < 22) line.resize(22, ' ');
      else line += "  ";
      for (size_t i = 0; i < op.expects.size(); ++i) {
        const Expect& e = op.expects[i];
        line += i ? " expect" : "expect";
        if (e.rank >= 0) line += " @" + std::to_string(e.rank);
        for (const auto& it : e.items) line += " " + expect_item_text(it);
      }
    }
    os << line << "\n";
  }
  return os.str();
}

}  // namespace fsdpsim
