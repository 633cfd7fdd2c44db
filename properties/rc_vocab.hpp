// RapidCheck generators for the vocabulary: a scenario header and the ops
// over its adapters and layers, legal as sim/core/generator.cpp draws them, so
// that RapidCheck itself shrinks a failing sequence (fewer ops, earlier
// names, smaller layers) instead of a seed fed to our own Prng.
#pragma once
#include <rapidcheck.h>
#include <rapidcheck/state.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <vector>

#include "model/vocab/op_rules.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim {

// RapidCheck prints counterexamples with these (found by ADL).
void showValue(const Scenario& s, std::ostream& os);
void showValue(const Op& op, std::ostream& os);
void showValue(const SeqFile& f, std::ostream& os);
void showValue(const Observation& o, std::ostream& os);  // its JSON line

namespace rcgen {

// A set of op kinds, bit k = OpKind k.
using KindMask = uint32_t;
constexpr KindMask kind_bit(OpKind k) { return KindMask{1} << static_cast<int>(k); }
KindMask kinds(std::initializer_list<OpKind> ks);
// Every kind that may follow prepare (everything but `prepare`).
KindMask after_prepare_kinds();

// The Model of the stateful properties: model/vocab/op_rules.hpp's state walking
// the file's ops (the adapters in the model, a graph awaiting its backward, the
// disable context, the checkpoints saved so far), and what this property draws.
struct OpModel {
  // Shared: RapidCheck keeps copies of the model inside shrinkables that outlive the property's body.
  std::shared_ptr<const Scenario> scenario;
  KindMask allowed = 0;                // the kinds commands may draw
  bool ranked = false;                 // may draw `@R` ops (world > 1)
  bool list_set_adapter = true;        // may draw base_model.set_adapter([..]) (no FSDP handling, fixed or not)
  OpRules rules;

  // The rules as the file's header and ops (its preamble up to prepare) leave them.
  OpModel(const SeqFile& f, KindMask allowed, bool ranked);
  bool legal(const Op& op) const;
  void apply(const Op& op);
};

// One op, legal under `rules`, of an allowed kind (drawn by the generator's weights).
rc::Gen<Op> op(const OpModel& rules);
// A scenario as sim/core/generator.cpp draws them, at `world` ranks.
rc::Gen<Scenario> scenario(int world);
// The ops before the first command: adapters loaded before an explicit
// prepare, always with ram-efficient loading (which needs one), else sometimes.
rc::Gen<std::vector<Op>> preamble(const Scenario& s);
// A whole file: scenario, preamble, then legal ops (with `@R` when world > 1).
rc::Gen<SeqFile> seq_file(int world);

// One op per command: the property's Sut says what happens when it runs.
// Sut::run(const Op&) applies the op and asserts the property's postcondition.
template <class Sut>
struct OpCommand : rc::state::Command<OpModel, Sut> {
  Op op;
  explicit OpCommand(Op o) : op(std::move(o)) {}
  void checkPreconditions(const OpModel& m) const override { RC_PRE(m.legal(op)); }
  void apply(OpModel& m) const override { m.apply(op); }
  void run(const OpModel&, Sut& sut) const override { sut.run(op); }
  void show(std::ostream& os) const override { os << op_text(op); }
};

// The command generator for rc::state::check / rc::state::gen::commands.
template <class Sut>
auto op_commands() {
  return [](const OpModel& m) {
    return rc::gen::map(op(m), [](Op o) {
      return std::shared_ptr<const rc::state::Command<OpModel, Sut>>(std::make_shared<OpCommand<Sut>>(std::move(o)));
    });
  };
}

// Draws a command sequence from m0 (its length `scale` times RapidCheck's size,
// so a property's budget stays small) and runs it on sut, one op per command.
template <class Sut>
void run_commands(const OpModel& m0, Sut& sut, double scale) {
  const auto cmds = *rc::gen::scale(scale, rc::state::gen::commands(m0, op_commands<Sut>()));
  rc::state::runAll(cmds, m0, sut);
}

}  // namespace rcgen
}  // namespace fsdpsim
