// SpecContext (model/spec/spec_context.cpp): adapter masks from the
// declarations, owners matched whole, and the finding head.
#include "model/spec/spec_context.hpp"

#include <gtest/gtest.h>

#include "properties/spec/checker_inputs.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(SpecContext, MasksOwnersAndTexts) {
  CheckerInputs in(seed000_header(1, "patched") + "delete_adapter other\n");
  const spec::SpecContext& c = in.ctx;
  EXPECT_EQ(c.mask_of(std::string("other")), 2u);
  EXPECT_EQ(c.mask_of(std::vector<std::string>{"other", "default", "nope"}), 3u);
  EXPECT_EQ(c.owner_mask(std::string("lin1.lora_B.other")), 2u);
  EXPECT_EQ(c.owner_mask(std::string("lin1.lora_B.oth")), 0u);  // matched whole, never split
  EXPECT_EQ(c.owner_mask(std::string("lin1.weight")), 0u);
  // Interned names: worked out once each, then remembered per name (not per call order).
  for (int twice = 0; twice < 2; ++twice) {
    EXPECT_EQ(c.owner_mask(Name("lin1.lora_B.other")), 2u);
    EXPECT_EQ(c.owner_mask(Name("lin1.lora_B.oth")), 0u);
    EXPECT_EQ(c.owner_mask(Name("lin0.lora_A.default")), 1u);
  }
  EXPECT_EQ(c.present_in(in.obs(1)), 1u);
  EXPECT_EQ(c.text(3), "{default,other}");
  EXPECT_EQ(c.text(0), "{}");
  EXPECT_EQ(spec::finding_head("S5", 3, -1), "S5 step 3: ");
  EXPECT_EQ(spec::finding_head("S1", 6, 0), "S1 step 6 rank 0: ");
}
