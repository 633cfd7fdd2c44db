#include "model/vocab/observation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <type_traits>
#include <sstream>

#include "model/vocab/cross_paired.hpp"
#include "model/vocab/enum_names.hpp"
#include "model/vocab/table.hpp"
#include "model/vocab/text.hpp"

namespace fsdpsim {

const char* const kNoGradFnMessage = "element 0 of tensors does not require grad and does not have a grad_fn";
const char* const kNoOrigDtype = "AttributeError: 'FSDPParamGroup' object has no attribute '_orig_dtype'";

std::string grad_dtype_refused_message(DType got) {
  return std::string("RuntimeError: attempting to assign a gradient with dtype ") +
         (got == DType::F32 ? "'float' to a tensor with grad_dtype 'BFloat16'" : "'c10::BFloat16' to a tensor with grad_dtype 'Float'") +
         ". The gradient must match the tensor's grad_dtype (defaults to the tensor's dtype). You can set the tensor's "
         "grad_dtype attribute with a specific dtype, or None to allow any dtype. Set grad_dtype with caution. Diverging "
         "the dtypes of a tensor and its gradient may break downstream systems that assume they match.";
}

namespace {

constexpr auto kStatusNames = enum_names<Status>("ok", "no_grad_fn", "key_error", "shape_error", "value_error", "hang", "mismatch",
                                                 "not_run", "exception", "assertion_error");
static_assert(kStatusNames.size() == kStatusCount);
constexpr auto kWeightClassNames = enum_names<WeightClass>("exact", "missing_delta", "extra_delta", "corrupt", "unjudged");
static_assert(kWeightClassNames.size() == kWeightClassCount);
constexpr auto kShardedStateNames = enum_names<ShardedState>("SHARDED", "UNSHARDED");
constexpr auto kCollOpNames = enum_names<CollOp>("all_gather", "reduce_scatter", "broadcast", "all_reduce");

}  // namespace

const char* status_name(Status s) { return kStatusNames[s]; }
bool status_from_name(const std::string& s, Status* out) { return kStatusNames.parse(s, out); }
const char* weight_class_name(WeightClass w) { return kWeightClassNames[w]; }
bool weight_class_from_name(const std::string& s, WeightClass* out) { return kWeightClassNames.parse(s, out); }
const char* sharded_state_name(ShardedState s) { return kShardedStateNames[s]; }
const char* coll_op_name(CollOp c) { return kCollOpNames[c]; }

std::string collective_text(const Collective& c) {
  if (c.op == CollOp::Broadcast) return fmt::format("{}({}, {} {})", coll_op_name(c.op), c.group.str(), c.count, dtype_name(c.dtype));
  return fmt::format("{}({}, {})", coll_op_name(c.op), c.group.str(), c.count);
}

std::string describe_pending(const std::vector<PendingCollective>& heads) {
  bool same = true;
  int waiting = 0;
  const PendingCollective* first = nullptr;
  for (const auto& h : heads) {
    if (!h.waiting) continue;
    ++waiting;
    if (!first) first = &h;
    same = same && h.coll.op == first->coll.op && h.coll.group == first->coll.group &&
           h.coll.count == first->coll.count && h.coll.dtype == first->coll.dtype;
  }
  same = same && waiting >= 2;
  std::string out;
  auto to = std::back_inserter(out);
  for (size_t r = 0; r < heads.size(); ++r) {
    const PendingCollective& h = heads[r];
    fmt::format_to(to, "{}rank {} ", r ? "; " : "", r);
    if (!h.waiting) {
      out += "issues no matching collective";
      continue;
    }
    fmt::format_to(to, "in {}", collective_text(h.coll));
    if (same) fmt::format_to(to, " of {}", h.members.empty() ? std::string("nothing") : join(h.members));
    fmt::format_to(to, " at step {}", h.step);
  }
  return out;
}

const char* const kCrossPaired = "cross-paired: ";

std::string describe_cross_paired(const std::vector<PendingCollective>& heads) {
  std::string out = kCrossPaired;
  auto to = std::back_inserter(out);
  for (size_t r = 0; r < heads.size(); ++r) {
    const PendingCollective& h = heads[r];
    fmt::format_to(to, "{}rank {} in {} of {} at step {}", r ? "; " : "", r, collective_text(h.coll),
                   h.members.empty() ? std::string("nothing") : join(h.members), h.step);
  }
  return out;
}

bool is_cross_paired(const Observation& o) { return o.status == Status::Ok && o.message.rfind(kCrossPaired, 0) == 0; }

std::string names_set_text(const std::vector<std::string>& names) { return "{" + join(names) + "}"; }
std::string names_set_text(const std::vector<Name>& names) { return "{" + join(names) + "}"; }

std::string owner_bytes_text(const std::vector<OwnerBytes>& v) {
  std::string s;
  for (const auto& x : v) fmt::format_to(std::back_inserter(s), "{}{}:{}", s.empty() ? "" : " ", x.owner.str(), x.bytes);
  return s.empty() ? std::string("-") : s;
}

namespace {

// Each value type's text in observation_diff.
std::string diff_text(int v) { return fmt::format("{}", v); }
std::string diff_text(int64_t v) { return fmt::format("{}", v); }
std::string diff_text(bool v) { return v ? "true" : "false"; }
std::string diff_text(const std::string& v) { return v; }
std::string diff_text(Status v) { return status_name(v); }
std::string diff_text(const std::vector<Name>& v) { return names_set_text(v); }
std::string diff_text(const std::optional<std::vector<Name>>& v) { return v ? names_set_text(*v) : "-"; }
std::string diff_text(const GroupObs& g) { return fmt::format("{}:{}", g.name.str(), sharded_state_name(g.state)); }
std::string diff_text(const ParamObs& p) {
  return fmt::format("{}@{} S.rg={} U.rg={} {}/{}", p.name.str(), p.group.str(), p.rg_s ? "1" : "0",
                     p.rg_u < 0 ? "-" : p.rg_u ? "1" : "0", device_name(p.device), dtype_name(p.dtype));
}
std::string diff_text(const LayerObs& l) {
  return fmt::format("{}@{} merged=[{}] stored={} registered={}", l.name.str(), l.group.str(), join(l.merged),
                     weight_class_name(l.stored), weight_class_name(l.registered));
}
std::string diff_text(const Collective& c) {
  // a wire dtype other than fp32 (a mixed_precision policy's) is named: it may be what differs
  std::string s = collective_text(c) + (c.op != CollOp::Broadcast && c.dtype != DType::F32 ? fmt::format(" {}", dtype_name(c.dtype)) : "") + "[";
  for (size_t i = 0; i < c.parts.size(); ++i) fmt::format_to(std::back_inserter(s), "{}{}:{}", i ? "," : "", c.parts[i].param.str(), c.parts[i].numel);
  return s + "]";
}
std::string diff_text(const DeltaObs& x) { return fmt::format("{}:{}", x.adapter.str(), weight_class_name(x.value)); }
std::string diff_text(const SavedObs& x) { return fmt::format("{}:{}/{}:{}", x.name.str(), x.rows, x.full_rows, dtype_name(x.dtype)); }
std::string diff_text(const std::vector<OwnerBytes>& v) { return owner_bytes_text(v); }
template <typename T>
std::string diff_text(const std::vector<T>& v) {  // a whole list on one line, "-" when empty
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + diff_text(x);
  return s.empty() ? std::string("-") : s;
}

template <typename T>
struct ElementWise : std::false_type {};  // lists compared element by element: "param[3]: ... vs ..."
template <>
struct ElementWise<std::vector<GroupObs>> : std::true_type {};
template <>
struct ElementWise<std::vector<ParamObs>> : std::true_type {};
template <>
struct ElementWise<std::vector<LayerObs>> : std::true_type {};

}  // namespace

namespace {

// Two values of one field as the comparison sees them: an evidence text up to kGlooSaid.
template <typename T>
bool same_value(const FieldInfo& f, const T& x, const T& y) {
  if (x == y) return true;
  if constexpr (std::is_same_v<T, std::string>)
    if (f.flags & kEvidence) return message_words(x) == message_words(y);
  return false;
}

}  // namespace

bool Observation::operator==(const Observation& o) const {
  bool same = true;
  for_each_field_pair(*this, o, [&](const FieldInfo& f, const auto& x, const auto& y) {
    if (!(f.flags & kNotCompared)) same = same && same_value(f, x, y);
  });
  return same;
}

std::vector<std::string> observation_diff(const Observation& a, const Observation& b) {
  std::vector<std::string> d;
  auto add = [&](const std::string& label, const std::string& x, const std::string& y) {
    if (x != y) d.push_back(fmt::format("{}: {} vs {}", label, x, y));
  };
  for_each_field_pair(a, b, [&](const FieldInfo& f, const auto& x, const auto& y) {
    if (f.flags & kNotCompared) return;
    using T = std::decay_t<decltype(x)>;
    // Equal values have equal texts: most fields of most pairs are equal, and their texts cost.
    if (same_value(f, x, y)) return;
    if constexpr (ElementWise<T>::value) {
      for (size_t i = 0; i < std::max(x.size(), y.size()); ++i)
        if (i >= x.size() || i >= y.size() || !(x[i] == y[i]))
          add(fmt::format("{}[{}]", f.label, i), i < x.size() ? diff_text(x[i]) : "-",
              i < y.size() ? diff_text(y[i]) : "-");
    } else {
      add(f.label, diff_text(x), diff_text(y));
    }
  });
  return d;
}

void print_json_string(std::ostream& os, const std::string& s) {
  os << '"';
  for (char c : s) {
    if (c == '"' || c == '\\') os << '\\' << c;
    else if (static_cast<unsigned char>(c) < 0x20) os << "\\u00" << "0123456789abcdef"[(c >> 4) & 15] << "0123456789abcdef"[c & 15];
    else os << c;
  }
  os << '"';
}

namespace {

// Compact per-layer text: "lin0:[default]" only where something is merged or
// the stored weight is not exact; "-" when every layer is clean.
std::string layers_cell(const Observation& o) {
  std::string out;
  for (const auto& l : o.layers) {
    if (l.merged.empty() && l.stored == WeightClass::Exact && l.registered == WeightClass::Exact) continue;
    auto to = std::back_inserter(out);
    fmt::format_to(to, "{}{}:[{}]", out.empty() ? "" : " ", l.name.str(), join(l.merged));
    if (l.stored != WeightClass::Exact) fmt::format_to(to, "/S={}", weight_class_name(l.stored));
    if (l.registered != WeightClass::Exact) fmt::format_to(to, "/reg={}", weight_class_name(l.registered));
  }
  return out.empty() ? "-" : out;
}

std::string groups_cell(const Observation& o) {
  std::string out;
  for (const auto& g : o.groups)
    fmt::format_to(std::back_inserter(out), "{}{}:{}", out.empty() ? "" : " ", g.name.str(), g.state == ShardedState::Sharded ? "S" : "U");
  return out;
}

// Adapters whose shard requires grad, and those whose registered U (group
// unsharded now) disagrees with S.
std::string trainable_cell(const Scenario& s, const Observation& o) {
  std::vector<std::string> on;
  std::vector<std::string> drift;
  auto unsharded = [&](const std::string& g) {
    for (const auto& x : o.groups)
      if (x.name == g) return x.state == ShardedState::Unsharded;
    return false;
  };
  for (const auto& p : o.params) {
    std::string adapter = s.owner_of_param(p.name);  // from the declarations, not by splitting the name
    if (p.rg_s && std::find(on.begin(), on.end(), adapter) == on.end()) on.push_back(adapter);
    if (p.rg_u >= 0 && (p.rg_u != 0) != p.rg_s && unsharded(p.group) && std::find(drift.begin(), drift.end(), adapter) == drift.end())
      drift.push_back(adapter);
  }
  std::string out = names_set_text(on);
  if (!drift.empty()) out += " U!=S:" + names_set_text(drift);
  return out;
}

}  // namespace

std::string colls_cell(const Observation& o) {
  int ag = 0, rs = 0, bc = 0;
  int64_t agn = 0, rsn = 0, bcn = 0;
  for (const auto& c : o.collectives) {
    if (c.op == CollOp::AllGather) ++ag, agn += c.count;
    else if (c.op == CollOp::ReduceScatter) ++rs, rsn += c.count;
    else ++bc, bcn += c.count;
  }
  if (!ag && !rs && !bc) return "-";
  std::string out;
  auto to = std::back_inserter(out);
  if (ag) fmt::format_to(to, "ag {}x{}", ag, agn);
  if (rs) fmt::format_to(to, "{}rs {}x{}", out.empty() ? "" : " ", rs, rsn);
  if (bc) fmt::format_to(to, "{}bc {}x{}", out.empty() ? "" : " ", bc, bcn);
  return out;
}

// Adapter parameters not on cpu/fp32, grouped by placement: "meta/bf16:{a} cpu/bf16:{b}".
std::string placement_cell(const Scenario& s, const Observation& o) {
  std::vector<std::pair<std::string, std::vector<std::string>>> by;
  for (const auto& p : o.params) {
    if (p.device == Device::Cpu && p.dtype == DType::F32) continue;
    std::string key = fmt::format("{}/{}", device_name(p.device), dtype_name(p.dtype));
    std::string adapter = s.owner_of_param(p.name);
    auto it = std::find_if(by.begin(), by.end(), [&](const auto& e) { return e.first == key; });
    if (it == by.end()) it = by.insert(by.end(), {key, {}});
    if (std::find(it->second.begin(), it->second.end(), adapter) == it->second.end()) it->second.push_back(adapter);
  }
  std::string out;
  for (const auto& [k, v] : by) fmt::format_to(std::back_inserter(out), "{}{}:{}", out.empty() ? "" : " ", k, names_set_text(v));
  return out.empty() ? "-" : out;
}

// What delta_weight computed and what save_adapters wrote, when the op did.
std::string detail_cell(const Observation& o) {
  std::string out;
  auto to = std::back_inserter(out);
  for (const auto& d : o.deltas) fmt::format_to(to, "{}{}:{}", out.empty() ? "delta " : " ", d.adapter.str(), weight_class_name(d.value));
  if (!o.saved.empty()) {
    int64_t rows = 0, full = 0;
    for (const auto& sv : o.saved) rows += sv.rows, full += sv.full_rows;
    fmt::format_to(to, "{}saved {} tensors, {}/{} rows", out.empty() ? "" : " ", o.saved.size(), rows, full);
  }
  if (!o.reload_diff.empty()) fmt::format_to(to, "{}reload differs: {}", out.empty() ? "" : " ", names_set_text(o.reload_diff));
  return out.empty() ? "-" : out;
}

std::string status_cell(const Observation& o) {
  if (o.status == Status::KeyError) return fmt::format("{} {} ({}/{})", status_name(o.status), o.index, o.opt_missing, o.opt_total);
  return status_name(o.status);
}

void print_table(std::ostream& os, const Scenario& s, const std::vector<Observation>& obs, size_t width) {
  bool placed = false, detail = false;
  for (const auto& o : obs) {
    placed = placed || placement_cell(s, o) != "-";
    detail = detail || detail_cell(o) != "-";
  }
  std::vector<std::string> head = {"step", "rank", "op", "status", "grads", "S.requires_grad", "groups", "merged", "collectives"};
  if (placed) head.push_back("placement");
  if (detail) head.push_back("detail");
  std::vector<std::vector<std::string>> rows;
  for (const auto& o : obs) {
    rows.push_back({fmt::format("{}", o.step), fmt::format("{}", o.rank), o.op, status_cell(o),
                    o.grads ? names_set_text(*o.grads) : "", trainable_cell(s, o), groups_cell(o), layers_cell(o),
                    colls_cell(o)});
    if (placed) rows.back().push_back(placement_cell(s, o));
    if (detail) rows.back().push_back(detail_cell(o));
  }
  rows.insert(rows.begin(), head);
  // step, rank, op and status stay whole; the lists after them are cut first.
  if (print_fitted(os, rows, width, 4))
    os << fmt::format("(long cells wrap to fit {} columns: --wide prints a row a line)\n", width);
  for (const auto& o : obs)
    if (!o.message.empty() && o.status != Status::Ok) os << fmt::format("  step {} rank {}: {}\n", o.step, o.rank, o.message);
}

}  // namespace fsdpsim
