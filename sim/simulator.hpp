// The deterministic N-rank simulator: runs a sequence on N model ranks,
// matches their collectives in issue order, reports a rank waiting for a
// collective no other rank issues (hang) or ranks issuing different ones
// (mismatch) instead of hanging, and runs the spec checks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/machine/rank_model.hpp"
#include "model/spec/spec_checks.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim {

struct RunOptions {
  bool observe = true;     // build Observation records (off for speed)
  bool check_spec = true;  // run the spec checks
};

struct RunResult {
  std::vector<Observation> observations;  // in (step, rank) order
  std::vector<Finding> findings;
  uint64_t trace_hash = 0;
  int64_t rank_ops = 0;  // ops applied, summed over ranks
  bool hang = false, mismatch = false;
};

class Simulator {
 public:
  explicit Simulator(const Topology& topo);
  RunResult run(const std::vector<Op>& ops, const RunOptions& opt = {});
  const std::vector<RankModel>& ranks() const { return ranks_; }

 private:
  struct Pending {
    CollRecord coll;
    int step;
    int obs;  // index of the observation to mark hang/mismatch, -1 when not observing
  };
  bool match();
  void fail_collectives(bool mismatch, RunResult& res);

  const Topology* topo_;
  std::vector<RankModel> ranks_;
  SpecChecker spec_;
  std::vector<std::vector<Pending>> queues_;  // per rank: issued, not yet matched
  std::vector<size_t> heads_;
};

// Runs the sequence twice and compares the trace hashes and observations (S8).
RunResult run_checked(const Topology& topo, const std::vector<Op>& ops, const RunOptions& opt = {});

// Hashes a run's observable outcome (FNV-1a over statuses, grads, collectives).
uint64_t hash_step(uint64_t h, int step, int rank, const OpResult& r, const std::vector<CollRecord>& colls);

}  // namespace fsdpsim
