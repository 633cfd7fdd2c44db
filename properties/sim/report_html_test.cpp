// The HTML timeline's content: findings at the op that caused them, the
// state drawn per parameter, differences between backends marked, nothing
// fetched from the network. (What a browser draws from it is checked by
// report_html_browser_test.py in headless Chromium.)
#include "sim/report_html.hpp"

#include <gtest/gtest.h>

#include <regex>

#include "sim/simulator.hpp"

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

// The <td> of one cell: from its opening tag to the next cell's.
std::string cell(const std::string& html, int step, int rank, const std::string& backend) {
  std::string key = "data-step=\"" + std::to_string(step) + "\" data-rank=\"" + std::to_string(rank) + "\" data-backend=\"" + backend + "\"";
  size_t at = html.find(key);
  if (at == std::string::npos) return "";
  size_t open = html.rfind("<td", at);
  size_t next = std::min(html.find("<td class=\"cell", at), html.find("<td class=\"notes\"", at));
  return html.substr(open, next - open);
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
  EXPECT_EQ(cell(html, 4, 1, "real").find("differs"), std::string::npos);
  EXPECT_EQ(cell(html, 4, 0, "upstream").find("differs"), std::string::npos);
  EXPECT_NE(html.find("backends differ on rank 1"), std::string::npos);
  // A difference the comparison leaves out is not marked.
  t.ignored = [](const std::string& d) { return d.rfind("grads:", 0) == 0 || d.rfind("param[", 0) == 0; };
  timeline_section(t, &counts);
  EXPECT_EQ(counts.differing_cells, 0);
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
