#include "model/vocab/profile.hpp"

#include <stdexcept>
#include "model/vocab/scenario.hpp"
#include "model/vocab/suggest.hpp"

namespace fsdpsim {

const std::array<SwitchInfo, kSwitchCount>& switch_table() {
  static const std::array<SwitchInfo, kSwitchCount> table = {{
      {"set_adapter_reshard",
       {"none", "skip_merged", "unmerge_first"},
       sw::kNone,  // peft 0.21.2 peft_model.py::PeftModel.set_adapter: no _reshard_fsdp_modules step at all
       sw::kUnmergeFirst,
       "peft/peft_model.py::PeftModel.set_adapter (0.21.2: no reshard; main per #3872: _reshard_fsdp_modules; fix #3895)",
       "none: no reshard (peft 0.21.2: set active_adapter, base_model.set_adapter unmerges per layer); skip_merged: reshard every FSDP module holding no merged layer, then "
       "set_adapter (which unmerges per layer); unmerge_first: unmerge_adapter, reshard all, set_adapter"},
      {"disable_exit_reshard",
       {"off", "on"},
       sw::kOff,
       sw::kOn,
       "peft/peft_model.py::PeftModel.disable_adapter (exit path, #3800)",
       "on: unmerge if merged and reshard every FSDP module before enable_adapter_layers"},
      {"optimizer_ckpt_reshard",
       {"off", "on"},
       sw::kOff,
       sw::kOn,
       "accelerate/utils/fsdp_utils.py::save_fsdp_optimizer / load_fsdp_optimizer",
       "on: reshard every FSDP module before get_/set_optimizer_state_dict maps optimizer objects to names"},
      {"enable_inference_mode",
       {"ignore", "respect"},
       sw::kIgnore,
       sw::kRespect,
       "peft/tuners/tuners_utils.py::BaseTunerLayer.enable_adapters (#3447 / fix #3453)",
       "ignore: enabling makes every active adapter trainable; respect: adapters with inference_mode stay frozen"},
      {"root_reshard_rule",
       {"auto", "force_false"},
       sw::kAuto,
       sw::kAuto,
       "torch/distributed/fsdp/_fully_shard/_fsdp_state.py::FSDPState._lazy_init",
       "auto (torch >= 2.8): a root given none does not reshard after forward, explicit values kept; "
       "force_false (<= 2.7): the root never reshards after forward"},
      {"adapter_meta_check",
       {"container", "per_adapter"},
       sw::kContainer,
       sw::kPerAdapter,
       "peft/tuners/tuners_utils.py::BaseTunerLayer._move_adapter_to_device_of_base_layer (#2834)",
       "container: skip moving a new adapter when any adapter in its lora_A/lora_B container is on meta; "
       "per_adapter: skip only when this adapter's own parameters are on meta"},
      {"delta_weight_gather",
       {"off", "on"},
       sw::kOff,
       sw::kOn,
       "peft/tuners/lora/layer.py::ParamWrapper.get_delta_weight (#3080, closed fix #3102)",
       "off: read lora_A/lora_B as registered (a sharded group gives the local rows); on: all-gather A and B first"},
      {"adapter_save_gather",
       {"off", "on"},
       sw::kOff,
       sw::kOn,
       "peft/utils/save_and_load.py::get_peft_model_state_dict (DTensor values are not gathered)",
       "off: each rank's state dict holds its local rows; on: full tensors (DCP get_model_state_dict full_state_dict)"},
      {"adapter_save_selection",
       {"all", "active"},
       sw::kAll,
       sw::kAll,
       "peft/peft_model.py::PeftModel.save_pretrained (selected_adapters=None: all)",
       "all: PEFT's default; active: only the active adapter, as accelerate's non-FSDP2 adapter_only path "
       "(accelerate/utils/fsdp_utils.py::_get_model_state_dict) saves"},
  }};
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
  bool patched;               // starts from the table's patched column (else its upstream column)
  Switch changed;             // one switch set apart from that column ...
  int8_t changed_value = -1;  // ... to this value (-1: none)
};

const std::vector<NamedProfile>& named_profiles() {
  static const std::vector<NamedProfile> named = {
      {"upstream", "the pinned versions: torch 2.13.0, peft 0.21.2, accelerate 1.15.0 (every seed bug they have)", false,
       Switch::SetAdapterReshard},
      {"patched", "every known fix applied", true, Switch::SetAdapterReshard},
      // peft#3872 (seed 000) describes PEFT main's PeftModel.set_adapter calling
      // _reshard_fsdp_modules and skipping modules that hold merged layers.
      {"peft-main-3872",
       "upstream with PEFT main as peft#3872 describes it: set_adapter reshards every FSDP module holding no merged layer",
       false, Switch::SetAdapterReshard, sw::kSkipMerged},
  };
  return named;
}

}  // namespace

std::vector<std::string> profile_names() {
  std::vector<std::string> out;
  for (const auto& n : named_profiles()) out.push_back(n.name);
  return out;
}

std::string profile_description(const std::string& name) {
  for (const auto& n : named_profiles())
    if (name == n.name) return n.description;
  return "";
}

std::optional<Profile> profile_by_name(const std::string& name) {
  for (const auto& n : named_profiles()) {
    if (name != n.name) continue;
    Profile p;
    p.name = name;
    const auto& t = switch_table();
    for (int i = 0; i < kSwitchCount; ++i) p.values[i] = n.patched ? t[i].patched : t[i].upstream;
    if (n.changed_value >= 0) p.values[static_cast<int>(n.changed)] = static_cast<uint8_t>(n.changed_value);
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
