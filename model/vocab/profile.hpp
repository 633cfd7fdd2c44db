// Profiles: named sets of upstream behaviour switches. Each switch is one
// documented function in the model (and later the real backend).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fsdpsim {

struct Scenario;

enum class Switch : uint8_t {
  SetAdapterReshard,     // none | skip_merged | unmerge_first
  DisableExitReshard,    // off | on
  OptimizerCkptReshard,  // off | on
  EnableInferenceMode,   // ignore | respect
  RootReshardRule,       // auto | force_false
  AdapterMetaCheck,      // container | per_adapter
  DeltaWeightGather,     // off | on
  AdapterSaveGather,     // off | on
  AdapterSaveSelection,  // all | active
  DeleteFallback,        // per_layer | shared
  TunerFlagsReshard,     // off | on
  SaveKeyPrefixes,       // module_names | wrappers_stripped
  AddAdapterRollback,    // off | on
  SingleExpertDelta,     // linear | param_layout
};
constexpr int kSwitchCount = 14;

// Value indexes per switch (positions in SwitchInfo::values).
namespace sw {
enum SetAdapterReshard : uint8_t { kNone = 0, kSkipMerged = 1, kUnmergeFirst = 2 };
enum OnOff : uint8_t { kOff = 0, kOn = 1 };
enum EnableInferenceMode : uint8_t { kIgnore = 0, kRespect = 1 };
enum RootReshardRule : uint8_t { kAuto = 0, kForceFalse = 1 };
enum AdapterMetaCheck : uint8_t { kContainer = 0, kPerAdapter = 1 };
enum AdapterSaveSelection : uint8_t { kAll = 0, kActive = 1 };
enum DeleteFallback : uint8_t { kPerLayer = 0, kShared = 1 };
enum SaveKeyPrefixes : uint8_t { kModuleNames = 0, kWrappersStripped = 1 };
enum SingleExpertDelta : uint8_t { kLinear = 0, kParamLayout = 1 };
}  // namespace sw

struct SwitchInfo {
  const char* name;
  std::vector<const char*> values;
  uint8_t upstream;
  uint8_t patched;
  const char* mirrors;  // upstream file and function
  const char* doc;      // what each value does, one line
};

const std::array<SwitchInfo, kSwitchCount>& switch_table();
std::optional<Switch> switch_from_name(const std::string& name);

struct Profile {
  std::string name;
  std::array<uint8_t, kSwitchCount> values{};
  uint8_t get(Switch s) const { return values[static_cast<int>(s)]; }
  bool operator==(const Profile& o) const { return name == o.name && values == o.values; }
};

// The named profiles, in listing order: "upstream" (the pinned versions the
// upstream backend runs: torch 2.13.0, peft 0.21.2, accelerate 1.15.0),
// "patched" (every known fix), "peft-main-3872" (upstream with the PEFT main
// revision peft#3872 describes).
std::vector<std::string> profile_names();
std::string profile_description(const std::string& name);  // one line; "" for an unknown name
std::optional<Profile> profile_by_name(const std::string& name);
// Sets one switch; returns an error text ("" on success) naming the valid choices.
std::string apply_override(Profile& p, const std::string& name, const std::string& value);
std::string profile_text(const Profile& p);  // "upstream (set_adapter_reshard=skip_merged, ...)"
// The profile a scenario runs under: its named `profile` with its `set` overrides applied in
// file order. nullopt when either is bad: *error says why and *failed is the bad override's
// index (-1: the profile's name). The parser and validate refuse both, so a parsed file resolves.
std::optional<Profile> resolve_profile(const Scenario& s, std::string* error = nullptr, int* failed = nullptr);
// The same for a scenario known to resolve; throws std::invalid_argument with the error otherwise.
Profile effective_profile(const Scenario& s);
// {"set_adapter_reshard":"none",...}: every switch, as the upstream backend takes them.
std::string switches_json(const Profile& p);

}  // namespace fsdpsim
