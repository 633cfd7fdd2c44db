#include "model/vocab/profile.hpp"

#include <iterator>
#include <stdexcept>
#include "model/vocab/scenario.hpp"
#include "model/vocab/suggest.hpp"

namespace fsdpsim {

namespace {

// The table lives in profiles.json, which the upstream backend's profiles.py
// reads too; model/vocab/profile_table.cmake compiles it into these rows.
constexpr int kMaxSwitchValues = 3;
struct SwitchRow {
  const char* name;
  std::array<const char*, kMaxSwitchValues> values;  // nullptr past the last
  uint8_t upstream;
  uint8_t patched;
  const char* mirrors;
  const char* doc;
};
constexpr SwitchRow kSwitchRows[] = {
#include "profile_switches.inc"
};

constexpr bool same(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}
constexpr const char* value_name(Switch s, int v) { return kSwitchRows[static_cast<int>(s)].values[v]; }

// The enums in profile.hpp name rows and values by position: the file must keep that order.
static_assert(std::size(kSwitchRows) == kSwitchCount, "profiles.json: one row per Switch");
static_assert(same(kSwitchRows[static_cast<int>(Switch::SetAdapterReshard)].name, "set_adapter_reshard"));
static_assert(same(kSwitchRows[static_cast<int>(Switch::DisableExitReshard)].name, "disable_exit_reshard"));
static_assert(same(kSwitchRows[static_cast<int>(Switch::OptimizerCkptReshard)].name, "optimizer_ckpt_reshard"));
static_assert(same(kSwitchRows[static_cast<int>(Switch::EnableInferenceMode)].name, "enable_inference_mode"));
static_assert(same(kSwitchRows[static_cast<int>(Switch::RootReshardRule)].name, "root_reshard_rule"));
static_assert(same(kSwitchRows[static_cast<int>(Switch::AdapterMetaCheck)].name, "adapter_meta_check"));
static_assert(same(kSwitchRows[static_cast<int>(Switch::DeltaWeightGather)].name, "delta_weight_gather"));
static_assert(same(kSwitchRows[static_cast<int>(Switch::AdapterSaveGather)].name, "adapter_save_gather"));
static_assert(same(kSwitchRows[static_cast<int>(Switch::AdapterSaveSelection)].name, "adapter_save_selection"));
static_assert(same(kSwitchRows[static_cast<int>(Switch::DeleteFallback)].name, "delete_fallback"));
static_assert(same(kSwitchRows[static_cast<int>(Switch::TunerFlagsReshard)].name, "tuner_flags_reshard"));
static_assert(same(kSwitchRows[static_cast<int>(Switch::SaveKeyPrefixes)].name, "save_key_prefixes"));
static_assert(same(kSwitchRows[static_cast<int>(Switch::AddAdapterRollback)].name, "add_adapter_rollback"));
static_assert(same(kSwitchRows[static_cast<int>(Switch::SingleExpertDelta)].name, "single_expert_delta"));
static_assert(same(value_name(Switch::SetAdapterReshard, sw::kSkipMerged), "skip_merged") &&
              same(value_name(Switch::SetAdapterReshard, sw::kUnmergeFirst), "unmerge_first"));
static_assert(same(value_name(Switch::DisableExitReshard, sw::kOn), "on") &&
              same(value_name(Switch::OptimizerCkptReshard, sw::kOn), "on") &&
              same(value_name(Switch::DeltaWeightGather, sw::kOn), "on") &&
              same(value_name(Switch::AdapterSaveGather, sw::kOn), "on"));
static_assert(same(value_name(Switch::EnableInferenceMode, sw::kRespect), "respect"));
static_assert(same(value_name(Switch::RootReshardRule, sw::kForceFalse), "force_false"));
static_assert(same(value_name(Switch::AdapterMetaCheck, sw::kPerAdapter), "per_adapter"));
static_assert(same(value_name(Switch::AdapterSaveSelection, sw::kActive), "active"));
static_assert(same(value_name(Switch::DeleteFallback, sw::kShared), "shared"));
static_assert(same(value_name(Switch::TunerFlagsReshard, sw::kOn), "on"));
static_assert(same(value_name(Switch::SaveKeyPrefixes, sw::kWrappersStripped), "wrappers_stripped"));
static_assert(same(value_name(Switch::AddAdapterRollback, sw::kOn), "on"));
static_assert(same(value_name(Switch::SingleExpertDelta, sw::kParamLayout), "param_layout"));

}  // namespace

const std::array<SwitchInfo, kSwitchCount>& switch_table() {
  static const std::array<SwitchInfo, kSwitchCount> table = [] {
    std::array<SwitchInfo, kSwitchCount> t;
    for (int i = 0; i < kSwitchCount; ++i) {
      const SwitchRow& r = kSwitchRows[i];
      std::vector<const char*> values;
      for (const char* v : r.values)
        if (v) values.push_back(v);
      t[i] = {r.name, values, r.upstream, r.patched, r.mirrors, r.doc};
    }
    return t;
  }();
  return table;
}

std::optional<Switch> switch_from_name(const std::string& name) {
  const auto& t = switch_table();
  for (int i = 0; i < kSwitchCount; ++i)
    if (name == t[i].name) return static_cast<Switch>(i);
  return std::nullopt;
}

namespace {

struct NamedProfile {
  const char* name;
  const char* description;
  bool patched;                               // starts from the table's patched column (else its upstream column)
  std::array<int8_t, kSwitchCount> changed;  // the values its `set` gives apart from that column (-1: none)
};

constexpr NamedProfile kNamedProfiles[] = {
#include "profile_profiles.inc"
};

}  // namespace

std::vector<std::string> profile_names() {
  std::vector<std::string> out;
  for (const auto& n : kNamedProfiles) out.push_back(n.name);
  return out;
}

std::string profile_description(const std::string& name) {
  for (const auto& n : kNamedProfiles)
    if (name == n.name) return n.description;
  return "";
}

std::optional<Profile> profile_by_name(const std::string& name) {
  for (const auto& n : kNamedProfiles) {
    if (name != n.name) continue;
    Profile p;
    p.name = name;
    const auto& t = switch_table();
    for (int i = 0; i < kSwitchCount; ++i) p.values[i] = n.patched ? t[i].patched : t[i].upstream;
    for (int i = 0; i < kSwitchCount; ++i)
      if (n.changed[i] >= 0) p.values[i] = static_cast<uint8_t>(n.changed[i]);
    return p;
  }
  return std::nullopt;
}

std::string apply_override(Profile& p, const std::string& name, const std::string& value) {
  auto s = switch_from_name(name);
  const auto& t = switch_table();
  if (!s) {
    std::vector<std::string> all;
    for (const auto& i : t) all.push_back(i.name);
    return "unknown switch '" + name + "'" + suggest_or_list(name, all);
  }
  const SwitchInfo& info = t[static_cast<int>(*s)];
  for (size_t v = 0; v < info.values.size(); ++v) {
    if (value == info.values[v]) {
      p.values[static_cast<int>(*s)] = static_cast<uint8_t>(v);
      return "";
    }
  }
  std::string all;
  for (const char* v : info.values) all += std::string(all.empty() ? "" : "|") + v;
  return "bad value '" + value + "' for switch " + name + " (expected " + all + ")";
}

std::optional<Profile> resolve_profile(const Scenario& s, std::string* error, int* failed) {
  auto fail = [&](const std::string& why, int at) -> std::optional<Profile> {
    if (error) *error = why;
    if (failed) *failed = at;
    return std::nullopt;
  };
  std::optional<Profile> p = profile_by_name(s.profile);
  if (!p) return fail("unknown profile " + s.profile, -1);
  for (size_t i = 0; i < s.overrides.size(); ++i) {
    const std::string err = apply_override(*p, s.overrides[i].name, s.overrides[i].value);
    if (!err.empty()) return fail(err, static_cast<int>(i));
  }
  return p;
}

Profile effective_profile(const Scenario& s) {
  std::string error;
  std::optional<Profile> p = resolve_profile(s, &error);
  if (!p) throw std::invalid_argument(error);
  return *p;
}

std::string profile_text(const Profile& p) {
  std::string out = p.name + " (";
  const auto& t = switch_table();
  for (int i = 0; i < kSwitchCount; ++i) {
    if (i) out += ", ";
    out += std::string(t[i].name) + "=" + t[i].values[p.values[i]];
  }
  return out + ")";
}

std::string switches_json(const Profile& p) {
  std::string out = "{";
  const auto& t = switch_table();
  for (int i = 0; i < kSwitchCount; ++i)
    out += std::string(i ? "," : "") + "\"" + t[i].name + "\":\"" + t[i].values[p.values[i]] + "\"";
  return out + "}";
}

}  // namespace fsdpsim
