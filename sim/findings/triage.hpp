// Triage: a finding's class is its root cause. The sequence is shrunk first
// (ops and scenario), then the class is named by the minimal sequence's shape
// (the ops that remain, the group states they ran in, the scenario traits
// that could not be simplified away, the spec, op and status), and attributed:
// a single `patched` switch whose re-run leaves no finding of its root cause (a known bug with the upstream fix
// the switch cites), a rank-divergent `@R` op it needs (user misuse), or new.
#pragma once
#include <functional>
#include <string>

#include "model/vocab/seq.hpp"
#include "sim/findings/fix_claim.hpp"  // fixing_switch: the verdict's re-run
#include "sim/findings/root_cause.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim {

enum class Verdict { Known, Misuse, New };
const char* verdict_name(Verdict v);  // "known", "misuse", "new"

struct TriageResult {
  SeqFile minimal;            // expectations filled in; comments carry the signature
  std::string signature;      // the class: stable for the same root cause
  std::string key;            // finding_signature of the kept finding ("S1:train_step:no_grad_fn")
  std::string spec;           // "S1"
  std::string symptom;        // the kept finding's text, one line
  bool rank_divergent = false;  // the minimal sequence needs an `@R` op
  Verdict verdict = Verdict::New;
  std::string fix_switch;     // "set_adapter_reshard=unmerge_first" when Known
  std::string fix_cites;      // the switch's upstream file and function / PR
  int runs = 0;               // model runs spent (shrink and attribution)
  Blame root_cause;           // the mechanism (sim/findings/root_cause.hpp): what the catalogue lists
};

// The class signature of finding `fd` of run `r` of `f` (which should be
// minimal already): "S3:ok | eval(S) set_adapter(U) *(U)": spec and status,
// each op up to the finding's with the state of the groups it started in
// (S sharded, U unsharded, M mixed, - before prepare), the finding's own op
// as `*` (it observes the cause), then " | world=2 root_raf=false ..." traits
// the scenario keeps; an `@R` op is written "@set_adapter".
std::string class_signature(const SeqFile& f, const RunResult& r, const Finding& fd);

// Shrinks `f` over ops and scenario keeping its first finding (with `prefer`, "S3:ok", its
// first of that spec and status: a file's recorded class), then names and attributes the
// class. False when `f` has no finding.
bool triage(const SeqFile& f, TriageResult* out, const std::function<void(const std::string&)>& progress = {},
            const std::string& prefer = "");

// The `# signature: ...` comment of a file, "" when it has none.
std::string signature_comment(const SeqFile& f);

// The `# fix: ...` comment of a file ("removed by S (...)" or "no single patched switch
// removes it"), "" when it has none.
std::string fix_comment(const SeqFile& f);

// A file name for a class: "S3-ok-1a2b3c4d" (no extension).
std::string class_file_stem(const TriageResult& t);

}  // namespace fsdpsim
