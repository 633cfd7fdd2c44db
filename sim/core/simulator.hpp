// The deterministic N-rank simulator: runs a sequence on N model ranks,
// matches their collectives in issue order, and reports a rank waiting for a
// collective no other rank issues (hang) or ranks issuing different ones
// (mismatch) instead of hanging.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/machine/rank_model.hpp"
#include "model/spec/spec_checks.hpp"
#include "model/vocab/observation_binary.hpp"  // observations_hash
#include "model/vocab/seq.hpp"

namespace fsdpsim {

struct RunOptions {
  bool observe = true;  // build Observation records (off for speed; no spec checks then)
  bool hash_observations = true;  // trace hash over the observations' JSON (off: over the op results)
  // Observations with only the fields the spec checks read: no collectives, no memory
  // (sharded_bytes, peak_unsharded) and no string building for them. run_checked_sampled's
  // loops (hunt, fuzzer, shrinker) read findings and statuses only.
  bool spec_fields_only = false;
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
  // The ranks go back to this thread's pool for the next simulator (rebind).
  ~Simulator();
  Simulator(const Simulator&) = default;
  Simulator(Simulator&&) = default;
  Simulator& operator=(const Simulator&) = default;
  Simulator& operator=(Simulator&&) = default;
  // Observations and trace hash; findings are the spec's (see run_checked).
  RunResult run(const std::vector<Op>& ops, const RunOptions& opt = {});
  // Runs more ops on the ranks as the last run left them (no reset), numbering
  // them from first_step + 1. The explorer copies a Simulator per state and
  // extends it one op at a time: for ops every rank runs this is the run of the
  // whole sequence, as each op's collectives pair up before the next op.
  RunResult run_more(const std::vector<Op>& ops, int first_step, const RunOptions& opt = {});
  const std::vector<RankModel>& ranks() const { return ranks_; }
  // One Provenance per rank (model/machine/provenance.hpp), recorded from the next run() on;
  // `p` must outlive the runs (the destructor detaches it). Null detaches.
  void set_provenance(std::vector<Provenance>* p);

  // One issued collective waiting for its peers' (public for the thread's pool of queues).
  struct Pending {
    CollRecord coll;
    int step;
    int obs;  // observation to mark hang/mismatch, -1 when not observing
    int k;    // position of this collective among its op's
  };

 private:
  // What stopped match(): a rank with no head left (waiting for more), heads gloo aborts on
  // (other bytes of one op), heads gloo leaves blocked (another op).
  enum class Stop { Waiting, Mismatch, Blocked };
  Stop match();
  bool same_members(size_t r, size_t q) const;
  void mix_check();
  void apply_gathered_deltas();
  void refresh_observation(size_t r, const Pending& p);
  void judge_against_peers(RunResult& res);
  void judge_replicas(const StoredSnapshot& mine, const std::vector<std::pair<int, const StoredSnapshot*>>& peers,
                      Observation& o) const;
  void fail_collectives(bool mismatch, RunResult& res);
  std::vector<PendingCollective> pending_heads() const;
  void fill_part(const CollRecord& root);
  void cross_pair();
  // Rank r's view (model/machine/observer.hpp). With two or more ranks the stored weight classes
  // are judged against the peers' shards after the run (judge_against_peers), not per rank.
  Observer observer(size_t r) const { return ranks_[r].observer(topo_->world > 1); }

  const Topology* topo_;
  std::vector<RankModel> ranks_;
  std::vector<std::vector<Pending>> queues_;  // per rank: issued, not yet matched
  std::vector<size_t> heads_;
  std::vector<Observation>* observations_ = nullptr;  // the run's, to refresh after mark_mixed
  // Both lent by the thread's pool for the run (simulator.cpp): entries past the run's
  // observations (ranks) are buffers kept for later runs.
  std::vector<StoredSnapshot> snapshots_;              // per observation, before sorting
  std::vector<StoredSnapshot> initial_;                // per rank, as the run started
  std::vector<uint32_t> issued_;  // per observation, the collectives its op issued (kept without their text)
  std::vector<std::pair<int, std::string>> crossed_;  // (observation, its op's first cross-pairing)
  // Per rank: the version of the A its last matched all-gather of a layer's A delivered (as
  // its delta reads it), for a delta whose B is gathered next (delta_weight_gather=on experts).
  std::vector<uint32_t> gathered_a_;
  bool fresh_ = true;                                  // no run yet: the ranks need no reset
  // What rank 0's first save wrote (saves 0: none yet): the file system is the world's, and a rank
  // that never saved reads that file (fsdpsim_upstream/op_checkpoints.py::run_load_adapters).
  AdapterFile rank0_first_file_;
};

// Runs the file twice (S8: same observations, same trace hash) and checks the spec.
RunResult run_checked(const SeqFile& f);
// The same with S8 sampled, for loops that run thousands of model sequences
// (shrinking, fuzzing): the model is deterministic, so the second run happens
// for one sequence in `every`, picked by the first run's trace hash (the same
// sequence is always picked or never). The trace hash is over the op results
// (RunOptions::hash_observations off). The real backends keep S8 in full.
// Its observations have the spec's fields only (RunOptions::spec_fields_only).
RunResult run_checked_sampled(const SeqFile& f, uint32_t every);
// The same on `topo`, compile_topology(f) compiled already (compile_topology_reused: the
// fuzzer's and the shrinker's files mostly share the last one's scenario).
RunResult run_checked_sampled(const SeqFile& f, const Topology& topo, uint32_t every);

// Gives a finished run's observations back to this thread's pool: the next runs
// fill them in place (Observer::observe_into), keeping their strings' and
// lists' buffers, so a loop that runs many sequences and keeps none of their
// observations hardly allocates. Optional; a result that is not handed back is
// simply freed.
void recycle(RunResult&& r);


}  // namespace fsdpsim
