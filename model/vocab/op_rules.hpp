// Which op is legal where: the one statement of it that the parser's semantic
// checks (validate), the generator, RapidCheck's commands (properties/rc_vocab)
// and the fuzzer (fuzz/lifecycle_input) all read.
//
// Two levels. What a `.seq` file may hold at all (the static members): such a
// file may still run into an error (a backward with no graph is reported, not
// refused). What a drawn sequence may do next (an OpRules value walking the
// ops): the draws avoid ops that would only raise, so that each sequence keeps
// exercising the lifecycle.
#pragma once
#include <string>
#include <vector>

#include "model/vocab/adapter_set.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim {

class OpRules {
 public:
  // --- what any file may hold ---

  // Ops before an explicit `prepare` run on the plain (not yet sharded) PEFT model:
  // adapter bookkeeping only (load, add, set, delete), on every rank.
  static bool adapter_bookkeeping(OpKind k);
  static bool allowed_before_prepare(const Op& op);
  // add_adapter / load_adapter inject an adapter (peft_model.py::PeftModel.add_adapter,
  // PeftModel.load_adapter); only a `deferred` one is not in the model already. A file may load
  // any adapter: PeftModel.load_adapter of a name in peft_config loads into the existing one.
  static bool injects(OpKind k) { return k == OpKind::AddAdapter || k == OpKind::LoadAdapter; }
  static bool may_inject(const Scenario& s, int adapter) { return s.adapters[adapter].deferred; }
  static bool may_name(const Scenario& s, OpKind k, int adapter) { return k == OpKind::LoadAdapter || may_inject(s, adapter); }
  // Every name the op carries is declared: an adapter, or for reshard/unshard/delta_weight a
  // layer (or `root` for reshard/unshard).
  static bool names_declared(const Scenario& s, const Op& op);
  // The op fits the file: names declared, only deferred adapters injected, its `@R` in the world.
  static bool file_may_hold(const Scenario& s, const Op& op);
  // Its FSDP2 hazards have a known fix (the `patched` profile's), so a finding on it is a bug
  // of the model or a new upstream problem: one of these kinds, not an `@R` op (rank-divergent
  // programs), not base_model.set_adapter([..]) (no FSDP handling at all).
  static bool has_known_fix(OpKind k);
  static bool has_known_fix(const Op& op) { return op.rank < 0 && !op.list_form && has_known_fix(op.kind); }
  // Why the model cannot run a merge_and_unload among `ops` (peft_model.cpp covers LoRA on plain
  // Linear layers managed from the start, none its own FSDP unit, then only ops reaching no
  // adapter), with the line in *at; "" when it can (or there is none).
  static std::string unload_unmodelled(const Scenario& s, const std::vector<Op>& ops, SourcePos* at);
  // Why the model cannot run a `generate` among `ops` on a `model` scenario: one before the
  // sequence's first forward (eval, train_step), when each child unit's pre-forward would run FSDP's
  // lazy init as a root of its own; "" when it can.
  static std::string generate_unmodelled(const Scenario& s, const std::vector<Op>& ops, SourcePos* at);
  // The ops the model runs after a merge_and_unload: forwards, training, resharding, saves.
  static bool runs_after_unload(OpKind k);

  // --- what a drawn sequence may do next ---

  // Drawn with an `@R`: the ranks' programs then still pair often enough.
  static bool rank_safe(OpKind k);
  // The modules reshard/unshard draw: root and each member of every other fully_shard line.
  static std::vector<std::string> shard_modules(const Scenario& s);

  // The state after get_peft_model: the declared (non-deferred) adapters in the model.
  explicit OpRules(const Scenario& s);
  // A kind may come next, whatever its names: a backward needs a graph, disable_enter/exit
  // alternate, add/load need an addable adapter, delete leaves one, the loads need their save.
  bool possible(OpKind k) const;
  // The op's names fit the state: adapters present (set_adapter names one at least), an
  // addable adapter injected, a drawn module.
  bool names_legal(const Scenario& s, const Op& op) const;
  // Its `@R` (if any) is allowed: `ranked` draws, a rank_safe kind, a rank in the world.
  static bool rank_legal(const Scenario& s, const Op& op, bool ranked);
  // The state after the op.
  void apply(const Scenario& s, const Op& op);

  AdapterSet present() const { return present_; }
  // Deferred adapters not in the model, in adapter order: what add/load may inject.
  std::vector<int> addable() const;
  bool graph() const { return graph_; }
  bool disabled() const { return disabled_; }

 private:
  AdapterSet deferred_;
  AdapterSet present_;
  bool graph_ = false;            // a grad-enabled forward awaits its backward
  bool disabled_ = false;         // inside disable_adapter()
  bool saved_optimizer_ = false;  // a checkpoint of the current optimizer exists
  bool saved_adapters_ = false;   // save_adapters ran
  bool unloadable_ = false;       // the model covers a merge_and_unload of this scenario
  bool unloaded_ = false;         // merge_and_unload ran: only runs_after_unload kinds follow
  bool model_ = false;            // a `model` scenario: generate skips the root unit's hooks
  bool forwarded_ = false;        // a forward, eval or train_step ran (FSDP's lazy init)
};

}  // namespace fsdpsim
