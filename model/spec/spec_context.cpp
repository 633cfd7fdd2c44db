#include "model/spec/spec_context.hpp"

#include <fmt/format.h>

namespace fsdpsim::spec {

SpecContext::SpecContext(std::shared_ptr<const Scenario> scenario) : scen_(std::move(scenario)) {
  const auto& ad = scen_->adapters;
  names_.reserve(ad.size());
  for (const auto& a : ad) names_.emplace_back(a.name);
  for (size_t a = 0; a < ad.size() && a < kMaxAdapters; ++a)
    same_name_[a] = mask_of(ad[a].name);
}

Mask SpecContext::mask_of(const std::string& name) const {
  Mask m = 0;
  for (size_t a = 0; a < scen_->adapters.size(); ++a)
    if (scen_->adapters[a].name == name) m |= 1u << a;
  return m;
}

Mask SpecContext::mask_of(const std::vector<std::string>& names) const {
  Mask m = 0;
  for (const auto& n : names) m |= mask_of(n);
  return m;
}

Mask SpecContext::mask_of(Name name) const {
  Mask m = 0;
  for (size_t a = 0; a < names_.size(); ++a)
    if (names_[a] == name) m |= 1u << a;
  return m;
}

Mask SpecContext::mask_of(const std::vector<Name>& names) const {
  Mask m = 0;
  for (Name n : names) m |= mask_of(n);
  return m;
}

Mask SpecContext::owner_mask(const std::string& param) const {
  const int a = scen_->adapter_of_param(param);
  return a < 0 ? 0 : same_name_[a];
}

Mask SpecContext::owner_mask(Name param) const {
  for (const auto& [name, mask] : owners_.seen)
    if (name == param) return mask;
  owners_.seen.emplace_back(param, owner_mask(param.str()));
  return owners_.seen.back().second;
}

Mask SpecContext::present_in(const Observation& o) const {
  Mask m = 0;
  for (const ParamObs& p : o.params) m |= owner_mask(p.name);
  return m;
}

std::string SpecContext::text(Mask m) const {
  std::string out = "{";
  bool first = true;
  for (size_t a = 0; a < scen_->adapters.size(); ++a)
    if ((m >> a) & 1) fmt::format_to(std::back_inserter(out), "{}{}", first ? "" : ",", scen_->adapters[a].name), first = false;
  return out + "}";
}

std::string finding_head(const char* spec, int step, int rank) {
  return rank >= 0 ? fmt::format("{} step {} rank {}: ", spec, step, rank) : fmt::format("{} step {}: ", spec, step);
}

const GroupObs* group_named(const Observation& o, Name group) {
  for (const auto& x : o.groups)
    if (x.name == group) return &x;
  return nullptr;
}

bool unsharded(const Observation& o, Name group) {
  const GroupObs* x = group_named(o, group);
  return x && x->state == ShardedState::Unsharded;
}

bool sets_flags(OpKind k) {
  return k == OpKind::SetAdapter || k == OpKind::DisableEnter || k == OpKind::DisableExit || k == OpKind::AddAdapter ||
         k == OpKind::LoadAdapter || k == OpKind::DeleteAdapter;
}

}  // namespace fsdpsim::spec

namespace fsdpsim {

std::string param_detail(const Observation& o, const std::string& param) {
  for (const auto& p : o.params) {
    if (p.name != param) continue;
    const char* rg_s = p.rg_s ? "true" : "false";
    if (p.group.empty()) return fmt::format("{}: S.requires_grad={} (not managed by FSDP)", p.name.str(), rg_s);
    const GroupObs* g = spec::group_named(o, p.group);
    return fmt::format("{}: S.requires_grad={}, U.requires_grad={}, group {} {}", p.name.str(), rg_s,
                       p.rg_u < 0 ? "none" : p.rg_u ? "true" : "false", p.group.str(), g ? sharded_state_name(g->state) : "?");
  }
  return fmt::format("{}: not in the module", param);
}

}  // namespace fsdpsim
