// How an op raises: the exception upstream would raise, as a value thrown out
// of the op and caught by RankModel::apply (the real backend's OpError alike),
// so nothing after the raising call runs. Effects that happened before it
// stay, as upstream's are not undone either: collectives already issued, a
// partly injected adapter, groups left in FORWARD.
#pragma once
#include <string>

#include "model/vocab/observation.hpp"

namespace fsdpsim {

struct OpRaised {
  Status status;
  std::string message;
};

}  // namespace fsdpsim
