// The hunt's catalogue: the reports its classes reach (sim/findings/finding_reports.hpp),
// then the classes grouped by root cause (sim/findings/root_cause.hpp), each root cause
// with its verdict from the catalogue (sim/findings/root_cause_catalogue.hpp).
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "model/vocab/table.hpp"
#include "sim/findings/hunt.hpp"

namespace fsdpsim {
namespace {

std::string cut(std::string s, size_t max) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  if (s.size() > max) s = s.substr(0, max - 3) + "...";
  return s;
}

}  // namespace

bool class_disagrees(const HuntClass& c) {
  return c.real == "DIFFERS" || c.upstream == "DIFFERS" || c.real == "no finding" || c.upstream == "no finding";
}

size_t unconfirmed_by_budget(const HuntReport& r) {
  size_t n = 0;
  for (const auto& c : r.classes) n += (c.real == kNotConfirmedBudget) + (c.upstream == kNotConfirmedBudget);
  return n;
}

std::vector<HuntRootCause> root_causes_of(const HuntReport& r, const std::string& findings_dir) {
  std::map<std::string, HuntRootCause> by_id;
  for (size_t i = 0; i < r.classes.size(); ++i) {
    const HuntClass& c = r.classes[i];
    HuntRootCause& rc = by_id[c.t.root_cause.id];
    if (rc.classes.empty()) rc.entry = root_cause_entry(c.t.root_cause.id);
    rc.classes.push_back(i);
  }
  std::vector<HuntRootCause> out;
  for (auto& [id, rc] : by_id) {
    std::stable_sort(rc.classes.begin(), rc.classes.end(), [&](size_t a, size_t b) {
      return r.classes[a].t.minimal.ops.size() < r.classes[b].t.minimal.ops.size();
    });
    std::set<std::string> specs;
    std::string what_differs;
    bool all_real = true, all_up = true, late = false, cut = false;
    for (size_t i : rc.classes) {
      const HuntClass& c = r.classes[i];
      specs.insert(c.t.spec);
      all_real = all_real && c.real == "yes";
      all_up = all_up && c.upstream == "yes";
      late = late || c.real == kNotConfirmedBudget || c.upstream == kNotConfirmedBudget;
      cut = cut || c.real == kNotConfirmedInterrupted || c.upstream == kNotConfirmedInterrupted;
      if (class_disagrees(c) && what_differs.empty()) what_differs = c.real != "yes" && c.real != "-" ? "real:" + c.real : "upstream:" + c.upstream;
    }
    rc.how = r.classes[rc.classes.front()].t.root_cause.how;
    for (const auto& s : specs) rc.specs += (rc.specs.empty() ? "" : ",") + s;
    auto s = r.scripts.find(id);
    rc.script = s == r.scripts.end() ? "" : s->second;
    rc.confirmed = !what_differs.empty() ? what_differs : all_real && all_up ? "real,up" : all_real ? "real" : all_up ? "upstream" : "model";
    // Never counted as confirmed: what the deadline left is said (the line under the catalogue counts it).
    if (what_differs.empty() && late) rc.confirmed += " (budget)";
    else if (what_differs.empty() && cut) rc.confirmed += " (interrupted)";
    if (rc.script == "reproduces") rc.confirmed += ",script";
    else if (!rc.script.empty()) rc.confirmed += " script:" + rc.script.substr(0, rc.script.find(':'));
    const std::string stem = findings_dir + "/" + finding_stem(id);
    if (std::filesystem::exists(stem + ".md")) rc.page = shown_path(stem + ".md");
    if (std::filesystem::exists(stem + ".py")) rc.repro = shown_path(stem + ".py");
    out.push_back(std::move(rc));
  }
  std::stable_sort(out.begin(), out.end(), [](const HuntRootCause& a, const HuntRootCause& b) {
    return static_cast<int>(a.entry.verdict) < static_cast<int>(b.entry.verdict);
  });
  return out;
}

std::vector<HuntReportRow> reports_of(const HuntReport& r) {
  std::map<std::string, size_t> classes;  // root cause -> classes
  for (const auto& c : r.classes) ++classes[c.t.root_cause.id];
  std::vector<HuntReportRow> out;
  for (ReportAction a : {ReportAction::File, ReportAction::FollowUp, ReportAction::Closed})
    for (const auto& rep : finding_reports()) {
      if (report_action(rep) != a) continue;
      HuntReportRow row;
      row.report = &rep;
      for (const auto& id : rep.entry_points)
        if (auto it = classes.find(id); it != classes.end()) row.reached.push_back(id), row.classes += it->second;
      if (!row.reached.empty()) out.push_back(std::move(row));
    }
  return out;
}

