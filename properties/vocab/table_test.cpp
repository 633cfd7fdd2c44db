// Aligned tables within a width: long cells wrap onto lines of their own, nothing is lost.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "model/vocab/table.hpp"

namespace fsdpsim {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The characters of a text but blanks and line ends, sorted: wrapping moves them, never drops one.
std::string letters(const std::string& text) {
  std::string out;
  for (char c : text)
    if (c != ' ' && c != '\n') out += c;
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Table, FittedRowsWrapWithinTheWidthAndKeepEveryCharacter) {
  const std::vector<std::vector<std::string>> rows = {
      {"step", "op", "merged", "collectives"},
      {"1", "merge", "lin0:[default]/S=missing_delta lin1:[default]/S=missing_delta", "ag 2x547 rs 2x208"},
      {"2", "train_step", "-", "-"},
  };
  std::ostringstream wide, fitted;
  EXPECT_FALSE(print_fitted(wide, rows, 0, 2));
  print_aligned(fitted, rows);
  EXPECT_EQ(wide.str(), fitted.str());  // width 0: print_aligned's table
  std::ostringstream narrow;
  EXPECT_TRUE(print_fitted(narrow, rows, 50, 2));
  const auto lines = lines_of(narrow.str());
  EXPECT_GT(lines.size(), 3u);
  for (const auto& l : lines) EXPECT_LE(l.size(), 50u) << l;
  // the kept columns stay whole, and the wrapped ones lose nothing
  EXPECT_EQ(lines[1].rfind("1     merge", 0), 0u) << narrow.str();
  EXPECT_EQ(letters(narrow.str()), letters(wide.str())) << narrow.str();
  // a word too long for its column breaks after a '/', its rest on the next line
  EXPECT_EQ(lines[1], "1     merge       lin0:[default]/  ag 2x547 rs");
  EXPECT_EQ(lines[2], "                  S=missing_delta  2x208");
  std::ostringstream roomy;
  EXPECT_FALSE(print_fitted(roomy, rows, 200, 2));
  EXPECT_EQ(roomy.str(), wide.str());
}

}  // namespace
}  // namespace fsdpsim
