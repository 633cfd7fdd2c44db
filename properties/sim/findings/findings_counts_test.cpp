// The counts agree: README.md, docs/findings/README.md and the hunt's catalogue
// lines (README's sample) state the catalogue's numbers, or README says why a
// hunt reaches fewer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "sim/findings/finding_reports.hpp"
#include "sim/findings/report_pages.hpp"

using namespace fsdpsim;

namespace {

std::string slurp(const std::string& rel) {
  std::ifstream in(std::filesystem::path(FSDPSIM_SOURCE_DIR) / rel);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::map<std::string, int> catalogue_counts() {
  std::map<std::string, int> n;
  for (const auto& e : root_cause_catalogue()) ++n[root_verdict_word(e.verdict)];
  return n;
}

}  // namespace

TEST(FindingsCounts, FindingsIndexStatesTheCatalogue) {
  const std::string index = slurp("docs/findings/README.md");
  EXPECT_NE(index.find(reports_count_line() + "."), std::string::npos) << "docs/findings/README.md lacks: " << reports_count_line();
  std::map<RootVerdict, int> by;
  for (const auto& e : root_cause_catalogue()) ++by[e.verdict];
  std::string summary;
  for (const auto& [v, n] : by) summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + root_verdict_word(v);
  const std::string line = std::to_string(root_cause_catalogue().size()) + " root causes: " + summary + ".";
  EXPECT_NE(index.find(line), std::string::npos) << "docs/findings/README.md lacks: " << line;
}

TEST(FindingsCounts, ReadmeAgreesWithTheCatalogueAndSaysWhyTheHuntReachesFewer) {
  const std::string readme = slurp("README.md");
  EXPECT_NE(readme.find(reports_count_line()), std::string::npos) << "README.md lacks the catalogue's line: " << reports_count_line();
  // The hunt's sample output in README.
  std::smatch m;
  const std::regex reports_line(R"((\d+) reports \(of the catalogue's (\d+) over (\d+) root causes\): (\d+) to file, (\d+) to follow up, (\d+) closed)");
  ASSERT_TRUE(std::regex_search(readme, m, reports_line)) << "README.md shows no hunt reports line";
  size_t entries = 0;
  for (const auto& r : finding_reports()) entries += r.entry_points.size();
  EXPECT_EQ(std::stoul(m[2]), finding_reports().size());
  EXPECT_EQ(std::stoul(m[3]), entries);
  EXPECT_EQ(std::stoul(m[1]), std::stoul(m[4]) + std::stoul(m[5]) + std::stoul(m[6]));
  EXPECT_LE(std::stoul(m[1]), finding_reports().size());
  const std::string after = m.suffix();
  std::smatch rc;
  // The counts may continue on an indented line (the hunt keeps within 120 columns).
  ASSERT_TRUE(std::regex_search(after, rc, std::regex(R"((\d+) root causes: ([a-z, 0-9-]+?(,\n  [a-z, 0-9-]+)?)\n)")))
      << "no root-cause line after it";
  const std::map<std::string, int> cat = catalogue_counts();
  int sum = 0;
  const std::string counts = rc[2];
  const std::regex item(R"((\d+) ([a-z-]+))");
  for (auto it = std::sregex_iterator(counts.begin(), counts.end(), item); it != std::sregex_iterator(); ++it) {
    const std::string word = (*it)[2];
    const int n = std::stoi((*it)[1]);
    ASSERT_TRUE(cat.count(word)) << "README's hunt line names a verdict the catalogue does not have: " << word;
    EXPECT_LE(n, cat.at(word)) << word;
    sum += n;
  }
  const int reached = std::stoi(rc[1]);
  EXPECT_EQ(sum, reached);
  EXPECT_LE(static_cast<size_t>(reached), root_cause_catalogue().size());
  if (static_cast<size_t>(reached) < root_cause_catalogue().size()) {
    const std::string why = "reaches " + std::to_string(reached) + " of the catalogue's " + std::to_string(root_cause_catalogue().size()) + " root causes";
    EXPECT_NE(readme.find(why), std::string::npos) << "README.md must say why: '" << why << "'";
  }
}
