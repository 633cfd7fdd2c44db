// Release sets and matrix files (sim/release/release_matrix.hpp): parsing, normalization,
// and the file:line:column of each kind of bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "sim/release/release_matrix.hpp"

using namespace fsdpsim;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_matrix_file(text, "m.txt");
  } catch (const SourceError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ReleaseSet, NormalizesPeftFirstThenByName) {
  ReleaseSet s = parse_release_set("Transformers==4.51.3, accelerate==1.6.0,peft==0.15.2");
  EXPECT_EQ(s.text(), "peft==0.15.2,accelerate==1.6.0,transformers==4.51.3");
  EXPECT_EQ(parse_release_set("peft==0.18.0rc1").text(), "peft==0.18.0rc1");
}

TEST(ReleaseSet, BadInputNamesTheColumnOfItsPart) {
  auto what = [](const std::string& t) {
    try {
      parse_release_set(t);
    } catch (const SourceError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(what("peft==0.17.1,torch==2.1"), "<command line>:1:14: expected one of peft, accelerate, transformers, got 'torch'");
  EXPECT_EQ(what("peft=0.17.1"), "<command line>:1:6: expected peft==VERSION, or peft=PATH naming an existing PEFT checkout directory or "
                                 "wheel file, got '0.17.1'");
  EXPECT_EQ(what("peft=/"), "");  // an existing path: a local PEFT (release_env.py builds it)
  EXPECT_EQ(what("peft==0.17.1,peft==0.18.0"), "<command line>:1:14: expected each package once, got peft again");
  EXPECT_EQ(what("peft==latest"), "<command line>:1:1: expected a release number like 0.17.1 after peft==, got 'latest'");
  EXPECT_EQ(what("accelerate==1.6.0"), "<command line>:1:1: expected a set that names peft==VERSION, got 'accelerate==1.6.0'");
}

TEST(ReleaseMatrix, NamedMatricesInFileOrder) {
  auto all = parse_matrix_file("# c\nmatrix a\npeft==0.15.2  # old\n\nmatrix b\npeft==0.21.2,accelerate==1.15.0\n", "m.txt");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "a");
  ASSERT_EQ(all[0].sets.size(), 1u);
  EXPECT_EQ(all[0].sets[0].text(), "peft==0.15.2");
  EXPECT_EQ(all[1].sets[0].text(), "peft==0.21.2,accelerate==1.15.0");
  EXPECT_EQ(&find_matrix(all, "b", "m.txt"), &all[1]);
  EXPECT_THROW(find_matrix(all, "c", "m.txt"), SourceError);
}

TEST(ReleaseMatrix, BadInputIsFileLineColumn) {
  EXPECT_EQ(error_of("peft==0.15.2\n"), "m.txt:1:1: expected `matrix NAME` before the first release set, got 'peft==0.15.2'");
  EXPECT_EQ(error_of("matrix a\n  peft==0.15.2,x==1\n"), "m.txt:2:16: expected one of peft, accelerate, transformers, got 'x'");
  EXPECT_EQ(error_of("matrix a\npeft==0.15.2\npeft==0.15.2\n"), "m.txt:3:1: expected each set once in matrix a, got peft==0.15.2 again");
  EXPECT_EQ(error_of("matrix a\npeft==1.0\nmatrix a\n"), "m.txt:3:1: expected each matrix name once, got 'a' again");
  EXPECT_EQ(error_of("matrix a\n"), "m.txt: expected at least one release set in matrix a");
}

// The checked-in file: a default matrix of at least five PEFT releases, the pinned one last.
TEST(ReleaseMatrix, CheckedInDefaultHasFivePeftReleases) {
  std::ifstream in(std::string(FSDPSIM_SOURCE_DIR) + "/real_backend/upstream/matrix.txt");
  std::stringstream text;
  text << in.rdbuf();
  auto all = parse_matrix_file(text.str(), "matrix.txt");
  const ReleaseMatrix& d = find_matrix(all, "default", "matrix.txt");
  EXPECT_GE(d.sets.size(), 5u);
  EXPECT_EQ(d.sets.back().text(), "peft==0.21.2");
  EXPECT_EQ(find_matrix(all, "pinned", "matrix.txt").sets.size(), 1u);
}
