// Root-cause attribution: a finding's root cause is the transition that put
// the offending state there, not the ops before it. The minimal sequence is
// run again with provenance (model/machine/provenance.hpp); the rule of the
// finding's spec reads the pieces that spec reads (a flag on S or U, a stored
// weight, an optimizer identity, a placement, the raise site) and names the
// transitions that last wrote them or dropped a write to them. The id is built
// from those transitions' slugs only, so a longer or other-seed hunt that
// reaches the same mechanism through other ops names it the same.
#pragma once
#include <string>
#include <vector>

#include "model/machine/provenance.hpp"
#include "model/spec/spec_checks.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim {

struct Blame {
  std::string id;               // "flag-on-unsharded-copy/set_adapter"
  std::vector<Tr> transitions;  // the blamed transitions, the writer first
  std::string how;              // one line naming the piece, the writer and the steps
};

// The root cause of finding `fd` of the run of `f` (best on the minimal sequence).
Blame attribute_root_cause(const SeqFile& f, const Finding& fd);

// "set_adapter (peft peft_model.py::PeftModel.set_adapter), to_sharded (...)".
std::string blamed_functions(const Blame& b);

}  // namespace fsdpsim
