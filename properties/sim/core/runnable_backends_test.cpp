// Which backends run a file: of three, the C++ backend is left out where it refuses the scenario
// (a 4-bit layer) and the other two are compared; two or one stay as given
// (the commands refuse those files before running them).
#include <gtest/gtest.h>

#include "model/vocab/seq.hpp"
#include "sim/core/crosscheck.hpp"

namespace fsdpsim {
namespace {

const BackendList kThree = {Backend::Model, Backend::Real, Backend::Upstream};

SeqFile parsed(const std::string& scenario) { return parse_seq(scenario + "---\ntrain_step\n"); }

TEST(RunnableBackends, ThreeLeaveOutTheRefusingCppBackend) {
  // Mixed precision runs on all three (real_backend/activation_dtype.hpp).
  const SeqFile mp = parsed("layer a 4 4\nadapter x targets=a\nfully_shard root\nmixed_precision param_dtype=bf16\n");
  std::string skipped;
  EXPECT_EQ(runnable_backends(mp, kThree, &skipped), kThree);
  EXPECT_TRUE(skipped.empty()) << skipped;

  const SeqFile quant = parsed("layer a 4 4 quant=nf4\nadapter x targets=a\nfully_shard root\n");
  skipped.clear();
  EXPECT_EQ(runnable_backends(quant, kThree, &skipped), (BackendList{Backend::Model, Backend::Upstream}));
  EXPECT_NE(skipped.find("4-bit (QLoRA) base layers (layer 'a' quant=nf4"), std::string::npos) << skipped;
  EXPECT_NE(skipped.find("compared model,upstream only"), std::string::npos) << skipped;
}

TEST(RunnableBackends, OthersStayAsGiven) {
  const SeqFile plain = parsed("layer a 4 4\nadapter x targets=a\nfully_shard root\n");
  std::string skipped;
  EXPECT_EQ(runnable_backends(plain, kThree, &skipped), kThree);
  EXPECT_TRUE(skipped.empty());
  const SeqFile quant = parsed("layer a 4 4 quant=nf4\nadapter x targets=a\nfully_shard root\n");
  const BackendList two = {Backend::Model, Backend::Real};
  EXPECT_EQ(runnable_backends(quant, two, &skipped), two);
  EXPECT_TRUE(skipped.empty());
}

}  // namespace
}  // namespace fsdpsim
