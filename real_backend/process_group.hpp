// The port through which a class issues collectives (torch.distributed's
// ProcessGroup as FSDP2 and DTensor hold it): this rank's Comm and the step the
// collectives are recorded under. RealRank owns it and sets the step per op.
#pragma once
#include <string>
#include <vector>

#include "real_backend/comm.hpp"
#include "real_backend/layout.hpp"

namespace fsdpsim::real {

struct ProcessGroup {
  Comm* comm = nullptr;
  int step = 0;  // the op's step: every collective names it (Comm's fingerprint)
  int rank() const { return comm->rank(); }
};

// Names the layout's groups and parameters in the Comm's collective records (and each group's
// packing order, which a failure names).
inline void name_collectives(Comm& comm, const Layout& layout) {
  std::vector<std::string> groups, params;
  std::vector<std::vector<int>> packing;
  for (const auto& g : layout.groups) groups.push_back(g.name), packing.push_back(g.params);
  for (const auto& p : layout.params) params.push_back(p.name);
  comm.set_names(groups, params, packing, layout.mixed_precision);
}

}  // namespace fsdpsim::real
