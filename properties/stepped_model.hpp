// The model as a persistent system under test: one Simulator extended one op
// at a time (Simulator::run_more, as the explorer extends its states), a
// second one stepped beside it (S8: the same op on the same state gives the
// same observations), and the spec fed step by step (SpecChecker).
#pragma once
#include <algorithm>
#include <vector>

#include "model/spec/spec_checks.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim::test {

class SteppedModel {
 public:
  // The file's ops (its preamble up to `prepare`) run first, one step each; the
  // topology is the file's (what it loads before prepare decides the groups).
  explicit SteppedModel(const SeqFile& f) : file_(header_of(f)), topo_(compile_topology(f)), a_(topo_), b_(topo_), spec_(file_.scenario) {
    for (const auto& op : f.ops) step(op);
  }
  SteppedModel(const SteppedModel&) = delete;
  SteppedModel& operator=(const SteppedModel&) = delete;

  // Runs op on every rank it runs on as the next step. Returns this step's run
  // on the first simulator; `fresh` gets the step's findings.
  RunResult step(const Op& op, std::vector<Finding>* fresh = nullptr) {
    file_.ops.push_back(op);
    const int before = static_cast<int>(file_.ops.size()) - 1;
    RunResult r = a_.run_more({op}, before);
    last_twin_ = b_.run_more({op}, before);
    observations_.insert(observations_.end(), r.observations.begin(), r.observations.end());
    std::vector<Finding> found;
    spec_.step(op, r.observations.data(), r.observations.size(), found);
    findings_.insert(findings_.end(), found.begin(), found.end());
    stuck_ = stuck_ || r.hang || r.mismatch;
    if (fresh) *fresh = found;
    return r;
  }
  // The second simulator's run of the last step.
  const RunResult& twin() const { return last_twin_; }
  // A rank is stuck in a collective: later steps no longer extend one run.
  bool stuck() const { return stuck_; }
  const SeqFile& file() const { return file_; }  // the header and every op stepped so far
  const Topology& topology() const { return topo_; }
  const std::vector<Observation>& observations() const { return observations_; }
  // Every step's findings, ordered as check_spec orders them.
  std::vector<Finding> findings() const {
    std::vector<Finding> out = findings_;
    std::stable_sort(out.begin(), out.end(), [](const Finding& x, const Finding& y) {
      return x.step != y.step ? x.step < y.step : x.rank < y.rank;
    });
    return out;
  }

 private:
  static SeqFile header_of(SeqFile f) {
    f.ops.clear();
    return f;
  }
  SeqFile file_;
  Topology topo_;
  Simulator a_, b_;
  SpecChecker spec_;
  RunResult last_twin_;
  std::vector<Observation> observations_;
  std::vector<Finding> findings_;
  bool stuck_ = false;
};

}  // namespace fsdpsim::test
