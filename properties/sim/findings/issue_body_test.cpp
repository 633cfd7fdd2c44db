// `findings --issue` (sim/findings/issue_body.cpp): every report's draft body follows its
// owner's template, says it is a draft a person owns, links the pinned tags, and
// carries none of this project's own words.
#include <gtest/gtest.h>

#include "sim/findings/issue_body.hpp"

using namespace fsdpsim;

namespace {

ReproRun ran() {
  ReproRun run;
  run.ran = true;
  run.command = "torchrun --nproc_per_node=2 repro.py";
  run.exit_code = 1;
  run.output = "Traceback (most recent call last):\nAssertionError: expected ['other'], got ['default']\n";
  run.versions = "torch: 2.13.0\npeft: 0.21.2\n";
  return run;
}

const char* const kScript = "import torch\nassert False, 'expected x, got y'\n";

// The body without the script and its output: those are the repro's own text, checked where the
// scripts are made.
std::string prose(const std::string& body) {
  std::string out = body;
  for (const std::string& fence : {std::string("```python\n"), std::string("```\nTraceback")}) {
    const size_t a = out.find(fence);
    if (a == std::string::npos) continue;
    const size_t b = out.find("```\n", a + fence.size());
    out.erase(a, b == std::string::npos ? std::string::npos : b + 4 - a);
  }
  return out;
}

}  // namespace

TEST(IssueBody, NoReportLeaksAnInternalWord) {
  for (const auto& r : finding_reports()) {
    const std::string body = prose(issue_body(r, kScript, "repro.py", ran(), {}));
    for (const auto& w : internal_words()) EXPECT_EQ(body.find(w), std::string::npos) << r.id << " says '" << w << "':\n" << body;
  }
}

TEST(IssueBody, FollowsTheOwnersTemplateAndSaysItIsADraft) {
  for (const auto& r : finding_reports()) {
    const std::string body = issue_body(r, kScript, "repro.py", ran(), {});
    const std::vector<std::string> headings =
        r.owner == UpstreamLibrary::Torch ? std::vector<std::string>{"### 🐛 Describe the bug", "### Versions"}
        : r.owner == UpstreamLibrary::Accelerate
            ? std::vector<std::string>{"### System Info", "### Information", "### Tasks", "### Reproduction", "### Expected behavior"}
            : std::vector<std::string>{"### System Info", "### Who can help?", "### Reproduction", "### Expected behavior"};
    size_t at = 0;
    for (const auto& h : headings) {
      const size_t p = body.find(h, at);
      EXPECT_NE(p, std::string::npos) << r.id << ": no '" << h << "' after the previous heading";
      if (p != std::string::npos) at = p;
    }
    EXPECT_NE(body.find("**Draft.**"), std::string::npos) << r.id;
    EXPECT_NE(body.find("**Expected:** " + r.expected), std::string::npos) << r.id;
    EXPECT_NE(body.find("/blob/v"), std::string::npos) << r.id << ": no link at a pinned tag";
    EXPECT_NE(body.find("exits 1"), std::string::npos) << r.id;
    EXPECT_NE(body.find("AssertionError: expected"), std::string::npos) << r.id << ": the captured output is missing";
  }
}

TEST(IssueBody, SaysWhenTheReproCouldNotRun) {
  ReproRun none;
  none.not_run = "no script is kept at docs/findings/x.py";
  const std::string body = issue_body(finding_reports().front(), kScript, "repro.py", none, {});
  EXPECT_NE(body.find("could not be run for this draft: no script is kept"), std::string::npos) << body;
  EXPECT_NE(body.find("Pinned releases"), std::string::npos) << body;
  const ReproRun bad = parse_repro_run("not json");
  EXPECT_FALSE(bad.ran);
  EXPECT_FALSE(bad.not_run.empty());
  const ReproRun ok = parse_repro_run(R"({"command":"python x.py","exit_code":1,"timed_out":false,"output":"o\n","versions":"v"})");
  EXPECT_TRUE(ok.ran);
  EXPECT_EQ(ok.exit_code, 1);
  EXPECT_EQ(ok.command, "python x.py");
}

// A plain-python repro is said to run on CPU, not on gloo (which is torchrun's).
TEST(IssueBody, APlainPythonReproRunsOnCpuNotGloo) {
  const FindingReport& r = finding_reports().front();
  EXPECT_NE(issue_body(r, kScript, "repro.py", ran(), {}).find("`torchrun --nproc_per_node=2 repro.py` on CPU/gloo exits 1"), std::string::npos);
  ReproRun plain = ran();
  plain.command = "python repro.py";
  const std::string body = issue_body(r, kScript, "repro.py", plain, {});
  EXPECT_NE(body.find("`python repro.py` on CPU exits 1"), std::string::npos) << body;
  EXPECT_EQ(body.find("gloo"), std::string::npos) << body;
}
