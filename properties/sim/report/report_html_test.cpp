// The HTML timeline's content: findings at the op that caused them, the
// state drawn per parameter, differences between backends marked, nothing
// fetched from the network. (What a browser draws from it is checked by
// report_html_browser_test.py in headless Chromium.)
#include "sim/report/report_html.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>

#include "sim/core/simulator.hpp"

namespace fsdpsim {
namespace {

const std::string kSeed000 = std::string(FSDPSIM_SOURCE_DIR) + "/corpus/regressions/seed000_merged_set_adapter_w2.seq";

Timeline seed000(int backends) {
  Timeline t;
  t.title = "seed000";
  t.file = parse_seq_file(kSeed000);
  RunResult res = run_checked(t.file);
  const char* names[] = {"model", "real", "upstream"};
  for (int b = 0; b < backends; ++b) t.backends.push_back({names[b], res.observations, res.findings});
  return t;
}

// The <td> drawing one (step, rank, backend): from its opening tag to the next cell's. A
// column drawn once for several ranks or backends lists them in data-ranks, data-backends.
std::string cell(const std::string& html, int step, int rank, const std::string& backend) {
  static const std::regex tag("<td class=\"cell[^\"]*\" data-step=\"(\\d+)\" data-rank=\"\\d+\" data-backend=\"[^\"]*\" "
                              "data-backends=\"([^\"]*)\" data-ranks=\"([^\"]*)\"");
  auto has = [](const std::string& list, const std::string& word) { return (" " + list + " ").find(" " + word + " ") != std::string::npos; };
  for (std::sregex_iterator it(html.begin(), html.end(), tag), end; it != end; ++it) {
    const std::smatch& m = *it;
    if (std::stoi(m[1]) != step || !has(m[2], backend) || !has(m[3], std::to_string(rank))) continue;
    const size_t open = m.position(0);
    const size_t next = std::min(html.find("<td class=\"cell", open + 1), html.find("<td class=\"notes\"", open + 1));
    return html.substr(open, next - open);
  }
  return "";
}

TEST(ReportHtml, FindingsAreMarkedAtTheOpThatCausedThemWithTheirExplanation) {
  TimelineCounts counts;
  std::string html = timeline_section(seed000(1), &counts);
  EXPECT_EQ(counts.steps, 6);
  EXPECT_EQ(counts.findings, 6);  // S3 and S1 twice, on each of two ranks
  EXPECT_EQ(counts.differing_cells, 0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(cell(html, 4, r, "model").find("class=\"cell finding\""), std::string::npos);
    EXPECT_NE(cell(html, 4, r, "model").find("data-findings=\"S3\""), std::string::npos);
    EXPECT_NE(cell(html, 5, r, "model").find("data-findings=\"S1\""), std::string::npos);
    EXPECT_NE(cell(html, 5, r, "model").find("no_grad_fn"), std::string::npos);
    for (int step : {1, 2, 3}) EXPECT_EQ(cell(html, step, r, "model").find("cell finding"), std::string::npos) << step;
  }
  // The explanation sits in the row of step 4.
  size_t row4 = html.find("<tr id=\"step-4\">"), row5 = html.find("<tr id=\"step-5\">");
  std::string row = html.substr(row4, row5 - row4);
  EXPECT_NE(row.find("S3 step 4 rank 0: reshard dropped changes"), std::string::npos);
  EXPECT_NE(row.find(html_escape(spec_explanation("S3"))), std::string::npos);
}

TEST(ReportHtml, EveryParametersStateIsDrawn) {
  std::string html = timeline_section(seed000(1));
  // After set_adapter other on the merged model: U registered, U.rg flipped,
  // S.rg not (the U!=S row is highlighted).
  std::string c = cell(html, 3, 0, "model");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(c, m, std::regex("<tr class=\"split\" data-param=\"lin0.lora_A.other\">(.*?)</tr>")));
  EXPECT_NE(m[1].str().find("<td class=\"reg reg-U\">U</td><td class=\"rg rg-off\">&#9675;</td><td class=\"rg rg-on\">&#9679;</td>"),
            std::string::npos)
      << m[1];
  EXPECT_NE(c.find("class=\"group g-U\" data-group=\"root\""), std::string::npos);
  EXPECT_NE(c.find("lin0 merged [] S:exact"), std::string::npos);
  // The merge: stored weight misses the delta.
  EXPECT_NE(cell(html, 2, 0, "model").find("lin0 merged [default] S:<span class=\"bad\">missing_delta</span>"), std::string::npos);
  // The first train_step: gradients on other's shards, collectives issued.
  std::string t = cell(html, 4, 0, "model");
  EXPECT_NE(t.find("grads {other}"), std::string::npos);
  EXPECT_NE(t.find("collectives rs 2x"), std::string::npos);
  EXPECT_NE(t.find("data-param=\"lin0.lora_B.other\"><td class=\"pn\""), std::string::npos);
}

TEST(ReportHtml, CellsWhereBackendsDifferAreMarkedOnEveryBackend) {
  Timeline t = seed000(3);
  // The third backend saw no gradient and a different U flag at step 4, rank 1.
  for (auto& o : t.backends[2].observations)
    if (o.step == 4 && o.rank == 1) {
      o.grads = std::vector<Name>{};
      o.params[3].rg_u = o.params[3].rg_u == 1 ? 0 : 1;
    }
  TimelineCounts counts;
  std::string html = timeline_section(t, &counts);
  EXPECT_EQ(counts.differing_cells, 1);
  std::string up = cell(html, 4, 1, "upstream");
  EXPECT_NE(up.find("differs"), std::string::npos);
  EXPECT_NE(up.find("model vs upstream: grads: {other} vs {}"), std::string::npos);
  EXPECT_NE(up.find("<div class=\"grads d\">"), std::string::npos);
  EXPECT_NE(up.find("data-param=\"" + t.backends[2].observations[0].params[3].name + "\""), std::string::npos);
  EXPECT_NE(cell(html, 4, 1, "model").find(" differs\""), std::string::npos);
  // real agrees with the model everywhere: one column for both; upstream keeps its own, and
  // the ranks theirs (upstream's rank 1 is not its rank 0).
  EXPECT_NE(cell(html, 4, 1, "real").find("data-backends=\"model real\""), std::string::npos);
  EXPECT_NE(html.find("<th class=\"backends\">model, real</th><th class=\"backends\">upstream</th>"), std::string::npos);
  EXPECT_NE(html.find("class=\"ranks\">rank 1</th>"), std::string::npos);
  EXPECT_EQ(cell(html, 4, 0, "upstream").find("differs"), std::string::npos);
  EXPECT_NE(html.find("backends differ on rank 1"), std::string::npos);
  // A difference the comparison leaves out is not marked; only the named backend's is left out.
  t.ignored = [](const std::string& b, const std::string& d) { return b == "upstream" && (d.rfind("grads:", 0) == 0 || d.rfind("param[", 0) == 0); };
  timeline_section(t, &counts);
  EXPECT_EQ(counts.differing_cells, 0);
  t.ignored = [](const std::string& b, const std::string& d) { return b == "real" && (d.rfind("grads:", 0) == 0 || d.rfind("param[", 0) == 0); };
  timeline_section(t, &counts);
  EXPECT_EQ(counts.differing_cells, 1);
}

// Columns that say the same are drawn once: seed 000's two ranks see the same at every step,
// and two backends that agree share one column; a rank that differs once keeps its own.
TEST(ReportHtml, IdenticalRanksAndAgreeingBackendsFoldIntoOneColumn) {
  Timeline t = seed000(2);
  std::string html = timeline_section(t);
  EXPECT_NE(html.find("<th colspan=\"1\" class=\"ranks\">ranks 0-1</th>"), std::string::npos);
  EXPECT_NE(html.find("<th class=\"backends\">model, real</th>"), std::string::npos);
  size_t cells = 0;
  for (size_t at = 0; (at = html.find("<td class=\"cell", at)) != std::string::npos; ++at) ++cells;
  EXPECT_EQ(cells, 6u);  // one per step
  EXPECT_NE(cell(html, 4, 1, "real").find("data-findings=\"S3\""), std::string::npos);
  for (auto& b : t.backends)
    for (auto& o : b.observations)
      if (o.step == 2 && o.rank == 1) o.active = {Name("other")};
  html = timeline_section(t);
  EXPECT_NE(html.find("class=\"ranks\">rank 0</th>"), std::string::npos);
  EXPECT_NE(html.find("class=\"ranks\">rank 1</th>"), std::string::npos);
  EXPECT_EQ(html.find("ranks 0-1</th>"), std::string::npos);
}

// report's opening box: the first finding (step 4, S3) with a link to its row, the root cause
// the attribution names with the catalogue's verdict and fix, the switch that removes it, and
// the commands that reproduce it; a file without findings says so.
TEST(ReportHtml, TheSummaryBoxNamesTheFirstFindingItsRootCauseAndTheRepro) {
  Timeline t = seed000(1);
  const std::string box = report_summary_box(t, "seed000.seq", "model", "/tmp/pages/seed000.html");
  EXPECT_NE(box.find("First finding: S3 at step 4"), std::string::npos) << box;
  EXPECT_NE(box.find("href=\"#step-4\""), std::string::npos);
  EXPECT_NE(box.find("flag-on-copy/set_adapter"), std::string::npos);
  EXPECT_NE(box.find("bug, fix proposed"), std::string::npos);
  EXPECT_NE(box.find("Fix: "), std::string::npos);
  EXPECT_NE(box.find("set_adapter_reshard=unmerge_first"), std::string::npos);
  EXPECT_NE(box.find("fsdpsim run seed000.seq --backend model,upstream"), std::string::npos);
  EXPECT_NE(box.find("fsdpsim export seed000.seq --python"), std::string::npos);
  t.backends[0].findings.clear();
  EXPECT_NE(report_summary_box(t, "seed000.seq", "model", "p.html").find("No findings"), std::string::npos);
}

TEST(ReportHtml, PathsAreRelativeToThePage) {
  EXPECT_EQ(page_relative("/a/out/hunt/x.seq", "/a/pages/hunt.html"), "../out/hunt/x.seq");
  EXPECT_EQ(page_relative("/a/x.seq", "/a/hunt.html"), "x.seq");
  EXPECT_EQ(page_relative("", "/a/hunt.html"), "");
}

TEST(ReportHtml, APageIsSelfContainedAndEscapesText) {
  Timeline t = seed000(1);
  t.title = "<script>alert(1)</script>";
  std::string page = html_page("fsdpsim report", timeline_section(t));
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_EQ(page.find("http"), std::string::npos);  // no URL: nothing fetched
  EXPECT_EQ(page.find(" src="), std::string::npos);
  EXPECT_NE(page.find("<svg"), std::string::npos);
  EXPECT_EQ(html_escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
}

}  // namespace
}  // namespace fsdpsim
