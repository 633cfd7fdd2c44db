// Runs a sequence on the model, on the real backend, or on both, and compares
// the two op by op and rank by rank.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "model/spec/spec_checks.hpp"
#include "model/vocab/seq.hpp"
#include "real_backend/launcher.hpp"

namespace fsdpsim {

enum class Backend { Model, Real, Both };

struct BackendRun {
  std::vector<Observation> observations;  // the real ones under Real, the model's otherwise
  std::vector<Observation> model_observations;  // Both: the model's, for the table
  std::vector<Finding> findings;
  std::vector<std::string> divergences;  // Both: "step 5 rank 1 (train_step): grads: {other} vs {}"
  uint64_t trace_hash = 0;
  bool infra_failure = false;
  std::string infra_message;
};

// Keeps one pool of real ranks per world size, reused across sequences.
class RealPools {
 public:
  RealPools(real::RankMode mode, std::chrono::milliseconds timeout) : mode_(mode), timeout_(timeout) {}
  real::RealRanks& get(int world);

 private:
  real::RankMode mode_;
  std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<real::RealRanks>> pools_;
};

// Model: simulated twice (S8) and spec-checked. Real: run twice on the pool
// (S8) and spec-checked. Both: both, plus the op-by-op comparison.
BackendRun run_backend(const SeqFile& f, Backend b, RealPools& pools, bool twice = true);

// Field-by-field differences, "step 5 rank 1 (train_step): grads: {other} vs {}".
std::vector<std::string> compare_observations(const std::vector<Observation>& model, const std::vector<Observation>& real);

}  // namespace fsdpsim
