// `fsdpsim shrink`: the minimal sequence keeping a file's first finding.
#include <iostream>

#include "sim/cli/commands.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/progress.hpp"
#include "sim/core/shrink.hpp"

namespace fsdpsim::cli {

namespace {

// The minimal file, as text or (--json) one shrunk record.
void print_shrunk(const Args& a, const ShrinkResult& res, const std::string& file, const char* keeps, const std::string& signature) {
  if (!a.json) {
    std::cout << print_seq(res.minimal);
    return;
  }
  JsonRecord("shrunk")
      .str("file", file).str("keeps", keeps).str("signature", signature).num("runs", res.runs)
      .num("ops", static_cast<int64_t>(res.minimal.ops.size())).num("world", res.minimal.scenario.world).str("seq", print_seq(res.minimal))
      .print(std::cout);
}

// `shrink --divergence`: the minimal sequence on which the backends still
// differ in the same way (divergence_signature of the first difference).
int shrink_divergence(const Args& a, const SeqFile& f, const std::string& file) {
  const BackendList backends = a.backends.size() >= 2 ? a.backends : kModelAndReal;
  Args budget = a;
  budget.backends = backends;
  check_memory(f, budget, file);  // the candidates are smaller: the file's peak bounds theirs
  RealPools pools = pools_of(a);
  BackendRun first = run_backend(f, backends, pools, false);
  if (first.infra_failure) {
    std::cerr << "fsdpsim: " << first.infra_message << "\n";
    return kInfra;
  }
  if (first.divergences.empty())
    throw SourceError(file, {}, "no divergence to shrink (" + backends_text(backends) + " agree on it)");
  const std::string target = divergence_signature(first.divergences[0]);
  ShrinkResult res;
  Progress progress("shrink", a.quiet);
  shrink_while(f, &res, [&](const SeqFile& c) {
    BackendRun r = run_backend(c, backends, pools, false);
    if (r.infra_failure) return false;  // a broken run proves nothing
    for (const auto& d : r.divergences)
      if (divergence_signature(d) == target) return true;
    return false;
  }, [&progress](const std::string& line) { progress.status(line); });
  progress.done();
  BackendRun last = run_backend(res.minimal, backends, pools, false);
  res.minimal.comments = {"shrunk from " + file + " by fsdpsim shrink --divergence --backend " + backends_text(backends) + " (" +
                              std::to_string(res.runs) + " runs)",
                          "divergence " + target};
  for (size_t k = 0; k < last.divergences.size() && k < 5; ++k) res.minimal.comments.push_back("  " + last.divergences[k]);
  print_shrunk(a, res, file, "divergence", target);
  return kDivergence;
}

}  // namespace

int cmd_shrink(const Args& a, const ShrinkFlags& own) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "shrink expects exactly one FILE.seq");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file);
  apply_overrides(f, a, file);
  if (own.divergence) return shrink_divergence(a, f, file);
  ShrinkResult res;
  Progress progress("shrink", a.quiet);
  bool found = shrink(f, &res, [&progress](const std::string& line) { progress.status(line); });
  progress.done();
  // Nothing to keep is bad input (exit 3), not an empty minimal file:
  // `shrink x > min.seq` must not leave an empty min.seq looking like a result.
  if (!found) throw SourceError(file, {}, "no finding to shrink (the model runs it clean; shrink keeps a file's first finding)");
  res.minimal.comments = {"shrunk from " + file + " by fsdpsim shrink (" + std::to_string(res.runs) + " runs)",
                          "signature " + res.signature};
  print_shrunk(a, res, file, "finding", res.signature);
  return kFinding;
}

}  // namespace fsdpsim::cli

namespace fsdpsim::cli {

// `fsdpsim expect FILE.seq`: the file with every op's expectations replaced by
// what the model observes (how a finding becomes a regression).
int cmd_expect(const Args& a) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "expect expects exactly one FILE.seq");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file);
  apply_overrides(f, a, file);
  fill_expectations(f, run_checked(f));
  std::cout << print_seq(f);
  return kClean;
}

}  // namespace fsdpsim::cli
