// CheckpointWrapper driven alone on a state the test builds (model/machine/activation_checkpoint.cpp),
// no RankModel: the forward records what autograd saves for the layer; the recompute at backward
// time matches it while nothing changed, and raises torch's CheckpointError on other metadata (an
// adapter cast to bf16 since) or on fewer saved tensors (the adapters disabled since).
#include <gtest/gtest.h>

#include "model/machine/activation_checkpoint.hpp"
#include "properties/machine/bare_state.hpp"
#include "properties/test_util.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(CheckpointWrapper, RecomputeMatchesTheForwardUntilTheLayerChanges) {
  BareRank r(seed000_header(1));
  const int l = r.topo.layer_index("lin0");
  const int a = r.param("lin0.lora_A.default"), b = r.param("lin0.lora_B.default");
  r.st.layers[l].active = AdapterSet::of(0);
  r.st.params[a].rg_s = r.st.params[b].rg_s = true;
  CheckpointWrapper(r.layer(l), r.st.layers[l], r.st.graph).forward(false);
  // The base weight is frozen and the input needs no grad: lora_A saves x, lora_B saves A's output
  // and (its input needing grad) its own weight.
  ASSERT_EQ(r.st.graph.ckpt_saved[l].size(), 3u);
  EXPECT_FALSE(CheckpointWrapper(r.layer(l), r.st.layers[l], r.st.graph).recompute());

  r.st.params[a].dtype = DType::BF16;
  const Raise metadata = CheckpointWrapper(r.layer(l), r.st.layers[l], r.st.graph).recompute();
  ASSERT_TRUE(metadata);
  EXPECT_NE(metadata->message.find("different metadata"), std::string::npos) << metadata->message;

  r.st.params[a].dtype = DType::F32;
  r.st.layers[l].disabled = true;
  const Raise count = CheckpointWrapper(r.layer(l), r.st.layers[l], r.st.graph).recompute();
  ASSERT_TRUE(count);
  EXPECT_NE(count->message.find("different number of tensors"), std::string::npos) << count->message;
}
