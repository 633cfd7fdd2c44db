// The checks of sim/release/release_checks.hpp.
#include "sim/release/release_checks.hpp"

#include <map>

namespace fsdpsim {

namespace {

const ReleaseVerdict* find_cell(const std::vector<ReleaseVerdict>& cells, const std::string& stem, const std::string& release) {
  for (const auto& c : cells)
    if (c.stem == stem && c.release == release) return &c;
  return nullptr;
}

}  // namespace

const std::map<std::string, std::string>& fixes_shipped() {
  // Empty: no fix a switch models is in a PEFT release on PyPI (up to 0.21.2).
  // peft#3895 (set_adapter_reshard) and peft#3800 (disable_exit_reshard) are
  // not merged into a release; peft#3453 (enable_inference_mode) and peft#3102
  // (delta_weight_gather) were closed unmerged; adapter_meta_check (#2834) and
  // adapter_save_gather have no PEFT fix. The upstream profile (PEFT 0.21.2)
  // holding each switch's unfixed value says the same for the newest release.
  static const std::map<std::string, std::string> shipped;
  return shipped;
}

std::vector<FixCheck> check_fixes(const std::vector<RootCauseEntry>& catalogue, const std::map<std::string, std::string>& shipped,
                                  const std::vector<ReleaseVerdict>& cells) {
  std::vector<FixCheck> out;
  for (const auto& e : catalogue) {
    if (e.fix_switch.empty()) continue;
    const std::string stem = finding_stem(e.id);
    bool measured = false;
    for (const auto& c : cells) measured = measured || c.stem == stem;
    if (!measured) continue;
    FixCheck f{e.id, e.fix_switch, "", ""};
    const std::string head = e.fix_switch + " (" + e.id + "): ";
    const auto ship = shipped.find(e.id);
    const std::string release_no = ship == shipped.end() ? "" : ship->second;
    if (release_no.empty()) {
      f.status = "not shipped";
      f.line = head + "fix in no PEFT release yet (" + e.verdict_detail + ")";
    } else {
      const std::string release = "peft==" + release_no;
      const ReleaseVerdict* c = find_cell(cells, stem, release);
      const std::string in = "fix shipped in PEFT " + release_no + ": ";
      if (!c) {
        f.status = "not in the matrix";
        f.line = head + in + "not in the matrix (no verdict measured on that release)";
      } else if (c->verdict == "does not reproduce") {
        f.status = "confirmed";
        f.line = head + in + "confirmed (does not reproduce there)";
      } else if (c->verdict == "reproduces") {
        f.status = "contradicted";
        f.line = head + in + "contradicted (it still reproduces there)";
      } else {
        f.status = "no verdict";
        f.line = head + in + "no verdict (" + c->verdict + (c->detail.empty() ? "" : ": " + c->detail) + ")";
      }
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<VerdictChange> verdict_changes(const std::vector<ReleaseVerdict>& kept, const std::vector<ReleaseVerdict>& now) {
  std::map<std::pair<std::string, std::string>, const ReleaseVerdict*> before;
  for (const auto& c : kept)
    if (c.verdict != "broken") before[{c.stem, c.release}] = &c;
  std::vector<VerdictChange> out;
  for (const auto& c : now) {
    auto it = before.find({c.stem, c.release});
    if (it == before.end() || c.verdict == "broken" || it->second->verdict == c.verdict) continue;
    out.push_back({c.stem, c.release, it->second->verdict, c.verdict, c.detail});
  }
  return out;
}

}  // namespace fsdpsim
