// Profiles and switches: named profiles, per-switch values, overrides.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "model/vocab/profile.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim {
namespace {

TEST(Profile, NamesAreUpstreamPatchedAndPeftMain3872) {
  EXPECT_EQ(profile_names(), (std::vector<std::string>{"upstream", "patched", "peft-main-3872"}));
  for (const auto& n : profile_names()) {
    auto p = profile_by_name(n);
    ASSERT_TRUE(p.has_value()) << n;
    EXPECT_EQ(p->name, n);
    EXPECT_NE(profile_description(n), "") << n;
  }
  EXPECT_EQ(profile_description("nightly"), "");
  EXPECT_NE(profile_description("upstream").find("peft 0.21.2"), std::string::npos);
}

// peft-main-3872 is upstream but for PeftModel.set_adapter's reshard (#3872).
TEST(Profile, PeftMain3872IsUpstreamWithSkipMerged) {
  Profile up = *profile_by_name("upstream");
  Profile pm = *profile_by_name("peft-main-3872");
  EXPECT_EQ(pm.get(Switch::SetAdapterReshard), sw::kSkipMerged);
  for (int i = 0; i < kSwitchCount; ++i) {
    if (static_cast<Switch>(i) == Switch::SetAdapterReshard) continue;
    EXPECT_EQ(pm.values[i], up.values[i]) << switch_table()[i].name;
  }
}

TEST(Profile, UnknownNamesAreRejected) {
  EXPECT_FALSE(profile_by_name("").has_value());
  EXPECT_FALSE(profile_by_name("Upstream").has_value());
  EXPECT_FALSE(profile_by_name("nightly").has_value());
  EXPECT_FALSE(profile_by_name("patched ").has_value());
}

TEST(Profile, EverySwitchMatchesTheTable) {
  const auto& t = switch_table();
  Profile up = *profile_by_name("upstream");
  Profile pa = *profile_by_name("patched");
  for (int i = 0; i < kSwitchCount; ++i) {
    SCOPED_TRACE(t[i].name);
    Switch s = static_cast<Switch>(i);
    EXPECT_EQ(up.get(s), t[i].upstream);
    EXPECT_EQ(pa.get(s), t[i].patched);
    EXPECT_LT(t[i].upstream, t[i].values.size());
    EXPECT_LT(t[i].patched, t[i].values.size());
  }
}

TEST(Profile, DocumentedDefaults) {
  Profile up = *profile_by_name("upstream");
  Profile pa = *profile_by_name("patched");
  EXPECT_EQ(up.get(Switch::SetAdapterReshard), sw::kNone);  // peft 0.21.2: no reshard in set_adapter
  EXPECT_EQ(pa.get(Switch::SetAdapterReshard), sw::kUnmergeFirst);
  EXPECT_EQ(up.get(Switch::DisableExitReshard), sw::kOff);
  EXPECT_EQ(pa.get(Switch::DisableExitReshard), sw::kOn);
  EXPECT_EQ(up.get(Switch::OptimizerCkptReshard), sw::kOff);
  EXPECT_EQ(pa.get(Switch::OptimizerCkptReshard), sw::kOn);
  EXPECT_EQ(up.get(Switch::EnableInferenceMode), sw::kIgnore);
  EXPECT_EQ(pa.get(Switch::EnableInferenceMode), sw::kRespect);
  EXPECT_EQ(up.get(Switch::RootReshardRule), sw::kAuto);
  EXPECT_EQ(pa.get(Switch::RootReshardRule), sw::kAuto);
  EXPECT_FALSE(up == pa);
}

TEST(Profile, SwitchTableIsWellFormed) {
  const auto& t = switch_table();
  std::set<std::string> names;
  for (int i = 0; i < kSwitchCount; ++i) {
    SCOPED_TRACE(t[i].name);
    EXPECT_TRUE(names.insert(t[i].name).second) << "duplicate switch name";
    EXPECT_GE(t[i].values.size(), 2u);
    EXPECT_STRNE(t[i].mirrors, "");
    EXPECT_STRNE(t[i].doc, "");
    std::set<std::string> values(t[i].values.begin(), t[i].values.end());
    EXPECT_EQ(values.size(), t[i].values.size()) << "duplicate value";
    auto s = switch_from_name(t[i].name);
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(static_cast<int>(*s), i);
  }
  EXPECT_EQ(std::string(t[0].name), "set_adapter_reshard");
  EXPECT_EQ(std::string(t[4].name), "root_reshard_rule");
  EXPECT_FALSE(switch_from_name("bogus").has_value());
  EXPECT_FALSE(switch_from_name("").has_value());
}

TEST(Profile, ApplyOverrideSetsEveryValueOfEverySwitch) {
  const auto& t = switch_table();
  for (int i = 0; i < kSwitchCount; ++i) {
    for (size_t v = 0; v < t[i].values.size(); ++v) {
      Profile p = *profile_by_name("upstream");
      Profile before = p;
      EXPECT_EQ(apply_override(p, t[i].name, t[i].values[v]), "") << t[i].name << "=" << t[i].values[v];
      EXPECT_EQ(p.get(static_cast<Switch>(i)), v);
      for (int j = 0; j < kSwitchCount; ++j) {
        if (j == i) continue;
        EXPECT_EQ(p.values[j], before.values[j]) << "override of " << t[i].name << " touched " << t[j].name;
      }
      EXPECT_EQ(p.name, "upstream");
    }
  }
}

TEST(Profile, ApplyOverrideUnknownSwitch) {
  Profile p = *profile_by_name("patched");
  Profile before = p;
  std::string err = apply_override(p, "bogus", "on");
  EXPECT_EQ(err,
            "unknown switch 'bogus' (expected one of: set_adapter_reshard, disable_exit_reshard, "
            "optimizer_ckpt_reshard, enable_inference_mode, root_reshard_rule, adapter_meta_check, delta_weight_gather, "
            "adapter_save_gather, adapter_save_selection, delete_fallback, tuner_flags_reshard, save_key_prefixes, add_adapter_rollback, single_expert_delta)");
  EXPECT_EQ(p, before);
}

TEST(Profile, ApplyOverrideBadValue) {
  Profile p = *profile_by_name("upstream");
  Profile before = p;
  EXPECT_EQ(apply_override(p, "set_adapter_reshard", "always"),
            "bad value 'always' for switch set_adapter_reshard (expected none|skip_merged|unmerge_first)");
  EXPECT_EQ(apply_override(p, "disable_exit_reshard", "ON"),
            "bad value 'ON' for switch disable_exit_reshard (expected off|on)");
  EXPECT_EQ(apply_override(p, "root_reshard_rule", ""),
            "bad value '' for switch root_reshard_rule (expected auto|force_false)");
  EXPECT_EQ(p, before);
}

TEST(Profile, ProfileText) {
  EXPECT_EQ(profile_text(*profile_by_name("upstream")),
            "upstream (set_adapter_reshard=none, disable_exit_reshard=off, optimizer_ckpt_reshard=off, "
            "enable_inference_mode=ignore, root_reshard_rule=auto, adapter_meta_check=container, delta_weight_gather=off, "
            "adapter_save_gather=off, adapter_save_selection=all, delete_fallback=per_layer, tuner_flags_reshard=off, "
            "save_key_prefixes=module_names, add_adapter_rollback=off, single_expert_delta=linear)");
  EXPECT_EQ(profile_text(*profile_by_name("patched")),
            "patched (set_adapter_reshard=unmerge_first, disable_exit_reshard=on, optimizer_ckpt_reshard=on, "
            "enable_inference_mode=respect, root_reshard_rule=auto, adapter_meta_check=per_adapter, delta_weight_gather=on, "
            "adapter_save_gather=on, adapter_save_selection=all, delete_fallback=shared, tuner_flags_reshard=on, "
            "save_key_prefixes=wrappers_stripped, add_adapter_rollback=on, single_expert_delta=param_layout)");
  Profile p = *profile_by_name("upstream");
  ASSERT_EQ(apply_override(p, "root_reshard_rule", "force_false"), "");
  ASSERT_EQ(apply_override(p, "set_adapter_reshard", "skip_merged"), "");
  EXPECT_EQ(profile_text(p),
            "upstream (set_adapter_reshard=skip_merged, disable_exit_reshard=off, optimizer_ckpt_reshard=off, "
            "enable_inference_mode=ignore, root_reshard_rule=force_false, adapter_meta_check=container, "
            "delta_weight_gather=off, adapter_save_gather=off, adapter_save_selection=all, delete_fallback=per_layer, "
            "tuner_flags_reshard=off, save_key_prefixes=module_names, add_adapter_rollback=off, single_expert_delta=linear)");
}


// resolve_profile / effective_profile: the named profile, then the file's `set` lines in order
// (a later one wins); a bad name or override says which, and validate points at that line.
TEST(Profile, EffectiveProfileAppliesTheOverridesInOrder) {
  Scenario s;
  s.profile = "upstream";
  EXPECT_EQ(effective_profile(s), *profile_by_name("upstream"));
  s.overrides = {{"set_adapter_reshard", "skip_merged", {}}, {"disable_exit_reshard", "on", {}},
                 {"set_adapter_reshard", "unmerge_first", {}}};
  const Profile p = effective_profile(s);
  EXPECT_EQ(p.name, "upstream");
  EXPECT_EQ(p.get(Switch::SetAdapterReshard), sw::kUnmergeFirst);
  EXPECT_EQ(p.get(Switch::DisableExitReshard), sw::kOn);
  Profile by_hand = *profile_by_name("upstream");
  for (const auto& o : s.overrides) ASSERT_EQ(apply_override(by_hand, o.name, o.value), "");
  EXPECT_EQ(p, by_hand);

  std::string error;
  int failed = -2;
  s.overrides[1].value = "sometimes";
  EXPECT_FALSE(resolve_profile(s, &error, &failed));
  EXPECT_EQ(failed, 1);
  EXPECT_NE(error.find("disable_exit_reshard"), std::string::npos) << error;
  EXPECT_THROW(effective_profile(s), std::invalid_argument);
  s.profile = "nightly";
  EXPECT_FALSE(resolve_profile(s, &error, &failed));
  EXPECT_EQ(failed, -1);
  EXPECT_EQ(error, "unknown profile nightly");
}

TEST(Profile, ValidatePointsAtTheBadOverride) {
  SeqFile f = parse_seq("profile patched\nset disable_exit_reshard=off\nlayer lin0 4 2\nadapter default targets=lin0\n"
                        "fully_shard root\n---\nforward\n");
  EXPECT_EQ(effective_profile(f.scenario).get(Switch::DisableExitReshard), sw::kOff);
  f.scenario.overrides.push_back({"root_reshard_rule", "never", {7, 5}});
  try {
    validate(f, "<test>");
    FAIL() << "validate accepted root_reshard_rule=never";
  } catch (const SourceError& e) {
    EXPECT_NE(std::string(e.what()).find("<test>:7:5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fsdpsim
