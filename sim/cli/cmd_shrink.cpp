// `fsdpsim shrink`: the minimal sequence keeping a file's first finding.
#include <iostream>

#include "sim/cli/commands.hpp"
#include "sim/shrink.hpp"

namespace fsdpsim::cli {

namespace {

// `shrink --divergence`: the minimal sequence on which the backends still
// differ in the same way (divergence_signature of the first difference).
int shrink_divergence(const Args& a, const SeqFile& f, const std::string& file) {
  const BackendList backends = a.backends.size() >= 2 ? a.backends : kModelAndReal;
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
  shrink_while(f, &res, [&](const SeqFile& c) {
    BackendRun r = run_backend(c, backends, pools, false);
    if (r.infra_failure) return false;  // a broken run proves nothing
    for (const auto& d : r.divergences)
      if (divergence_signature(d) == target) return true;
    return false;
  }, [](const std::string& line) { std::cerr << "shrink: " << line << "\n"; });
  BackendRun last = run_backend(res.minimal, backends, pools, false);
  res.minimal.comments = {"shrunk from " + file + " by fsdpsim shrink --divergence --backend " + backends_text(backends) + " (" +
                              std::to_string(res.runs) + " runs)",
                          "divergence " + target};
  for (size_t k = 0; k < last.divergences.size() && k < 5; ++k) res.minimal.comments.push_back("  " + last.divergences[k]);
  std::cout << print_seq(res.minimal);
  return kDivergence;
}

}  // namespace

int cmd_shrink(const Args& a) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "shrink expects exactly one FILE.seq");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file);
  apply_overrides(f, a, file);
  if (a.divergence) return shrink_divergence(a, f, file);
  ShrinkResult res;
  bool found = shrink(f, &res, [](const std::string& line) { std::cerr << "shrink: " << line << "\n"; });
  // Nothing to keep is bad input (exit 3), not an empty minimal file:
  // `shrink x > min.seq` must not leave an empty min.seq looking like a result.
  if (!found) throw SourceError(file, {}, "no finding to shrink (the model runs it clean; shrink keeps a file's first finding)");
  res.minimal.comments = {"shrunk from " + file + " by fsdpsim shrink (" + std::to_string(res.runs) + " runs)",
                          "signature " + res.signature};
  std::cout << print_seq(res.minimal);
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
