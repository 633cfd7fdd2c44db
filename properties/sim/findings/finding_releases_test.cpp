// The finding pages' release verdicts (sim/findings/finding_pages.hpp): versions.jsonl's
// cells read back, the index's Releases table and a page's "affected" range.
#include <gtest/gtest.h>

#include "sim/findings/finding_pages.hpp"

using namespace fsdpsim;

namespace {

std::string cell(const std::string& stem, const std::string& release, const std::string& verdict, const std::string& detail = "") {
  return R"({"type":"versions_cell","file":"docs/findings/)" + stem + R"(.seq","release":")" + release + R"(","verdict":")" + verdict +
         R"(","detail":")" + detail + R"(","seconds":0.1})" + "\n";
}

}  // namespace

TEST(FindingReleases, CellsReadBackSummaryAndOtherRecordsSkipped) {
  auto rs = parse_release_verdicts(cell("flag-on-copy.set_adapter", "peft==0.15.2", "reproduces") +
                                       R"({"type":"versions_summary","matrix":"default"})" + "\n",
                                   "v.jsonl");
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].stem, "flag-on-copy.set_adapter");
  EXPECT_EQ(rs[0].release, "peft==0.15.2");
  try {
    parse_release_verdicts(cell("a", "peft==1", "reproduces") + "not json\n", "v.jsonl");
    FAIL() << "no error";
  } catch (const SourceError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("v.jsonl:2:1: expected a JSON object", 0), 0u) << e.what();
  }
}

TEST(FindingReleases, AffectedRangeAndTableFollowTheCells) {
  const std::string stem = "flag-on-copy.set_adapter";
  auto rs = parse_release_verdicts(cell(stem, "peft==0.15.2", "cannot run", "TypeError: x") + cell(stem, "peft==0.17.1", "does not reproduce") +
                                       cell(stem, "peft==0.19.1", "reproduces") + cell(stem, "peft==0.21.2", "reproduces"),
                                   "v.jsonl");
  FindingPages p = render_finding_pages({}, {}, rs);
  const std::string& page = p.files.at(stem + ".md");
  EXPECT_NE(page.find("affected: PEFT 0.19.1–0.21.2; does not reproduce on: 0.17.1; cannot run on: 0.15.2 (TypeError: x)."), std::string::npos)
      << page;
  const std::string& index = p.files.at("README.md");
  EXPECT_NE(index.find("| root cause | 0.15.2 | 0.17.1 | 0.19.1 | 0.21.2 |"), std::string::npos) << index;
  EXPECT_NE(index.find("| `flag-on-copy/set_adapter` | cannot run | no | yes | yes |"), std::string::npos) << index;
  // Without cells: no Releases section, no line on the page.
  FindingPages none = render_finding_pages({}, {}, {});
  EXPECT_EQ(none.files.at("README.md").find("## Releases"), std::string::npos);
  EXPECT_EQ(none.files.at(stem + ".md").find("affected: PEFT"), std::string::npos);
}
