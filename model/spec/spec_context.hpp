// What every spec checker reads besides the observation: the declared
// adapters as bit masks, the owners of parameter names, and the wording every
// finding shares. Built once per checked run; nothing here allocates on the
// way to a finding, only when one is worded.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/spec/spec_checks.hpp"
#include "model/vocab/limits.hpp"
#include "model/vocab/observation.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim::spec {

// A set of declared adapters, bit a for the scenario's adapter a.
using Mask = uint32_t;

class SpecContext {
 public:
  // `scenario` is shared by copies of a checker; check_spec lends the caller's.
  explicit SpecContext(std::shared_ptr<const Scenario> scenario);

  const Scenario& scenario() const { return *scen_; }
  int world() const { return scen_->world; }
  size_t layer_count() const { return scen_->layers.size(); }

  // Every declared adapter called `name` (or one of `names`).
  Mask mask_of(const std::string& name) const;
  Mask mask_of(const std::vector<std::string>& names) const;
  // The same for an observation's interned names: pointer compares.
  Mask mask_of(Name name) const;
  Mask mask_of(const std::vector<Name>& names) const;
  // The adapter owning `param`, matched whole against the declarations (none
  // for a base parameter: "base" is no adapter's name, the parser reserves it).
  Mask owner_mask(const std::string& param) const;
  // The same for an interned name, worked out once per name this context sees.
  Mask owner_mask(Name param) const;
  // The adapters whose parameters the rank holds.
  Mask present_in(const Observation& o) const;
  // "{a,b}" in declaration order.
  std::string text(Mask m) const;

 private:
  // The owner of every parameter name this context has seen: matching a name against the
  // declarations compares piece by piece, an interned name's pointer once (a scenario names
  // at most kMaxParams; a run usually a few dozen). A copy starts empty (the explorer copies
  // checkers per state).
  struct OwnerMemo {
    std::vector<std::pair<Name, Mask>> seen;
    OwnerMemo() = default;
    OwnerMemo(const OwnerMemo&) {}
    OwnerMemo& operator=(const OwnerMemo&) {
      seen.clear();
      return *this;
    }
  };

  std::shared_ptr<const Scenario> scen_;
  std::array<Mask, kMaxAdapters> same_name_{};  // per adapter: every adapter declared with its name
  std::vector<Name> names_;                     // per adapter: its declared name, interned
  mutable OwnerMemo owners_;
};

// "S1 step 6 rank 0: " ("S5 step 3: " for a finding of no one rank).
std::string finding_head(const char* spec, int step, int rank);
// A finding of `spec` at the observation's step, worded as head + detail.
inline Finding finding(const char* spec, int step, int rank, const std::string& detail) {
  return {spec, step, rank, finding_head(spec, step, rank) + detail, {}};
}

const GroupObs* group_named(const Observation& o, Name group);
bool unsharded(const Observation& o, Name group);

// Ops that set adapter flags (requires_grad, active adapters).
bool sets_flags(OpKind k);

}  // namespace fsdpsim::spec
