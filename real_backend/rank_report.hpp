// What one rank reports after one op: everything read off its real objects,
// plus the raw shard values the observer needs to classify base weights
// (which takes A from every rank). Torch-free, so it crosses a pipe as bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/vocab/observation.hpp"

namespace fsdpsim::real {

struct RankReport {
  int step = 0;
  int rank = 0;
  std::string op;
  Status status = Status::Ok;
  std::string message;
  int64_t index = -1;
  bool has_grads = false;
  std::vector<std::string> grads;
  std::vector<std::string> active;
  bool disabled = false;
  int opt_missing = 0, opt_total = 0;
  std::vector<std::string> opt_unregistered;
  std::vector<GroupObs> groups;
  std::vector<ParamObs> params;
  std::vector<std::vector<std::string>> merged;  // per layer
  std::vector<Collective> collectives;
  std::vector<DeltaObs> deltas;               // delta_weight
  std::vector<SavedObs> saved;                // save_adapters
  std::vector<std::string> reload_diff;       // load_adapters
  std::vector<std::string> reload_coincident; // load_adapters: another rank's rows, equal values
  std::vector<OwnerBytes> sharded_bytes;      // after the op
  std::vector<OwnerBytes> peak_unsharded;     // at the op's peak
  std::vector<uint8_t> present;               // per param: in the module tree
  std::vector<uint8_t> u_registered;          // per param: the module holds U now
  std::vector<uint8_t> whole;                 // per param: S is a whole unmanaged tensor under a managed name (a re-add)
  std::vector<std::vector<float>> s_values;   // per param: this rank's S (padded chunk, or full when unmanaged)
  std::vector<std::vector<float>> u_values;   // per param: U's values when registered, else empty
};

void write_report(std::string& out, const RankReport& r);
// Reads one report from `in` at `*pos`; returns false at a truncated record.
bool read_report(const std::string& in, size_t* pos, RankReport* r);

}  // namespace fsdpsim::real
