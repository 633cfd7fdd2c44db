// What N adapters cost per rank: sharded bytes, bytes all-gathered and
// reduce-scattered per training step, peak unsharded bytes, split per owner
// (each adapter, then "base"). Computed from observations alone, so the model
// and the real backend give comparable reports.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/vocab/observation.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim {

struct CostRow {
  int rank = 0;
  std::string owner;  // adapter name, "base", or "total"
  int64_t sharded = 0;
  int64_t all_gather = 0;      // in the last train_step
  int64_t reduce_scatter = 0;  // in the last train_step
  int64_t peak_unsharded = 0;  // at the sequence's peak
  bool operator==(const CostRow& o) const {
    return rank == o.rank && owner == o.owner && sharded == o.sharded && all_gather == o.all_gather &&
           reduce_scatter == o.reduce_scatter && peak_unsharded == o.peak_unsharded;
  }
};

struct CostReport {
  std::vector<CostRow> rows;  // per rank: adapters in declaration order, base, total
  int train_steps = 0;        // train_step ops seen on rank 0
};

CostReport cost_report(const SeqFile& f, const std::vector<Observation>& obs);
void print_cost(std::ostream& os, const CostReport& r);
// "rank 0 b all_gather: 640 vs 512" for each differing cell.
std::vector<std::string> compare_cost(const CostReport& model, const CostReport& real);

}  // namespace fsdpsim
