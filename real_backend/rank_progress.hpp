// Where each forked rank is, in memory shared with its parent: joining the
// process group, running an op, or waiting in a collective, and since when.
// A rank writes its own slot; the parent reads them all when a rank is late or
// broken, to tell a slow rank (which one, in which collective, for how long)
// from a dead one, and to blame the rank that stopped rather than the peer
// whose collective timed out waiting for it. Torch-free.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

namespace fsdpsim::real {

int64_t monotonic_ns();  // CLOCK_MONOTONIC: one clock for every process on the machine

enum class RankPhase : int32_t { Starting = 0, Joining, Idle, Running, InCollective, Failed, Done };

struct RankSlot {
  std::atomic<uint32_t> seq{0};  // odd while the rank writes (a seqlock)
  std::atomic<int32_t> phase{0};
  std::atomic<int64_t> since_ns{0};    // CLOCK_MONOTONIC at the phase's start
  std::atomic<int64_t> changes{0};     // bumped at every phase change: progress
  std::atomic<int64_t> collectives{0};  // collectives entered so far (every one spans the whole group)
  std::atomic<int64_t> sequence{0};     // the sequence it runs (Comm::begin_sequence's number)
  std::atomic<int64_t> in_sequence{0};  // collectives entered since that sequence began
  char what[160] = {};                 // "all_gather(lin0, 1024 elements) at step 3"
};

struct RankSnapshot {
  RankPhase phase = RankPhase::Starting;
  double seconds = 0;  // in this phase, so far
  int64_t changes = 0;
  int64_t collectives = 0;  // collectives entered so far, the one it waits in included
  int64_t sequence = 0;     // the sequence it runs
  int64_t in_sequence = 0;  // collectives entered in that sequence, the one it waits in included
  std::string what;
};

// World slots in a MAP_SHARED mapping made before fork; unmapped by the owner.
class RankProgress {
 public:
  explicit RankProgress(int world);
  ~RankProgress();
  RankProgress(const RankProgress&) = delete;
  RankProgress& operator=(const RankProgress&) = delete;

  void set(int rank, RankPhase phase, const std::string& what);
  void begin_sequence(int rank, int64_t sequence);  // counts this sequence's collectives from 0
  RankSnapshot get(int rank) const;
  int64_t total_changes() const;  // sum over ranks: grows while any rank makes progress
  int world() const { return world_; }

 private:
  int world_;
  RankSlot* slots_;
};

// One rank's writer: the launcher sets the op it runs, Comm the collective.
struct RankProbe {
  RankProgress* progress = nullptr;
  int rank = 0;
  std::string op;  // "step 3 (train_step)"
  void set(RankPhase phase, const std::string& what) const {
    if (progress) progress->set(rank, phase, what);
  }
  void running(std::string op_text) {
    op = std::move(op_text);
    set(RankPhase::Running, op);
  }
};

// In a collective for its scope; after it the rank runs its op again, or, when
// the scope is left by an exception, stays marked as failed in that collective.
class CollectiveMark {
 public:
  template <class Describe>
  CollectiveMark(RankProbe* probe, Describe describe) : probe_(probe && probe->progress ? probe : nullptr) {
    if (!probe_) return;
    what_ = describe() + " at " + probe_->op;
    probe_->set(RankPhase::InCollective, what_);
    exceptions_ = std::uncaught_exceptions();
    start_ns_ = monotonic_ns();
  }
  ~CollectiveMark() {
    if (!probe_) return;
    if (std::uncaught_exceptions() > exceptions_) {
      char waited[40];
      std::snprintf(waited, sizeof waited, " after %.1f s", static_cast<double>(monotonic_ns() - start_ns_) / 1e9);
      probe_->set(RankPhase::Failed, what_ + waited);
    } else {
      probe_->set(RankPhase::Running, probe_->op);
    }
  }
  CollectiveMark(const CollectiveMark&) = delete;
  CollectiveMark& operator=(const CollectiveMark&) = delete;

 private:
  RankProbe* probe_;
  std::string what_;
  int exceptions_ = 0;
  int64_t start_ns_ = 0;
};


}  // namespace fsdpsim::real
