// The spec (docs/design/spec.md): what a PEFT + FSDP2 user expects, judged on
// observations alone, so the same checks apply to the model and to the real
// backend. A violation is a Finding naming the spec, the op, the rank and the
// objects involved.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/vocab/observation.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim {

struct Finding {
  std::string spec;  // "S1".."S8"
  int step = 0;      // 1-based op index
  int rank = -1;     // -1: not one rank's (S5, S8)
  std::string text;  // full sentence, starting with "S1 step 6 rank 0: ..."
  // Which way the symptom goes, where a spec has more than one root ("extra": S1 gradients on an
  // adapter not meant to train; "missing": none on one meant to): triage keeps it when shrinking.
  std::string kind;
  bool operator==(const Finding& o) const { return spec == o.spec && step == o.step && rank == o.rank && text == o.text; }
};

// S1 the right adapter trains; S2 the held weight equals W0 + merged deltas;
// S3 nothing done on an unsharded copy is lost at reshard; S4 optimizer
// checkpoints save and load; S5 no hang or mismatch, ranks agree (flags,
// merges, dtypes); S6 saved adapters are complete, full size, reload equal;
// S7 get_delta_weight works on sharded parameters.
// `obs` in (step, rank) order, as the simulator and the real backend give them.
std::vector<Finding> check_spec(const SeqFile& f, const std::vector<Observation>& obs);

// The same checks fed one step at a time (the explorer's transitions): what
// they remember between steps is copyable and can be keyed.
class SpecChecker {
 public:
  explicit SpecChecker(const Scenario& s);
  SpecChecker(const SpecChecker& o);
  SpecChecker& operator=(const SpecChecker& o);
  SpecChecker(SpecChecker&& o) noexcept;
  SpecChecker& operator=(SpecChecker&& o) noexcept;
  ~SpecChecker();
  // One step's observations (every rank that ran `op`, in rank order).
  void step(const Op& op, const Observation* obs, size_t n, std::vector<Finding>& out);
  // Words covering everything the checks read on later steps.
  void append_key(std::vector<uint32_t>& out) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// "lin0.lora_A.other: S.requires_grad=false, U.requires_grad=true, group root UNSHARDED"
std::string param_detail(const Observation& o, const std::string& param);

}  // namespace fsdpsim
