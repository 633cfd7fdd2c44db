// Seeded generation of valid scenarios and op sequences (swarm-style: each
// sequence draws its own topology, adapters, sharding plan and profile).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/vocab/adapter_set.hpp"
#include "model/vocab/seq.hpp"
#include "sim/core/prng.hpp"

namespace fsdpsim {

struct GenOptions {
  int world = 2;
  int min_ops = 4;
  int max_ops = 14;
  int rank_op_percent = 6;  // chance of an `@R` prefix (world > 1)
  // chance of `data per_rank` (then a late add/load is often followed by new_optimizer);
  // 0 draws nothing, so every seed printed before this option means what it meant.
  int per_rank_data_percent = 0;
  // Chance per drawn op of a `gradient_sync` toggle before it (off, then on, ...). 0 (the default)
  // draws none and consumes nothing from the stream, so every recorded --seed keeps its sequence;
  // the hunt sets it for a built-in scenario whose lifecycle uses gradient_sync (hazard B6).
  int gradient_sync_percent = 0;
  // Chance of a `checkpoint` line (hazard B7): each Linear layer wrapped with chance 1/2, at least
  // one. 0 (the default) draws nothing, so every recorded --seed keeps its scenario and ops.
  int checkpoint_percent = 0;
  // Chance of a modules_to_save layer (hazard B8): one Linear, non-checkpointed layer no adapter
  // targets any more, saved by each non-deferred adapter with chance 3/4 (at least one). 0 (the
  // default) draws nothing, so every recorded --seed keeps its scenario and ops.
  int modules_to_save_percent = 0;
  // Chance of a grouped `fully_shard a,b` (two layers, adjacent or not, either order; a third of
  // them with a raising one-expert later member). 0 (the default) draws nothing.
  int grouped_percent = 0;
  // Chance of a mixed-precision policy: a `mixed_precision` line (param_dtype, reduce_dtype,
  // output_dtype, cast_forward_inputs drawn) and now and then one fully_shard overriding a key.
  // 0 (the default) draws nothing, so every recorded --seed keeps its scenario and ops.
  int mixed_precision_percent = 0;
  // Chance of DoRA: `use_dora` on each adapter without an experts target with chance 3/5, at least
  // one. 0 (the default) draws nothing, so every recorded --seed keeps its scenario and ops.
  int dora_percent = 0;
  // Chance of 4-bit bases: `quant=nf4|fp4 [compute_dtype=..]` on each eligible Linear layer with
  // chance 1/2, at least one (draw_qlora). 0 (the default) draws nothing.
  int qlora_percent = 0;
  // `--draw all`: the whole-vocabulary generator (generator_all.cpp), a stream of its own; the
  // percentages above do not apply to it.
  bool all = false;
  // `--draw all2` (all set too): the same generator drawing every op kind, save_model, load_model,
  // merge_and_unload and generate included; a stream of its own, so `all`'s seeds keep theirs.
  bool all2 = false;
  // `--draw models` (100) or `models=P`: a tiny `model` scenario (generator_models.cpp) in P % of
  // the sequences, decided on a stream forked from each sequence's, so the others are what the
  // rest of the list draws; 0 (the default) draws none.
  int models_percent = 0;
  // Features (coverage.hpp's names) every knob drawing them switches on: coverage's forced draws.
  std::vector<std::string> force;
};

// The switches `--draw all` overrides one by one (`set NAME=VALUE`): those the profile had when
// its seeds were fixed (the first nine of switch_table()). A switch added later is reached through
// the profiles that set it (`patched`), so a seed keeps printing the sequence it printed.
constexpr int kDrawnSwitches = 9;

// `--draw models` or `models=P` (with any of the lists below): tiny `model` scenarios;
// `--draw all`, `--draw all,mixed_precision=P,dora=P,qlora=P` (the whole vocabulary with a policy line,
// all2 for every op kind,
// DoRA adapters or 4-bit bases in P % of the sequences) or
// `--draw checkpoint=P,gradient_sync=P,per_rank_data=P,modules_to_save=P,grouped=P,mixed_precision=P,dora=P,qlora=P`
// (percentages 0..100) onto opt; returns an error text naming what was expected, or "" when the list is good.
std::string apply_draws(const std::string& list, GenOptions* opt);

// Replaces the own fully_shard lines of layers a and b (a != b, not the root's) by one grouped
// `fully_shard a,b`, packed in that order, before the root's line; `raising`: the later layer of
// the two becomes a one-expert ParamWrapper, whose forward raises (the generator, the fuzzer's
// mutator and its byte decoder draw it).
void group_layers(Scenario& s, int a, int b, Raf raf, bool raising);

// The hunt's swarm, per sequence: a generated scenario at `world` with checkpoint and grouped
// draws; with `wide_worlds` at world 2 a quarter of the sequences go to world 3 or 4
// (padding-only ranks).
GenOptions swarm_options(Prng& rng, int world, bool wide_worlds);

// What files hold of the grouping draws, counted over many (the tests of the generator, the hunt's
// swarm and the fuzzer's mutator): grouped fully_shard lines over adjacent and apart layers, in
// either order, with a raising (one-expert) later member; worlds 3-4 where a rank holds only
// padding rows of a managed tensor.
struct DrawsReached {
  int grouped = 0, adjacent = 0, apart = 0, reversed = 0, raising = 0, padded = 0;
  void count(const SeqFile& f);
  bool every_grouping_draw() const { return adjacent && apart && reversed && raising && padded; }
};

// Op kinds drawn by weight: x in [0, kOpWeightTotal).
constexpr uint32_t kOpWeightTotal = 103;
OpKind weighted_op_kind(uint32_t x);

// PEFT builds the declared adapters only when all that target experts layers target the
// same ones (lora/model.py::_check_new_adapter_config): later ones take the first's.
void share_experts_targets(Scenario& s);
// A modules_to_save layer: one Linear, non-checkpointed layer no adapter targets any more, saved
// by each non-deferred adapter with chance 3/4 (at least one).
void draw_saved_module(Prng& rng, Scenario& s);
// A MixedPrecisionPolicy for every fully_shard (mostly accelerate's bf16 compute), and with chance
// 1/5 one call overriding a key of it.
void draw_mixed_precision(Prng& rng, Scenario& s);
// use_dora on each adapter that is neither deferred nor targets an experts layer, with chance 3/5 (at least one).
void draw_dora(Prng& rng, Scenario& s);
// quant= on each Linear layer that is not saved nor a DoRA target with chance 1/2 (at least one).
void draw_qlora(Prng& rng, Scenario& s);
bool qlora_eligible(const Scenario& s, const LayerDecl& l);
// An adapter's name, r, alpha and targets (each layer with chance 3/4, at least one), drawn in
// that order: both generators draw their adapters' shape this way.
AdapterDecl draw_adapter_shape(Prng& rng, const Scenario& s, const char* name);
Scenario generate_scenario(Prng& rng, const GenOptions& opt);
// The seed-001 lifecycle: deferred adapters loaded before an explicit prepare
// (each with chance(70), trainable with chance(50)), sometimes all made active
// through base_model.set_adapter, then `prepare`. *present: bit a = adapter a
// in the model (the declared ones on entry), updated.
std::vector<Op> ops_before_prepare(const Scenario& s, const std::function<bool(uint32_t)>& chance, AdapterSet* present);
std::vector<Op> generate_ops(Prng& rng, const Scenario& s, const GenOptions& opt);
SeqFile generate_seq(Prng& rng, const GenOptions& opt);
// The whole-vocabulary generator; `gate`: draw again until the parser's checks (validate) accept.
SeqFile generate_seq_all(Prng& rng, const GenOptions& opt, bool gate = true);
// save_model full|sharded (chance 1/2) or load_model full|sharded|plain (1/3 each): both generators' draw.
std::string draw_state_dict_form(Prng& rng, OpKind k);
// `--draw models`: a tiny transformers `model` scenario both the model and the upstream backend run
// (generator_models.cpp), drawn again until the parser and the model's lowering accept it.
SeqFile generate_seq_models(Prng& rng, const GenOptions& opt);

}  // namespace fsdpsim
