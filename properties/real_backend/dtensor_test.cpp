// The DTensor port (real_backend/dtensor.hpp) driven directly: a 1-rank mesh's full_tensor is
// the shard itself, and a plain delta into W's shard is refused as DTensor's dispatch does.
#include <gtest/gtest.h>

#include "properties/real_backend/module_fixture.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(DTensor, FullTensorOnOneRankIsTheShardWithoutACollective) {
  RealModule m(one_linear());
  m.load();
  const int a = m.param("lin0.lora_A.a");
  m.comm.issued().clear();
  at::Tensor full = m.dtensor.full_tensor(a);
  EXPECT_TRUE(at::equal(full, m.params[a].leaf.s.detach().view(full.sizes())));
  EXPECT_TRUE(m.comm.issued().empty());
}

TEST(DTensor, APlainDeltaIntoTheShardedWeightIsRefused) {
  RealModule m(one_linear("adapter c r=2 alpha=2 targets=lin0 init=random deferred\n"));
  m.load();
  const int c = m.layout.adapter_named("c");
  m.peft.add_adapter(c, false, false, false);  // after fully_shard: plain tensors
  EXPECT_FALSE(m.dtensor.late_delta_on_shard(0, 0));
  ASSERT_TRUE(m.dtensor.late_delta_on_shard(0, c));
  try {
    m.dtensor.check_mixed(0, c, true);
    FAIL() << "no raise";
  } catch (const real::OpError& e) {
    EXPECT_EQ(e.status, Status::Exception);
    EXPECT_NE(e.message.find("aten.add_.Tensor got mixed torch.Tensor and DTensor"), std::string::npos) << e.message;
  }
  m.fsdp.groups[m.layout.group_of_module("lin0")].unshard();  // W is a plain tensor while unsharded
  EXPECT_FALSE(m.dtensor.late_delta_on_shard(0, c));
}