// "N reports (of the catalogue's 23 over 28 root causes): a to file, b to follow up, c closed", then a row each.
static void print_reports(std::ostream& os, const HuntReport& r) {
  const std::vector<HuntReportRow> rows = reports_of(r);
  std::map<ReportAction, int> n;
  for (const auto& row : rows) ++n[report_action(*row.report)];
  size_t entries = 0;
  for (const auto& rep : finding_reports()) entries += rep.entry_points.size();
  os << rows.size() << " reports (of the catalogue's " << finding_reports().size() << " over " << entries << " root causes): "
     << n[ReportAction::File] << " to file, " << n[ReportAction::FollowUp] << " to follow up, " << n[ReportAction::Closed] << " closed\n";
  std::vector<std::vector<std::string>> table = {{"report", "owner", "action", "verdict", "reached", "cls"}};
  for (const auto& row : rows)
    table.push_back({row.report->id, upstream_pin(row.report->owner).package, report_action_word(report_action(*row.report)),
                     root_verdict_word(report_verdict(*row.report)),
                     std::to_string(row.reached.size()) + "/" + std::to_string(row.report->entry_points.size()), std::to_string(row.classes)});
  print_aligned(os, table);
}

int hunt_exit_code(const HuntReport& r, bool fail_on_unreported, bool fail_on_uncatalogued) {
  if (r.infra) return 4;
  for (const auto& c : r.classes)
    if (class_disagrees(c)) return 2;
  for (const auto& [id, s] : r.scripts)  // the plain libraries under torchrun disagree with the model
    if (s == "no-repro" || s == "differs") return 2;
  for (const auto& c : r.classes) {
    if (fail_on_unreported && is_unreported(root_cause_entry(c.t.root_cause.id).verdict)) return 1;
    if (fail_on_uncatalogued && c.regression.empty()) return 1;
  }
  return 0;
}

void print_catalogue(std::ostream& os, const HuntReport& r, const std::string& findings_dir) {
  print_reports(os, r);
  const std::vector<HuntRootCause> rcs = root_causes_of(r, findings_dir);
  std::map<RootVerdict, int> counts;
  for (const auto& rc : rcs) ++counts[rc.entry.verdict];
  // The counts per verdict, continued on an indented line where they pass 120 columns.
  std::string line = std::to_string(rcs.size()) + " root causes:";
  bool first = true;
  for (const auto& [v, n] : counts) {
    const std::string item = std::to_string(n) + " " + root_verdict_word(v);
    if (line.size() + item.size() + 2 > 120) os << line << ",\n", line = "  " + item;
    else line += (first ? " " : ", ") + item;
    first = false;
  }
  os << line << "\n";
  std::vector<std::vector<std::string>> rows = {{"root cause", "verdict", "spec", "cls", "confirmed", "repro", "symptom"}};
  for (const auto& rc : rcs) rows.push_back({rc.entry.id, root_verdict_word(rc.entry.verdict), rc.specs, std::to_string(rc.classes.size()),
                                             rc.confirmed, rc.repro.empty() ? "-" : "yes", ""});
  // The symptom takes what the other columns leave of 120.
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t k = 0; k < row.size(); ++k) width[k] = std::max(width[k], row[k].size());
  size_t used = 0;
  for (size_t k = 0; k + 1 < width.size(); ++k) used += width[k] + 2;
  const size_t room = used + 20 < 120 ? 120 - used : 20;
  // The shortest class's finding, without its "S1 step 3 rank 0: " (the spec column says it).
  for (size_t i = 0; i < rcs.size(); ++i) {
    const std::string& text = r.classes[rcs[i].classes.front()].t.symptom;
    const size_t colon = text.find(": ");
    rows[i + 1].back() = cut(colon == std::string::npos ? text : text.substr(colon + 2), room);
  }
  print_aligned(os, rows);
  std::vector<std::string> unkept;
  for (const auto& c : r.classes)
    if (c.regression.empty()) unkept.push_back(c.stem);
  // Every line within 120 columns: the lists are cut, the details are in summary.json.
  if (!unkept.empty() && unkept.size() < r.classes.size()) {
    std::string line = std::to_string(unkept.size()) + " of " + std::to_string(r.classes.size()) + " classes have no regression file:";
    for (const auto& u : unkept) line += " " + u;
    os << cut(line, 120) << "\n";
  }
  if (const size_t late = unconfirmed_by_budget(r))
    os << kNotConfirmedBudget << ": " << late << " (class, backend) confirmations, \"(budget)\" above; a longer --seconds runs them\n";
  if (r.interrupted) {
    size_t cut = 0;
    for (const auto& c : r.classes) cut += (c.real == kNotConfirmedInterrupted) + (c.upstream == kNotConfirmedInterrupted);
    os << "interrupted: a partial catalogue, the classes found before the signal; " << cut
       << " (class, backend) confirmations not run, \"(interrupted)\" above\n";
  }
  // Only a folder that is there (cmd_hunt says once when it is not).
  if (std::filesystem::is_directory(findings_dir))
    os << "pages, scripts: " << shown_path(findings_dir) << "/report-<report>.md, <root cause, '/' as '.'>.md|.py\n";
  os << "details: summary.json, --json, --html\n";
  bool header = false;
  for (const auto& c : r.classes)
    for (size_t k = 0; k < c.divergences.size() && k < 3; ++k) {
      if (!header) os << "differences (model first):\n";
      header = true;
      os << cut("  " + c.stem + " " + c.divergences[k], 120) << "\n";
    }
}

}  // namespace fsdpsim
