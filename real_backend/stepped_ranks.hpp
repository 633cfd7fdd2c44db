// Thread ranks that keep their state between ops: the real backend as a
// persistent system under test that runs one op at a time (the RapidCheck
// stateful property in properties/real_backend/stateful_test.cpp). Each op's
// collectives pair up before the next op: after it every rank announces
// `finish` (Comm::finish), so a rank left waiting in a collective its peers did
// not issue in this op hangs here, as it would at the end of a whole run.
#pragma once
#include <chrono>
#include <memory>

#include "model/vocab/seq.hpp"
#include "real_backend/launcher.hpp"

namespace fsdpsim::real {

class SteppedRanks {
 public:
  SteppedRanks(int world, std::chrono::milliseconds timeout);
  ~SteppedRanks();
  SteppedRanks(const SteppedRanks&) = delete;
  SteppedRanks& operator=(const SteppedRanks&) = delete;
  // Fresh ranks for f's scenario (its world must be this one's), then f's ops
  // (its preamble up to `prepare`), one step each: their observations.
  RealResult begin(const SeqFile& f);
  // Runs op as the next step on every rank it runs on: that step's observations.
  RealResult step(const Op& op);
  // A rank is stuck in a collective (hang or mismatch): later steps run nothing.
  bool stuck() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdpsim::real
