// Reports (sim/findings/finding_reports.cpp): every catalogue entry belongs to exactly one
// report, a report's entry points, repro and fix site are consistent, and the
// reports' pages link the entry points' pages.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "sim/findings/finding_reports.hpp"
#include "sim/findings/report_pages.hpp"

using namespace fsdpsim;

TEST(FindingReports, EveryRootCauseIsAnEntryPointOfExactlyOneReport) {
  std::map<std::string, int> owners;
  std::set<std::string> ids;
  for (const auto& r : finding_reports()) {
    EXPECT_TRUE(ids.insert(r.id).second) << "duplicate report " << r.id;
    EXPECT_EQ(r.id.find('/'), std::string::npos) << r.id << ": a report id is a file name";
    EXPECT_FALSE(r.entry_points.empty()) << r.id;
    for (const auto& id : r.entry_points) {
      ++owners[id];
      EXPECT_NE(root_cause_entry(id).verdict, RootVerdict::Unreviewed) << r.id << " lists " << id << ", which the catalogue lacks";
    }
    EXPECT_NE(std::find(r.entry_points.begin(), r.entry_points.end(), r.repro), r.entry_points.end()) << r.id << ": repro " << r.repro;
    EXPECT_EQ(r.fix_site.lib, r.owner) << r.id << ": the fix site is in another library than the owner";
    EXPECT_FALSE(r.title.empty() || r.expected.empty() || r.actual.empty() || r.fix_site.function.empty()) << r.id;
  }
  for (const auto& e : root_cause_catalogue()) EXPECT_EQ(owners[e.id], 1) << e.id;
  EXPECT_EQ(owners.size(), root_cause_catalogue().size());
}

// One mechanism, one report: the five flag-on-copy paths and the two weight-on-copy ones, each
// with the other library's fix site (torch's reshard, as FSDP1 fixed its twin).
TEST(FindingReports, CopyFamiliesAreOneReportEachWithTorchAsTheAlternative) {
  const FindingReport* flags = report_of("flag-on-copy/base_model.set_adapter");
  ASSERT_NE(flags, nullptr);
  EXPECT_EQ(flags, report_of("flag-on-copy/set_adapter"));
  EXPECT_EQ(flags->entry_points.size(), 5u);
  EXPECT_EQ(flags->owner, UpstreamLibrary::Peft);
  EXPECT_NE(flags->alternative.find("to_sharded"), std::string::npos);
  EXPECT_NE(flags->alternative.find("pytorch/pytorch#104186"), std::string::npos);
  const FindingReport* weights = report_of("weight-on-copy/disabled-forward");
  ASSERT_NE(weights, nullptr);
  EXPECT_EQ(weights->entry_points.size(), 2u);
  EXPECT_EQ(report_action(*flags), ReportAction::File);  // four of its paths have no thread
}

TEST(FindingReports, ActionFollowsTheEntryPointsVerdicts) {
  for (const auto& r : finding_reports()) {
    bool unreported = false, bug = false;
    for (const auto& id : r.entry_points) {
      const RootVerdict v = root_cause_entry(id).verdict;
      unreported = unreported || is_unreported(v);
      bug = bug || (is_bug(v) && v != RootVerdict::FixedIn);
    }
    EXPECT_EQ(report_action(r), unreported ? ReportAction::File : bug ? ReportAction::FollowUp : ReportAction::Closed) << r.id;
  }
}

TEST(FindingReports, PagesLinkTheirEntryPointsAndTheIndexListsEveryReport) {
  const std::string index = reports_index();
  for (const auto& r : finding_reports()) {
    const std::string page = report_page(r, {});
    for (const auto& id : r.entry_points) EXPECT_NE(page.find("(" + finding_stem(id) + ".md)"), std::string::npos) << r.id << " " << id;
    EXPECT_NE(index.find("(" + report_page_name(r) + ")"), std::string::npos) << r.id;
  }
  EXPECT_NE(index.find(reports_count_line()), std::string::npos);
}

// Every PEFT-side report to file or follow up has a candidate patch kept beside the pages, or says why
// none; every kept patch is one such report's, and its page says it is a candidate for a maintainer.
TEST(FindingReports, EveryOpenPeftReportHasACandidatePatchOrSaysWhyNot) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(FSDPSIM_SOURCE_DIR) / "docs" / "findings";
  std::set<std::string> claimed;
  for (const auto& r : finding_reports()) {
    const CandidateFix* c = candidate_fix(r);
    const bool open_peft = r.owner == UpstreamLibrary::Peft && report_action(r) != ReportAction::Closed;
    EXPECT_EQ(c != nullptr, open_peft) << r.id;
    if (!c) continue;
    EXPECT_NE(c->patch, !c->why_none.empty()) << r.id << ": a patch, or the reason there is none";
    EXPECT_EQ(c->patch, fs::exists(dir / candidate_patch_name(r))) << r.id;
    const std::string page = report_page(r, {});
    EXPECT_NE(page.find("**Candidate fix.**"), std::string::npos) << r.id;
    if (c->patch) {
      claimed.insert(candidate_patch_name(r));
      EXPECT_NE(page.find("a candidate for a PEFT maintainer to own"), std::string::npos) << r.id;
    }
  }
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().extension() == ".patch") EXPECT_EQ(claimed.count(f.path().filename().string()), 1u) << f.path() << ": no report claims it";
}
