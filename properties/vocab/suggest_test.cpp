// "Did you mean": edit distance and which candidates are near enough to suggest.
#include <gtest/gtest.h>

#include "model/vocab/suggest.hpp"

namespace fsdpsim {
namespace {

TEST(Suggest, EditDistanceCountsEachEditOnce) {
  EXPECT_EQ(edit_distance("", ""), 0);
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(edit_distance("target", "targets"), 1);        // insertion
  EXPECT_EQ(edit_distance("trian_step", "train_step"), 1);  // a swap of neighbours
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("abc", "abc"), 0);
}

TEST(Suggest, NearestWithinAThirdOfTheWord) {
  const std::vector<std::string> ops = {"train_step", "step", "save_adapters", "load_adapters", "eval"};
  EXPECT_EQ(nearest("trian_step", ops), std::vector<std::string>{"train_step"});
  EXPECT_EQ(nearest("save_adapter", ops), std::vector<std::string>{"save_adapters"});
  EXPECT_TRUE(nearest("frobnicate", ops).empty());  // too far: no guess
  EXPECT_TRUE(nearest("eval", ops).empty());        // the word itself is not a suggestion
  EXPECT_TRUE(nearest("", ops).empty());
  // ties are all offered, nearest first only
  EXPECT_EQ(nearest("c", {"a", "b", "cc"}), (std::vector<std::string>{"a", "b", "cc"}));
  EXPECT_EQ(nearest("lin", {"lin0", "lin1", "root"}), (std::vector<std::string>{"lin0", "lin1"}));
  // a prefix of four or more letters counts as near
  EXPECT_EQ(nearest("inference", {"inference_mode", "deferred"}), std::vector<std::string>{"inference_mode"});
  EXPECT_TRUE(nearest("inf", {"inference_mode"}).empty());
}

TEST(Suggest, MessagesGiveTheFixOrTheList) {
  EXPECT_EQ(did_you_mean("wrold", {"world", "seed"}), "; did you mean 'world'?");
  EXPECT_EQ(did_you_mean("c", {"a", "b"}), "; did you mean 'a' or 'b'?");
  EXPECT_EQ(did_you_mean("x", {"a", "b", "c"}), "; did you mean 'a', 'b' or 'c'?");
  EXPECT_EQ(did_you_mean("zzzzzz", {"world"}), "");
  EXPECT_EQ(suggest_or_list("upstrem", {"upstream", "patched"}), "; did you mean 'upstream'?");
  EXPECT_EQ(suggest_or_list("nightly", {"upstream", "patched"}), " (expected one of: upstream, patched)");
}

}  // namespace
}  // namespace fsdpsim
