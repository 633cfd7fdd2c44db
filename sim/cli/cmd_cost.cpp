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
  BackendRun res = run_backend(f, a.backends, pools, false);
  if (res.infra_failure) {
    std::cerr << "fsdpsim: " << res.infra_message << "\n";
    return kInfra;
  }
  const SingleRun& first = res.runs.front();
  CostReport main = cost_report(f, first.observations);
  std::cout << "fsdpsim cost " << file << "  world " << f.scenario.world << "  profile " << f.scenario.profile
            << "  backend " << backend_name(first.backend) << "\n";
  print_cost(std::cout, main);
  int code = kClean;
  // Every other backend's figures, measured from its own observations.
  for (size_t k = 1; k < res.runs.size(); ++k) {
    const SingleRun& other = res.runs[k];
    std::string who = backend_who(other.backend);
    if (other.backend == Backend::Upstream) {
      std::string missing;
      for (const auto& u : pools.upstream().unobserved())
        if (u == "collectives" || u == "sharded_bytes" || u == "peak_unsharded") missing += (missing.empty() ? "" : ", ") + u;
      if (!missing.empty()) {
        std::cout << who << ": not compared (it does not observe " << missing << ")\n";
        continue;
      }
    }
    std::vector<std::string> d = compare_cost(main, cost_report(f, other.observations));
    if (d.empty()) {
      std::cout << who << ": the same figures, measured from its tensors and collectives\n";
      continue;
    }
    std::cout << who << " (measured):\n";
    print_cost(std::cout, cost_report(f, other.observations));
    std::cout << "differences (" << backend_name(first.backend) << " vs " << backend_name(other.backend) << "): " << d.size()
              << "\n";
    for (const auto& x : d) std::cout << "  " << x << "\n";
    code = kDivergence;
  }
  print_upstream_versions(std::cout, pools, false);
  return code;
}

}  // namespace fsdpsim::cli
