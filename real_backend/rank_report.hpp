// What one rank reports after one op: everything read off its real objects,
// plus the raw shard values the observer needs to classify base weights
// (which takes A from every rank). Torch-free, so it crosses a pipe as bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/vocab/observation.hpp"

namespace fsdpsim::real {

// The observation fields a rank reads itself (all but `layers`, whose classes
// the observer computes from every rank's values), then the rest.
struct RankReport : Observation {
  std::vector<std::vector<std::string>> merged;  // per layer
  std::vector<uint8_t> present;               // per param: in the module tree
  std::vector<uint8_t> u_registered;          // per param: the module holds U now
  std::vector<uint8_t> whole;                 // per param: S is a whole unmanaged tensor under a managed name (a re-add)
  std::vector<std::vector<float>> s_values;   // per param: this rank's S (padded chunk, or full when unmanaged)
  std::vector<std::vector<float>> u_values;   // per param: U's values when registered, else empty
  // delta_weight on a Linear layer: per entry of `deltas`, the values get_delta_weight returned and
  // which rows they are; the observer judges them against the full B @ A * scaling.
  int delta_layer = -1;
  std::vector<std::vector<float>> delta_values;
  std::vector<uint8_t> delta_form;  // DeltaForm
};
enum DeltaForm : uint8_t {
  kDeltaJudged,   // judged by the rank itself (experts layers: real_experts.cpp)
  kDeltaFull,     // the whole (out, in) delta
  kDeltaChunk,    // this rank's padded chunk of the delta's rows, as W's shard holds them
  kDeltaPartial,  // a Partial DTensor's local value: the delta is the sum over ranks
};

void write_report(std::string& out, const RankReport& r);
// Reads one report from `in` at `*pos`; returns false at a truncated record.
bool read_report(const std::string& in, size_t* pos, RankReport* r);

}  // namespace fsdpsim::real
