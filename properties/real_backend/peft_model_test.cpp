// PeftModel (real_backend/peft_model.hpp) driven directly: its checks before any layer runs.
#include <gtest/gtest.h>

#include "properties/real_backend/module_fixture.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {

Op op_named(OpKind kind, const std::string& name) {
  Op op;
  op.kind = kind;
  op.names = {name};
  return op;
}

template <class F>
real::OpError raised(F&& f) {
  try {
    f();
  } catch (const real::OpError& e) {
    return e;
  }
  return real::OpError(Status::Ok, "no raise");
}

}  // namespace

TEST(PeftModel, DeleteRefusesAMergedAdapterAndSetAdapterAnUnknownOne) {
  RealModule m(one_linear("adapter c r=2 alpha=2 targets=lin0 init=random deferred\n"));
  m.load();
  m.peft.merge(op_named(OpKind::Merge, "a"));
  real::OpError e = raised([&] { m.peft.delete_adapter(0); });
  EXPECT_EQ(e.status, Status::ValueError);
  EXPECT_EQ(e.message, "Cannot delete adapter(s) ['a'] while they are merged. Please unmerge them first.");
  e = raised([&] { m.peft.set_adapter(op_named(OpKind::SetAdapter, "c")); });
  EXPECT_EQ(e.status, Status::ValueError);
  EXPECT_EQ(e.message, "Adapter c not found.");
  m.peft.unmerge_adapter();
  m.peft.delete_adapter(0);  // the tuner falls back to b
  EXPECT_EQ(m.peft.active(), AdapterSet::of(1));
  EXPECT_FALSE(m.params.registered(m.param("lin0.lora_A.a")).defined());
}
