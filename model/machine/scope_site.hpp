// Where a transition notes what it did (provenance.hpp): the Provenance (null: nowhere) and the
// pieces a scope snapshots, the rank's parameters and layers. A class's port carries one instead
// of the rank's layers, which it reads for nothing else.
#pragma once
#include <string>
#include <vector>

#include "model/machine/op_raised.hpp"

namespace fsdpsim {

class Provenance;
struct FsdpParam;
struct LoraLayer;

// Where a scope records (null: nowhere) and the pieces it compares: a rank's params and layers.
struct ScopeSite {
  Provenance* prov = nullptr;
  const std::vector<FsdpParam>* params = nullptr;
  const std::vector<LoraLayer>* layers = nullptr;
};

// What upstream raises at a transition (`return raise_at(prov, ...)`); with provenance, the raise
// site is noted.
Raise raise_at(Provenance* prov, Status s, std::string msg);

}  // namespace fsdpsim
