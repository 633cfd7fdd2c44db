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
#include "sim/core/memory_use.hpp"  // default_memory_budget

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

// The memory a sequence needs on this machine by the cost model: every
// rank's sharded bytes plus its peak unsharded bytes (the model's run of it),
// summed over the ranks, which all run here. Tensors the model does not count
// (gradients, optimizer state, the interpreter) come on top: the default
// budget leaves room for them.
int64_t scenario_peak_bytes(const SeqFile& f);
// "4.3 GB"
std::string bytes_text(int64_t bytes);
// Throws SourceError(file, the largest layer's line) naming both figures when
// the sequence's peak is over `budget` bytes (exit 3: refused before it runs).
void check_memory_budget(const SeqFile& f, int64_t budget, const std::string& file);

}  // namespace fsdpsim
