#include "sim/expectations.hpp"

#include <algorithm>

namespace fsdpsim {
namespace {

std::string pos_text(const std::string& file, SourcePos p) {
  return file + ":" + std::to_string(p.line) + ":" + std::to_string(p.column);
}

std::string status_text(const Observation& o) {
  return o.status == Status::Ok ? "ok" : std::string("error=") + status_name(o.status);
}

bool same_set(std::vector<std::string> a, std::vector<std::string> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

// Returns "" when the item holds, else what was observed.
std::string check_item(const ExpectItem& it, const Observation& o, const std::vector<Finding>& findings, int step) {
  switch (it.key) {
    case ExpectItem::Key::Ok:
      return o.status == Status::Ok ? "" : status_text(o) + (o.message.empty() ? "" : " (" + o.message + ")");
    case ExpectItem::Key::Error:
      return o.status == it.status ? "" : status_text(o);
    case ExpectItem::Key::Grads:
      if (!o.grads) return "no gradient observation (not a training op)";
      if (o.status != Status::Ok) return status_text(o);
      return same_set(texts_of(*o.grads), it.names) ? "" : "grads=" + names_set_text(*o.grads);
    case ExpectItem::Key::Index:
      return o.index == it.a ? "" : "index=" + std::to_string(o.index);
    case ExpectItem::Key::Missing:
      return o.opt_missing == it.a && o.opt_total == it.b ? "" : "missing=" + std::to_string(o.opt_missing) + "/" + std::to_string(o.opt_total);
    case ExpectItem::Key::Stored:
      for (const auto& l : o.layers)
        if (l.name == it.target) return it.value == weight_class_name(l.stored) ? "" : "stored=" + l.name + ":" + weight_class_name(l.stored);
      return "no layer " + it.target;
    case ExpectItem::Key::Merged:
      for (const auto& l : o.layers) {
        if (l.name != it.target) continue;
        if (same_texts(l.merged, it.names)) return "";
        std::string m;
        for (size_t i = 0; i < l.merged.size(); ++i) m += (i ? "," : "") + l.merged[i];
        return "merged=" + l.name + ":[" + m + "]";
      }
      return "no layer " + it.target;
    case ExpectItem::Key::State:
      for (const auto& g : o.groups)
        if (g.name == it.target) return it.value == sharded_state_name(g.state) ? "" : "state=" + g.name + ":" + sharded_state_name(g.state);
      return "no group " + it.target;
    case ExpectItem::Key::Placed:
      for (const auto& p : o.params) {
        if (p.name != it.target) continue;
        std::string got = std::string(device_name(p.device)) + "/" + dtype_name(p.dtype);
        return got == it.value ? "" : "placed=" + p.name + ":" + got;
      }
      return "no adapter parameter " + it.target;
    case ExpectItem::Key::Finding:
      for (const auto& f : findings)
        if (f.spec == it.target && f.step == step && (f.rank < 0 || f.rank == o.rank)) return "";
      return "no " + it.target + " finding";
  }
  return "?";
}

}  // namespace

std::vector<ExpectFailure> check_expectations(const SeqFile& f, const std::vector<Observation>& observations,
                                              const std::vector<Finding>& findings, const std::string& file) {
  std::vector<ExpectFailure> out;
  const int world = f.scenario.world;
  for (size_t i = 0; i < f.ops.size(); ++i) {
    const Op& op = f.ops[i];
    const int step = static_cast<int>(i) + 1;
    for (const auto& e : op.expects) {
      for (int r = 0; r < world; ++r) {
        if (!op.runs_on(r) || (e.rank >= 0 && e.rank != r)) continue;
        const Observation* o = nullptr;
        for (const auto& ob : observations)
          if (ob.step == step && ob.rank == r) o = &ob;
        if (!o) {
          out.push_back({pos_text(file, e.pos) + ": step " + std::to_string(step) + " rank " + std::to_string(r) +
                         ": the op never ran (an earlier collective hang or mismatch stopped this rank)"});
          continue;
        }
        for (const auto& it : e.items) {
          std::string got = check_item(it, *o, findings, step);
          if (got.empty()) continue;
          out.push_back({pos_text(file, it.pos) + ": step " + std::to_string(step) + " rank " + std::to_string(r) +
                         ": expected " + expect_item_text(it) + ", got " + got});
        }
      }
    }
  }
  // A finding nobody announced is a failure too: regressions pin them all.
  for (const auto& fd : findings) {
    bool announced = false;
    if (fd.step >= 1 && fd.step <= static_cast<int>(f.ops.size())) {
      for (const auto& e : f.ops[fd.step - 1].expects)
        for (const auto& it : e.items)
          announced = announced || (it.key == ExpectItem::Key::Finding && it.target == fd.spec &&
                                    (e.rank < 0 || fd.rank < 0 || e.rank == fd.rank));
    }
    if (!announced) {
      SourcePos p = fd.step >= 1 && fd.step <= static_cast<int>(f.ops.size()) ? f.ops[fd.step - 1].pos : SourcePos{1, 1};
      out.push_back({pos_text(file, p) + ": unexpected finding: " + fd.text});
    }
  }
  return out;
}

}  // namespace fsdpsim
