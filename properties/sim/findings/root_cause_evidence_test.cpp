// Verdicts from evidence (sim/findings/root_cause_table.cpp): every catalogue entry names
// the pinned source lines its verdict rests on, and every citation how it was
// checked; the source lines resolve in the installed releases, whose pins are
// those of real_backend/upstream/requirements.txt.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "sim/findings/root_cause_catalogue.hpp"

using namespace fsdpsim;

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The .venv's site-packages ("" when there is no .venv: the upstream libraries are not installed).
std::filesystem::path site_packages() {
  const std::filesystem::path lib = std::filesystem::path(FSDPSIM_SOURCE_DIR) / ".venv" / "lib";
  std::error_code ec;
  if (!std::filesystem::is_directory(lib, ec)) return {};
  for (const auto& d : std::filesystem::directory_iterator(lib, ec))
    if (d.path().filename().string().rfind("python3", 0) == 0 && std::filesystem::is_directory(d.path() / "site-packages"))
      return d.path() / "site-packages";
  return {};
}

}  // namespace

TEST(RootCauseEvidence, EveryVerdictNamesItsSourceLinesAndEveryCitationItsCheck) {
  const std::regex ref(R"(^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#[0-9]+$)");
  for (const auto& e : root_cause_catalogue()) {
    EXPECT_FALSE(e.evidence.empty()) << e.id << ": a verdict with no pinned source line";
    for (const auto& s : e.evidence) {
      EXPECT_FALSE(s.file.empty() || s.function.empty() || s.shows.empty()) << e.id << ": " << s.file << "::" << s.function;
      EXPECT_EQ(s.file.rfind(std::string(upstream_pin(s.lib).package) + "/", 0), 0u) << e.id << ": " << s.file << " is not in "
                                                                                       << upstream_pin(s.lib).package;
    }
    for (const auto& c : e.citations) {
      EXPECT_TRUE(std::regex_match(c.ref, ref)) << e.id << ": '" << c.ref << "' is not owner/repo#N";
      EXPECT_FALSE(c.says.empty()) << e.id << ": " << c.ref;
      if (c.check == CitationCheck::Tracker) {
        EXPECT_TRUE(c.state == "merged" || c.state == "open" || c.state == "closed") << e.id << ": " << c.ref << " has no tracker state";
      } else {  // never a status nobody looked up
        EXPECT_TRUE(c.state.empty()) << e.id << ": " << c.ref << " is known from a thread only, yet states '" << c.state << "'";
      }
    }
    // A verdict resting on a thread cites it.
    if (e.verdict == RootVerdict::FixedIn || e.verdict == RootVerdict::FixProposed || e.verdict == RootVerdict::Reported ||
        e.verdict == RootVerdict::Regression) {
      bool cited = false;
      for (const auto& c : e.citations) cited = cited || e.verdict_detail.find(c.ref) != std::string::npos ||
                                               e.verdict_detail.find(c.ref.substr(c.ref.find('#'))) != std::string::npos;
      EXPECT_TRUE(cited) << e.id << ": the verdict's thread (" << e.verdict_detail << ") is not among its citations";
    }
  }
}

TEST(RootCauseEvidence, CitationTextSaysHowItWasChecked) {
  const Citation seen{"huggingface/peft#3565", CitationCheck::Tracker, "merged", "x"};
  const Citation heard{"huggingface/peft#3872", CitationCheck::ReporterThread, "", "y"};
  EXPECT_EQ(citation_text(seen), "huggingface/peft#3565 (merged; verified in the tracker): x");
  EXPECT_EQ(citation_text(heard), "huggingface/peft#3872: y (from the reporter's thread; not independently verified)");
  EXPECT_EQ(pinned_link(UpstreamLibrary::Peft, "peft/utils/other.py"), "https://github.com/huggingface/peft/blob/v0.21.2/src/peft/utils/other.py");
  EXPECT_EQ(pinned_link(UpstreamLibrary::Torch, "torch/distributed/checkpoint/state_dict.py"),
            "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/distributed/checkpoint/state_dict.py");
}

// Each source line is a `def` (and its class a `class`) in the installed release's file.
TEST(RootCauseEvidence, SourceLinesResolveInTheInstalledReleases) {
  const std::filesystem::path site = site_packages();
  if (site.empty()) GTEST_SKIP() << "no .venv: the pinned releases are not installed";
  for (const auto& e : root_cause_catalogue())
    for (const auto& s : e.evidence) {
      const std::filesystem::path file = site / s.file;
      ASSERT_TRUE(std::filesystem::exists(file)) << e.id << ": " << file;
      const std::string text = slurp(file);
      const size_t dot = s.function.rfind('.');
      const std::string def = s.function.substr(dot == std::string::npos ? 0 : dot + 1);
      EXPECT_TRUE(std::regex_search(text, std::regex("\\bdef " + def + "\\("))) << e.id << ": no def " << def << " in " << s.file;
      if (dot != std::string::npos) {
        EXPECT_TRUE(std::regex_search(text, std::regex("\\bclass " + s.function.substr(0, dot) + "\\b")))
            << e.id << ": no class " << s.function.substr(0, dot) << " in " << s.file;
      }
    }
}

TEST(RootCauseEvidence, PinsAreTheRequirements) {
  const std::string req = slurp(std::filesystem::path(FSDPSIM_SOURCE_DIR) / "real_backend/upstream/requirements.txt");
  for (UpstreamLibrary lib : {UpstreamLibrary::Peft, UpstreamLibrary::Torch, UpstreamLibrary::Accelerate, UpstreamLibrary::Transformers}) {
    const UpstreamPin& p = upstream_pin(lib);
    EXPECT_NE(req.find(std::string("\n") + p.package + "==" + p.version + "\n"), std::string::npos) << p.package << "==" << p.version;
    EXPECT_EQ(std::string(p.tag), std::string("v") + p.version);
  }
}
