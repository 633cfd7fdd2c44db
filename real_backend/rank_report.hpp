// What one rank reports after one op: everything read off its real objects,
// plus the raw shard values the observer needs to classify base weights
// (which takes A from every rank). Torch-free, so it crosses a pipe as bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/vocab/observation.hpp"

namespace fsdpsim::real {

// Which part of the whole delta a rank's value holds (a DTensor's placement, as the op returned it).
enum DeltaForm : uint8_t {
  kDeltaFull,     // the whole delta
  kDeltaChunk,    // this rank's padded chunk of the delta's rows, as W's shard holds them
  kDeltaPartial,  // a Partial DTensor's local value: the delta is the sum over ranks
  kDeltaRows,     // Shard(0)'s local rows, unpadded: e.g. the experts this rank holds
  kDeltaColumns,  // Shard(-1)'s local slice of the last dim, unpadded: an experts delta's out columns of this rank's rows of B
};

// One value get_delta_weight returned: its whole shape, so the observer can tell it from the
// layer's delta ((out, in) for Linear, (E, in, out) for an experts weight), and its values.
struct DeltaValue {
  DeltaForm form = kDeltaFull;
  std::vector<int64_t> shape;  // of the whole delta (a DTensor's global shape)
  std::vector<float> values;   // row-major, the part `form` names
};

// The observation fields a rank reads itself (all but `layers`, and `deltas`' classes, which the
// observer computes from every rank's values), then the rest.
struct RankReport : Observation {
  std::vector<std::vector<std::string>> merged;  // per layer
  std::vector<uint8_t> present;               // per param: in the module tree
  std::vector<uint8_t> u_registered;          // per param: the module holds U now
  // per param: that U is a MixedPrecisionPolicy's param_dtype cast of S (its values bf16's), as
  // upstream's observe.py lists it in `u_cast` (torch _fsdp_param.py::FSDPParam.init_dtype_attrs)
  std::vector<uint8_t> u_cast;
  std::vector<uint8_t> whole;                 // per param: S is a whole unmanaged tensor under a managed name (a re-add)
  std::vector<int64_t> adam_steps;            // per param: the AdamW steps S's state has taken (0: none)
  std::vector<std::vector<float>> s_values;   // per param: this rank's S (padded chunk, or full when unmanaged)
  std::vector<std::vector<float>> u_values;   // per param: U's values when registered, else empty
  // delta_weight: per entry of `deltas`, the value get_delta_weight returned and what it is; the
  // observer judges each against the full B @ A * scaling of every rank's shards (observer.cpp).
  int delta_layer = -1;
  std::vector<DeltaValue> delta_values;
};

void write_report(std::string& out, const RankReport& r);
// Reads one report from `in` at `*pos`; returns false at a truncated record.
bool read_report(const std::string& in, size_t* pos, RankReport* r);

}  // namespace fsdpsim::real
