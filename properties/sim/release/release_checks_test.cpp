// Measured release verdicts checked (sim/release/release_checks.hpp): a fix switch
// against the release that shipped the fix, and a new matrix run against the kept one.
#include <gtest/gtest.h>

#include "model/vocab/profile.hpp"
#include "sim/release/release_checks.hpp"

using namespace fsdpsim;

namespace {

RootCauseEntry fixed_entry(const std::string& id) {
  RootCauseEntry e;
  e.id = id;
  e.verdict = RootVerdict::FixedIn;
  e.verdict_detail = "huggingface/peft#1 (merged)";
  e.fix_switch = "set_adapter_reshard=unmerge_first";
  return e;
}

std::string status_of(const std::vector<FixCheck>& checks, const std::string& id) {
  for (const auto& c : checks)
    if (c.root_cause == id) return c.status;
  return "(none)";
}

}  // namespace

TEST(FixChecks, TheFirstReleaseWithTheFixMustNotReproduce) {
  const std::vector<RootCauseEntry> cat = {fixed_entry("a/x"), fixed_entry("b"), fixed_entry("c"),
                                           fixed_entry("d"), fixed_entry("e"), fixed_entry("unmeasured")};
  const std::map<std::string, std::string> shipped = {{"a/x", "0.20.0"}, {"b", "0.20.0"}, {"c", "0.22.0"}, {"e", "0.20.0"}, {"unmeasured", "0.20.0"}};
  const std::vector<ReleaseVerdict> cells = {
      {"a.x", "peft==0.19.1", "reproduces", ""},       {"a.x", "peft==0.20.0", "does not reproduce", "step 2"},
      {"b", "peft==0.20.0", "reproduces", ""},          {"c", "peft==0.21.2", "reproduces", ""},
      {"d", "peft==0.21.2", "reproduces", ""},          {"e", "peft==0.20.0", "cannot run", "TypeError: x"},
  };
  const std::vector<FixCheck> got = check_fixes(cat, shipped, cells);
  EXPECT_EQ(status_of(got, "a/x"), "confirmed");
  EXPECT_EQ(status_of(got, "b"), "contradicted");
  EXPECT_EQ(status_of(got, "c"), "not in the matrix");
  EXPECT_EQ(status_of(got, "d"), "not shipped");
  EXPECT_EQ(status_of(got, "e"), "no verdict");
  EXPECT_EQ(status_of(got, "unmeasured"), "(none)");
  EXPECT_EQ(got.size(), 5u);
}

TEST(FixChecks, EveryFixSwitchAgreesWithTheShippedList) {
  // Each catalogue switch names its fixed value ("set_adapter_reshard=unmerge_first"). A fix
  // listed as shipped needs such a switch (or there is nothing to check), and for a bug the
  // upstream profile (the newest pinned release) holds the fixed value exactly when the fix is
  // shipped. A by-design, documented, unsupported or misuse entry's switch is the behaviour that
  // avoids it, which upstream may well hold; nothing of it is "shipped".
  const Profile upstream = *profile_by_name("upstream");
  int switches = 0;
  for (const auto& e : root_cause_catalogue()) {
    if (e.fix_switch.empty()) {
      EXPECT_EQ(fixes_shipped().count(e.id), 0u) << e.id << " is listed as shipped but has no fix switch";
      continue;
    }
    ++switches;
    const size_t eq = e.fix_switch.find('=');
    ASSERT_NE(eq, std::string::npos) << e.id << ": " << e.fix_switch;
    const std::optional<Switch> sw = switch_from_name(e.fix_switch.substr(0, eq));
    ASSERT_TRUE(sw.has_value()) << e.id << ": " << e.fix_switch;
    const SwitchInfo& info = switch_table()[static_cast<int>(*sw)];
    const std::string held = info.values[upstream.get(*sw)];
    const bool shipped = fixes_shipped().count(e.id) > 0;
    if (e.verdict >= RootVerdict::ByDesign) {
      EXPECT_FALSE(shipped) << e.id << " is " << root_verdict_word(e.verdict) << ", not a bug with a shipped fix";
      continue;
    }
    EXPECT_EQ(held == e.fix_switch.substr(eq + 1), shipped)
        << e.id << ": the upstream profile holds " << info.name << "=" << held << ", the fix is "
        << e.fix_switch << ", and fixes_shipped " << (shipped ? "lists" : "does not list") << " it";
  }
  EXPECT_GT(switches, 0);
}

TEST(VerdictChanges, OnlyPairsBothRunsJudged) {
  const std::vector<ReleaseVerdict> kept = {{"a", "peft==0.17.1", "reproduces", ""},
                                            {"a", "peft==0.21.2", "reproduces", ""},
                                            {"b", "peft==0.21.2", "broken", "pool died"},
                                            {"c", "peft==0.15.2", "cannot run", "TypeError"},
                                            {"e", "peft==0.21.2", "reproduces", ""}};
  const std::vector<ReleaseVerdict> now = {{"a", "peft==0.17.1", "does not reproduce", "step 4"},
                                           {"a", "peft==0.21.2", "reproduces", ""},
                                           {"b", "peft==0.21.2", "reproduces", ""},
                                           {"c", "peft==0.15.2", "reproduces", ""},
                                           {"d", "peft==0.21.2", "reproduces", ""},
                                           {"e", "peft==0.21.2", "broken", "pool died"}};  // no verdict: not a change
  const std::vector<VerdictChange> got = verdict_changes(kept, now);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].stem, "a");
  EXPECT_EQ(got[0].was, "reproduces");
  EXPECT_EQ(got[0].now, "does not reproduce");
  EXPECT_EQ(got[0].detail, "step 4");
  EXPECT_EQ(got[1].stem, "c");  // cannot run -> reproduces is a change of status too
}
