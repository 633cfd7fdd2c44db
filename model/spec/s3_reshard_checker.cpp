#include "model/spec/s3_reshard_checker.hpp"

#include <fmt/format.h>

namespace fsdpsim::spec {

void S3ReshardChecker::observe(const SpecContext& ctx, const Op& op, const Observation& o, std::vector<Finding>& out) {
  const auto& prev = prev_[o.rank];
  if (!sets_flags(op.kind) && prev) check(ctx, *prev, o, out);
  remember(o);
}

void S3ReshardChecker::remember(const Observation& o) {
  if (borrow_) {
    prev_[o.rank] = std::shared_ptr<const Observation>(std::shared_ptr<const Observation>(), &o);  // owns nothing
    return;
  }
  // Only what S3 reads of it is kept (the explorer holds a checker per reached state).
  auto prev = std::make_shared<Observation>();
  prev->step = o.step;
  prev->rank = o.rank;
  prev->groups = o.groups;
  prev->params = o.params;
  prev->layers = o.layers;
  prev_[o.rank] = std::move(prev);
}

void S3ReshardChecker::check(const SpecContext& ctx, const Observation& prev, const Observation& o,
                             std::vector<Finding>& out) const {
  struct Clause {
    std::string group, what;
    int count;
  };
  std::vector<Clause> clauses;  // built only once a change is lost
  auto add = [&](const std::string& g, const std::string& what) {
    for (auto& c : clauses)
      if (c.group == g && c.what == what) return void(++c.count);
    clauses.push_back({g, what, 1});
  };
  for (const auto& g : o.groups) {
    if (g.state != ShardedState::Sharded || !unsharded(prev, g.name)) continue;
    for (const auto& p : o.params) {
      if (p.group != g.name) continue;
      for (const auto& q : prev.params)
        if (q.name == p.name && q.rg_u >= 0 && (q.rg_u != 0) != p.rg_s)
          add(g.name, fmt::format("{}.requires_grad U={} S={}", ctx.scenario().owner_of_param(p.name), q.rg_u ? "true" : "false",
                                  p.rg_s ? "true" : "false"));
    }
    for (size_t l = 0; l < o.layers.size() && l < prev.layers.size(); ++l) {
      const LayerObs& now = o.layers[l];
      const LayerObs& was = prev.layers[l];
      if (now.group == g.name && was.merged == now.merged && was.registered != now.stored)
        add(g.name, fmt::format("{}.weight values edited on U (merge/unmerge/load)", now.name.str()));
    }
  }
  if (clauses.empty()) return;
  std::string detail = "reshard dropped changes made on the unsharded copy:";
  std::string last;
  for (size_t i = 0; i < clauses.size(); ++i) {
    const Clause& c = clauses[i];
    auto to = std::back_inserter(detail);
    if (i == 0 || c.group != last) fmt::format_to(to, "{}group {}: ", i ? "; " : " ", c.group);
    else detail += ", ";
    last = c.group;
    detail += c.what;
    if (c.count > 1) fmt::format_to(to, " ({} params)", c.count);
  }
  out.push_back(finding("S3", o.step, o.rank, detail));
}

void S3ReshardChecker::pack_key(const SpecContext& ctx, KeyWriter& key) const {
  for (const auto& kept : prev_) {
    key.flags({kept != nullptr});
    if (!kept) continue;
    const Observation& prev = *kept;
    key.word(static_cast<uint32_t>(prev.groups.size() << 20 | prev.params.size() << 10 | prev.layers.size()));
    for (const auto& g : prev.groups) key.word(static_cast<uint32_t>(g.state));
    for (const auto& p : prev.params)  // S3 reads U's flag only in groups UNSHARDED then
      key.word(unsharded(prev, p.group) ? static_cast<uint32_t>(p.rg_u + 1) : 0u);
    for (const auto& l : prev.layers) {
      key.word(static_cast<uint32_t>(l.registered) << 8 | static_cast<uint32_t>(l.merged.size()));
      for (const auto& m : l.merged) key.word(ctx.mask_of(m));
    }
  }
}

}  // namespace fsdpsim::spec
