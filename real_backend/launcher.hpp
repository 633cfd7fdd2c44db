// Runs sequences on N real ranks: forked worker processes (the default) or
// threads of this process sharing one gloo device. Process groups are created
// once and reused across sequences, and rebuilt after an error. A rank that
// dies or stalls is killed and reported (rank_failure.hpp: died or too slow,
// every rank's own error); nothing is left behind (store_dir.hpp, signal_cleanup.hpp).
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "model/vocab/observation.hpp"
#include "model/vocab/seq.hpp"
#include "real_backend/rank_report.hpp"

namespace fsdpsim::real {

enum class RankMode { Processes, Threads };

struct RealResult {
  std::vector<Observation> observations;
  bool infra_failure = false;  // a rank crashed, timed out, or the group could not be built
  std::string infra_message;
};

class RealRanks {
 public:
  RealRanks(int world, RankMode mode, std::chrono::milliseconds timeout);
  ~RealRanks();
  RealRanks(const RealRanks&) = delete;
  RealRanks& operator=(const RealRanks&) = delete;
  // The file's world must equal this pool's.
  RealResult run(const SeqFile& f);
  int world() const { return world_; }

  struct Impl;

 private:
  int world_;
  std::unique_ptr<Impl> impl_;
};

// One sequence on fresh ranks (a pool built and torn down around it).
RealResult run_real(const SeqFile& f, RankMode mode, std::chrono::milliseconds timeout);

// One rank of a torchrun-style launch (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT in the environment; FSDPSIM_HOST names this host's address for
// gloo, default: the machine's hostname): rendezvous over a TCPStore served by
// rank 0, run this rank's ops, publish the reports in the store. Rank 0 waits
// for every rank's and returns them all; other ranks return only their own.
// Throws SourceError ("<environment>: VARIABLE ...", exit 3) on a missing or
// invalid variable, std::runtime_error on a failed rendezvous.
struct TorchrunResult {
  int rank = 0;
  int world = 1;
  std::vector<std::vector<RankReport>> reports;  // rank 0: per rank; others: their own at [rank]
};
TorchrunResult run_torchrun_rank(const SeqFile& f, std::chrono::milliseconds timeout);

// The launch's variables, checked: WORLD_SIZE >= 1 and equal to the file's
// world, 0 <= RANK < WORLD_SIZE, MASTER_PORT 1..65535, MASTER_ADDR set.
struct TorchrunEnv {
  int rank = 0, world = 1, master_port = 0;
  std::string master_addr;
};
TorchrunEnv torchrun_env(int file_world);

// The ops of one rank, reports appended in order; stops at a hang or mismatch.
// Exposed for the torchrun-style single-rank worker.
class Comm;
void run_rank(const SeqFile& f, Comm& comm, std::vector<RankReport>& out);

}  // namespace fsdpsim::real
