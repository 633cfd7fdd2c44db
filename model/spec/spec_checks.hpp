// The spec (DESIGN.md): what a PEFT + FSDP2 user expects. Checked after every
// op; a violation is a Finding naming the spec, the op, the rank and the
// objects involved. S5 collective hangs/mismatches and S8 determinism are
// raised by the simulator, which sees all ranks and both runs.
#pragma once
#include <string>
#include <vector>

#include "model/machine/rank_model.hpp"

namespace fsdpsim {

struct Finding {
  std::string spec;  // "S1".."S8"
  int step = 0;      // 1-based op index
  int rank = -1;     // -1: not one rank's (S5 disagreement, S8)
  std::string text;  // full sentence, starting with "S1 step 6 rank 0: ..."
  bool operator==(const Finding& o) const { return spec == o.spec && step == o.step && rank == o.rank && text == o.text; }
};

class SpecChecker {
 public:
  explicit SpecChecker(const Topology& topo);
  void reset();
  // After `op` ran on one rank.
  void after_rank_op(int step, const Op& op, const RankModel& m, const OpResult& r, std::vector<Finding>& out);
  // After `op` ran on every rank, all of them at the same point (S5 agreement).
  void after_all_ranks(int step, const std::vector<RankModel>& ranks, std::vector<Finding>& out);
  uint8_t intended(int rank) const { return intended_[rank]; }

 private:
  void check_s1(int step, const RankModel& m, const OpResult& r, std::vector<Finding>& out);
  void check_s2(int step, const RankModel& m, std::vector<Finding>& out);
  void check_s3(int step, const RankModel& m, const OpResult& r, std::vector<Finding>& out);
  void track_intent(const Op& op, const RankModel& m, const OpResult& r);

  const Topology* topo_;
  std::vector<uint8_t> intended_;        // per rank: adapters the user asked to train
  std::vector<uint8_t> before_disable_;  // per rank: intent saved at disable_enter
  std::vector<std::vector<uint8_t>> s2_bad_;  // per rank, per layer: already reported
  bool s5_reported_ = false;
};

// "lin0.lora_A.other: S.requires_grad=false, U.requires_grad=true, group root UNSHARDED"
std::string param_detail(const RankModel& m, int param);

}  // namespace fsdpsim
