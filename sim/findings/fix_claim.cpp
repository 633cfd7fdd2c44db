#include "sim/findings/fix_claim.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "model/vocab/profile.hpp"
#include "sim/findings/root_cause.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim {

// Each finding is attributed on its own: two layers' findings at one step may have two mechanisms.
std::vector<Finding> root_cause_findings(const SeqFile& c, const std::string& root_cause) {
  std::vector<Finding> out;
  for (const auto& fd : run_checked(c).findings)
    if (attribute_root_cause(c, fd).id == root_cause) out.push_back(fd);
  return out;
}

FixRerun rerun_with_switch(const SeqFile& f, const std::string& setting, const std::string& root_cause) {
  FixRerun r;
  r.setting = setting;
  r.root_cause = root_cause;
  const size_t eq = setting.find('=');
  const std::string name = setting.substr(0, eq);
  const std::string value = eq == std::string::npos ? "" : setting.substr(eq + 1);
  const auto sw = switch_from_name(name);
  if (!sw) return r.valid = false, r;
  const auto& values = switch_table()[static_cast<size_t>(*sw)].values;
  if (std::none_of(values.begin(), values.end(), [&](const char* v) { return value == v; })) return r.valid = false, r;
  SeqFile c = f;
  auto& ov = c.scenario.overrides;
  ov.erase(std::remove_if(ov.begin(), ov.end(), [&](const SwitchOverride& o) { return o.name == name; }), ov.end());
  ov.push_back({name, value, {}});
  if (!resolve_profile(c.scenario)) return r.valid = false, r;
  r.remaining = root_cause_findings(c, root_cause);
  return r;
}

FixRerun rerun_patched(const SeqFile& f, const std::string& root_cause) {
  FixRerun r;
  r.setting = "profile patched";
  r.root_cause = root_cause;
  SeqFile c = f;
  c.scenario.profile = "patched";
  c.scenario.overrides.clear();
  r.remaining = root_cause_findings(c, root_cause);
  return r;
}

std::string fixing_switch(const SeqFile& f, const std::string& root_cause, int* runs) {
  std::optional<Profile> p = resolve_profile(f.scenario);
  if (!p) return "";
  const auto& table = switch_table();
  for (size_t i = 0; i < table.size(); ++i) {
    if (p->values[i] == table[i].patched) continue;  // already the fix: it did not remove it
    const std::string setting = fmt::format("{}={}", table[i].name, table[i].values[table[i].patched]);
    if (runs) ++*runs;
    if (rerun_with_switch(f, setting, root_cause).removes()) return setting;
  }
  return "";
}

std::string remaining_text(const FixRerun& r, size_t max) {
  std::vector<std::string> texts;
  for (const auto& fd : r.remaining)
    if (std::find(texts.begin(), texts.end(), fd.text) == texts.end()) texts.push_back(fd.text);
  std::string out;
  for (size_t i = 0; i < texts.size() && i < max; ++i) out += (i ? "; " : "") + texts[i];
  if (texts.size() > max) out += fmt::format(" (and {} more)", texts.size() - max);
  return out;
}

}  // namespace fsdpsim
