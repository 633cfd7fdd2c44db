#include "sim/findings/expectations.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "model/vocab/text.hpp"

namespace fsdpsim {
namespace {

std::string pos_text(const std::string& file, SourcePos p) {
  return fmt::format("{}:{}:{}", file, p.line, p.column);
}

std::string status_text(const Observation& o) {
  return o.status == Status::Ok ? "ok" : fmt::format("error={}", status_name(o.status));
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
      if (o.status == Status::Ok) return "";
      return o.message.empty() ? status_text(o) : fmt::format("{} ({})", status_text(o), o.message);
    case ExpectItem::Key::Error:
      return o.status == it.status ? "" : status_text(o);
    case ExpectItem::Key::Grads:
      if (!o.grads) return "no gradient observation (not a training op)";
      if (o.status != Status::Ok) return status_text(o);
      return same_set(texts_of(*o.grads), it.names) ? "" : fmt::format("grads={}", names_set_text(*o.grads));
    case ExpectItem::Key::Index:
      return o.index == it.a ? "" : fmt::format("index={}", o.index);
    case ExpectItem::Key::Missing:
      return o.opt_missing == it.a && o.opt_total == it.b ? "" : fmt::format("missing={}/{}", o.opt_missing, o.opt_total);
    case ExpectItem::Key::Stored:
      for (const auto& l : o.layers) {
        if (l.name != it.target) continue;
        const char* got = weight_class_name(l.stored);
        return it.value == got ? "" : fmt::format("stored={}:{}", l.name.str(), got);
      }
      return fmt::format("no layer {}", it.target);
    case ExpectItem::Key::Merged:
      for (const auto& l : o.layers) {
        if (l.name != it.target) continue;
        if (same_texts(l.merged, it.names)) return "";
        return fmt::format("merged={}:[{}]", l.name.str(), join(l.merged));
      }
      return fmt::format("no layer {}", it.target);
    case ExpectItem::Key::State:
      for (const auto& g : o.groups) {
        if (g.name != it.target) continue;
        const char* got = sharded_state_name(g.state);
        return it.value == got ? "" : fmt::format("state={}:{}", g.name.str(), got);
      }
      return fmt::format("no group {}", it.target);
    case ExpectItem::Key::Placed:
      for (const auto& p : o.params) {
        if (p.name != it.target) continue;
        std::string got = fmt::format("{}/{}", device_name(p.device), dtype_name(p.dtype));
        return got == it.value ? "" : fmt::format("placed={}:{}", p.name.str(), got);
      }
      return fmt::format("no adapter parameter {}", it.target);
    case ExpectItem::Key::Finding:
      for (const auto& f : findings)
        if (f.spec == it.target && f.step == step && (f.rank < 0 || f.rank == o.rank)) return "";
      return fmt::format("no {} finding", it.target);
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
          out.push_back({fmt::format("{}: step {} rank {}: the op never ran (an earlier collective hang or mismatch "
                                     "stopped this rank)",
                                     pos_text(file, e.pos), step, r)});
          continue;
        }
        for (const auto& it : e.items) {
          std::string got = check_item(it, *o, findings, step);
          if (got.empty()) continue;
          out.push_back({fmt::format("{}: step {} rank {}: expected {}, got {}", pos_text(file, it.pos), step, r,
                                     expect_item_text(it), got)});
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
      out.push_back({fmt::format("{}: unexpected finding: {}", pos_text(file, p), fd.text)});
    }
  }
  return out;
}

}  // namespace fsdpsim
