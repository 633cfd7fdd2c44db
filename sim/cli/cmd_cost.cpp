// `fsdpsim cost`: per rank and per adapter, what a sequence costs in sharded
// bytes, collective bytes per training step and peak unsharded bytes.
#include <iostream>

#include "sim/cli/commands.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/progress.hpp"
#include "sim/core/cost.hpp"

namespace fsdpsim::cli {
namespace {

void print_cost_json(const CostReport& r, Backend backend) {
  for (const auto& row : r.rows)
    JsonRecord("cost_row")
        .str("backend", backend_name(backend)).num("rank", row.rank).str("owner", row.owner).num("sharded_bytes", row.sharded)
        .num("all_gather_bytes", row.all_gather).num("reduce_scatter_bytes", row.reduce_scatter)
        .num("peak_unsharded_bytes", row.peak_unsharded).print(std::cout);
}

// --json: how another backend's figures compare with the first one's.
void print_comparison_json(Backend first, Backend other, const std::string& status, const std::vector<std::string>& differences) {
  JsonRecord("cost_comparison")
      .str("first", backend_name(first)).str("other", backend_name(other)).str("status", status).strs("differences", differences)
      .print(std::cout);
}

}  // namespace

int cmd_cost(const Args& a) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "cost expects exactly one FILE.seq");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file);
  apply_overrides(f, a, file);
  check_memory(f, a, file);
  RealPools pools = pools_of(a);
  BackendRun res = run_backend(f, a.backends, pools, false);
  if (res.infra_failure) {
    std::cerr << "fsdpsim: " << res.infra_message << "\n";
    return kInfra;
  }
  const SingleRun& first = res.runs.front();
  CostReport main = cost_report(f, first.observations);
  if (a.json) {
    JsonRecord("cost")
        .str("file", file).num("world", f.scenario.world).str("profile", f.scenario.profile).str("backend", backend_name(first.backend))
        .num("train_steps", main.train_steps).print(std::cout);
    print_cost_json(main, first.backend);
  } else {
    std::cout << "fsdpsim cost " << file << "  world " << f.scenario.world << "  profile " << f.scenario.profile << "  backend "
              << backend_name(first.backend) << "\n";
    print_cost(std::cout, main);
  }
  int code = kClean;
  // Every other backend's figures, measured from its own observations.
  for (size_t k = 1; k < res.runs.size(); ++k) {
    const SingleRun& other = res.runs[k];
    std::string who = backend_who(other.backend);
    if (other.backend == Backend::Upstream) {
      std::string missing;
      for (const auto& u : pools.upstream_unobserved())
        if (u == "collectives" || u == "sharded_bytes" || u == "peak_unsharded") missing += (missing.empty() ? "" : ", ") + u;
      if (!missing.empty()) {
        if (a.json) {
          print_comparison_json(first.backend, other.backend, "not_compared", {"it does not observe " + missing});
          continue;
        }
        std::cout << who << ": not compared (it does not observe " << missing << ")\n";
        continue;
      }
    }
    std::vector<std::string> d = compare_cost(main, cost_report(f, other.observations));
    if (!d.empty()) code = kDivergence;
    if (a.json) {
      print_comparison_json(first.backend, other.backend, d.empty() ? "same" : "differs", d);
      if (!d.empty()) print_cost_json(cost_report(f, other.observations), other.backend);
      continue;
    }
    if (d.empty()) {
      std::cout << who << ": the same figures, measured from its tensors and collectives\n";
      continue;
    }
    std::cout << who << " (measured):\n";
    print_cost(std::cout, cost_report(f, other.observations));
    std::cout << red(std::string("differences (") + backend_name(first.backend) + " vs " + backend_name(other.backend) +
                     "): " + std::to_string(d.size()))
              << "\n";
    for (const auto& x : d) std::cout << "  " << x << "\n";
  }
  print_upstream_versions(std::cout, pools, a.json);
  return code;
}

}  // namespace fsdpsim::cli
