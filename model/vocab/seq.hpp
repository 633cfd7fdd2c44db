// A `.seq` file: scenario header, `---`, ops with `expect` clauses.
// print(parse(text)) is canonical and parse(print(x)) == x.
#pragma once
#include <string>
#include <vector>

#include "model/vocab/op.hpp"
#include "model/vocab/scenario.hpp"

namespace fsdpsim {

struct SeqFile {
  std::vector<std::string> comments;  // leading `#` lines, kept verbatim (without "# ")
  Scenario scenario;
  std::vector<Op> ops;
  SourcePos separator;  // the `---` line: where errors about the scenario as a whole point
  bool operator==(const SeqFile& o) const {
    return comments == o.comments && scenario == o.scenario && ops == o.ops;
  }
};

// Throws SourceError("file:line:col: expected ...") on any malformed or
// inconsistent input (unknown op, adapter, layer, switch; `@R` out of range).
SeqFile parse_seq(const std::string& text, const std::string& file = "<input>");
// A file every command runs: a `model` scenario is refused there (file:line:column at its `model`
// line, exit 3), since no backend executes one yet (docs/design/known-limits.md); `allow_model`
// (`fsdpsim scenario`, which prints it) takes it.
SeqFile parse_seq_file(const std::string& path, bool allow_model = false);
// Why a `model` scenario cannot run yet: the one line every command that would run it gives.
std::string model_scenario_refusal();

std::string print_seq(const SeqFile& f);
std::string print_scenario(const Scenario& s);
// " param_dtype=bf16 reduce_dtype=fp32": the keys a MixedPrecision sets, each with a leading blank.
std::string mixed_precision_text(const MixedPrecision& m);
std::string expect_item_text(const ExpectItem& it);  // "grads={other}"

// Which ops may come before an explicit `prepare`, and the other rules on ops:
// model/vocab/op_rules.hpp.
// The index of the explicit `prepare` op, -1 when prepare happens before op 1.
int prepare_index(const SeqFile& f);
// Adapters in the model when prepare runs (and so managed by fully_shard): the
// ones declared without `deferred`, plus those the ops before `prepare` add or
// load, minus those they delete. Bit a = adapter a.
uint8_t wrapped_at_prepare(const SeqFile& f);
// Every adapter injected before prepare, deleted since or not: a layer one of
// them targets is a LoRA layer when fully_shard runs (PEFT never unwraps it).
uint8_t injected_before_prepare(const SeqFile& f);
// The `target_parameters` of an adapter's LoraConfig as PEFT prints them, sorted
// (`['lin0.weight', 'lin1.weight']`); "" when it targets no experts layer.
std::string target_parameters_text(const Scenario& s, int adapter);
// peft lora/model.py::LoraModel._check_new_adapter_config: the ValueError adding
// `adapter` raises while the adapters in `present` (a mask) are in the model; "" if none.
// `tp`: target_parameters_text of every adapter.
std::string target_parameters_conflict(const std::vector<std::string>& tp, const std::vector<AdapterDecl>& adapters,
                                       int adapter, uint32_t present);
// The order in which adapters were injected into each LoRA layer when prepare
// runs: the declared ones in file order, then each one a pre-prepare op loads or
// adds (re-adding after a delete moves it to the end), then those never present.
// A layer's lora_A/lora_B ModuleDicts keep insertion order, so named_parameters
// and FSDP2's group members do too (peft/tuners/lora/layer.py::LoraLayer.update_layer).
std::vector<int> adapter_order_at_prepare(const SeqFile& f);
// The three above from one walk of the ops before prepare (compile_topology reads all of them).
struct AdaptersAtPrepare {
  uint8_t wrapped = 0, injected = 0;
  std::vector<int> order;
};
AdaptersAtPrepare adapters_at_prepare(const SeqFile& f);

// Semantic checks shared by the parser and by callers that build files in code
// (the generator, --world overrides). Throws SourceError.
void validate(const SeqFile& f, const std::string& file);

}  // namespace fsdpsim
