// The one shape of a spec checker (S1..S7). Each checker owns what it
// remembers between steps, words its own findings, and writes the words of the
// explorer's state key that cover what it remembers; the driver
// (spec_checks.cpp) calls every checker the same way, in its list's order.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "model/spec/spec_context.hpp"

namespace fsdpsim::spec {

// Where a checker writes its part of the explorer's state key: two states
// whose words are equal judge every later step alike.
class KeyWriter {
 public:
  explicit KeyWriter(std::vector<uint32_t>& out) : out_(out) {}
  void word(uint32_t w) { out_.push_back(w); }
  // One word of flags, the first in bit 0.
  void flags(std::initializer_list<bool> fs) {
    uint32_t w = 0, bit = 1;
    for (bool f : fs) {
      if (f) w |= bit;
      bit <<= 1;
    }
    out_.push_back(w);
  }

 private:
  std::vector<uint32_t>& out_;
};

// A rank stuck in a hang or mismatch: nothing more of it is observable, so only
// a checker that judges the collectives themselves (S5) sees its observation.
inline bool rank_stuck(const Observation& o) { return o.status == Status::Hang || o.status == Status::Mismatch; }

// Every checker derives from this and hides what it needs; the defaults are a
// checker that remembers nothing and judges each observation alone.
class Checker {
 public:
  // True for a checker that also observes a stuck rank (rank_stuck).
  static constexpr bool kSeesStuckRanks = false;
  // After `op` ran on the observation's rank.
  void observe(const SpecContext&, const Op&, const Observation&, std::vector<Finding>&) {}
  // Once a step's observations are all seen (every rank that ran `op`, in rank order).
  void after_step(const SpecContext&, const Observation*, size_t, std::vector<Finding>&) {}
  // The key words covering everything it reads on later steps.
  void pack_key(const SpecContext&, KeyWriter&) const {}
};

}  // namespace fsdpsim::spec
