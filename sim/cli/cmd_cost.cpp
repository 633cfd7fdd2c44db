// `fsdpsim cost`: per rank and per adapter, what a sequence costs in sharded
// bytes, collective bytes per training step and peak unsharded bytes.
#include <iostream>

#include "sim/cli/commands.hpp"
#include "sim/cost.hpp"

namespace fsdpsim::cli {

int cmd_cost(const Args& a) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "cost expects exactly one FILE.seq");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file);
  apply_overrides(f, a, file);
  RealPools pools = pools_of(a);
  BackendRun res = run_backend(f, backend_of(a), pools, false);
  if (res.infra_failure) {
    std::cerr << "fsdpsim: real backend failed: " << res.infra_message << "\n";
    return kInfra;
  }
  const bool both = backend_of(a) == Backend::Both;
  CostReport main = cost_report(f, both ? res.model_observations : res.observations);
  std::cout << "fsdpsim cost " << file << "  world " << f.scenario.world << "  profile " << f.scenario.profile
            << "  backend " << (both ? "model" : a.backend) << "\n";
  print_cost(std::cout, main);
  if (!both) return kClean;
  CostReport real = cost_report(f, res.observations);
  std::vector<std::string> d = compare_cost(main, real);
  if (d.empty()) {
    std::cout << "real backend: the same figures, measured from its tensors and collectives\n";
    return kClean;
  }
  std::cout << "real backend (measured):\n";
  print_cost(std::cout, real);
  std::cout << "differences (model vs real): " << d.size() << "\n";
  for (const auto& x : d) std::cout << "  " << x << "\n";
  return kDivergence;
}

}  // namespace fsdpsim::cli
