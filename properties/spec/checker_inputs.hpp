// What the checker tests feed one checker directly: a scenario's context, the
// ops of a sequence, and the observations the simulator gives for it, copied
// so a test can edit them into what a broken backend would report.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/spec/checker.hpp"
#include "properties/test_util.hpp"

namespace fsdpsim::test {

struct CheckerInputs {
  SeqFile file;
  std::vector<Observation> observations;
  spec::SpecContext ctx;

  explicit CheckerInputs(const std::string& text)
      : file(parse_seq(text, "<test>")), ctx(std::make_shared<const Scenario>(file.scenario)) {
    const Topology topo = compile_topology(file);
    observations = Simulator(topo).run(file.ops).observations;
  }
  const Op& op(int step) const { return file.ops.at(step - 1); }
  Observation obs(int step, int rank = 0) const { return obs_at(observations, step, rank); }
};

// The words `c` writes into the explorer's state key (Checker::pack_key).
template <typename C>
std::vector<uint32_t> key_words(const C& c, const spec::SpecContext& ctx) {
  std::vector<uint32_t> words;
  spec::KeyWriter key(words);
  c.pack_key(ctx, key);
  return words;
}

inline std::vector<std::string> texts(const std::vector<Finding>& v) {
  std::vector<std::string> out;
  for (const auto& f : v) out.push_back(f.text);
  return out;
}

}  // namespace fsdpsim::test
