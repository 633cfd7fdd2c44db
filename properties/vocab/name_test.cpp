#include "model/vocab/name.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <thread>
#include <vector>

#include "model/vocab/observation.hpp"
#include "model/vocab/observation_json.hpp"
#include "model/vocab/text.hpp"

#include <sstream>

namespace fsdpsim {
namespace {

TEST(Name, OneTextIsOneName) {
  const std::string built = std::string("lin0.lora_A.") + "other";  // a text made at run time
  Name a{"lin0.lora_A.other"}, b{built}, c{std::string_view(built)};
  EXPECT_EQ(a.id(), b.id());
  EXPECT_EQ(a.id(), c.id());
  EXPECT_TRUE(a == b);
  EXPECT_NE(Name("lin0.lora_A.default").id(), a.id());
  EXPECT_EQ(a.str(), "lin0.lora_A.other");
  EXPECT_TRUE(Name().empty());
  EXPECT_EQ(Name("").id(), Name().id());  // the empty text too
  Name d = a;
  d.clear();
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(d, Name());
}

TEST(Name, ComparesWithTextsByValue) {
  const Name n("root");
  EXPECT_TRUE(n == "root");
  EXPECT_TRUE(n == std::string("root"));
  EXPECT_TRUE(std::string("root") == n);
  EXPECT_TRUE(n != "lin0");
  EXPECT_EQ(n + ".x", "root.x");
  EXPECT_EQ("x." + n, "x.root");
  EXPECT_EQ(std::vector<Name>({"a", "b"}), std::vector<std::string>({"a", "b"}));
  EXPECT_NE(std::vector<Name>({"a", "b"}), std::vector<std::string>({"b", "a"}));
  EXPECT_EQ(join(std::vector<Name>{"a", "b"}), "a,b");
  EXPECT_EQ(names_set_text(std::vector<Name>{"default", "other"}), "{default,other}");
}

// Sorted names must print in the same order in every process: by text, never by address.
TEST(Name, OrdersByTextNotByAddress) {
  Name late("zz_interned_first"), early("aa_interned_second");
  std::vector<Name> v = {late, early, Name("mm")};
  std::sort(v.begin(), v.end());
  EXPECT_EQ(v, std::vector<std::string>({"aa_interned_second", "mm", "zz_interned_first"}));
  EXPECT_FALSE(early < early);
  std::set<Name> s = {Name("b"), Name("a"), Name("b")};
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(s.begin()->str(), "a");
}

// Threads interning the same texts at once get one address per text.
TEST(Name, ThreadsShareTheTable) {
  const int kThreads = 4, kTexts = 200;
  std::vector<std::vector<const void*>> ids(kThreads, std::vector<const void*>(kTexts));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kTexts; ++i) ids[t][i] = Name("thread_text_" + std::to_string(i)).id();
    });
  for (auto& th : threads) th.join();
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(ids[t], ids[0]);
  EXPECT_EQ(Name("thread_text_7").id(), ids[0][7]);
}

// An observation's names read back from JSON and from the binary codec are the same Names.
TEST(Name, ObservationsReadBackHoldTheSameNames) {
  Observation o;
  o.active = {"default"};
  o.params.push_back({"lin0.lora_A.default", "root", true, -1, Device::Cpu, DType::F32});
  std::ostringstream os;
  print_json(os, o);
  Observation back;
  std::string error;
  ASSERT_TRUE(parse_observation_json(os.str(), &back, &error)) << error;
  EXPECT_EQ(back.params[0].name.id(), o.params[0].name.id());
  EXPECT_EQ(back.active[0].id(), Name("default").id());
  EXPECT_TRUE(back == o);
}

}  // namespace
}  // namespace fsdpsim
