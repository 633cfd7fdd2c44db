// The port through which a class issues collectives (torch.distributed's
// ProcessGroup as FSDP2 and DTensor hold it): this rank's Comm and the step the
// collectives are recorded under. RealRank owns it and sets the step per op.
#pragma once
#include "real_backend/comm.hpp"

namespace fsdpsim::real {

struct ProcessGroup {
  Comm* comm = nullptr;
  int step = 0;  // the op's step: every collective names it (Comm's fingerprint)
  int rank() const { return comm->rank(); }
};

}  // namespace fsdpsim::real
