#include "sim/hunt_html.hpp"

#include <algorithm>
#include <sstream>

#include "sim/report_html.hpp"
#include "sim/simulator.hpp"

namespace fsdpsim {
namespace {

// "model,real,upstream" as confirmed, with any disagreement named.
std::string confirmed_text(const HuntClass& c) {
  std::string s = "model";
  if (c.real == "yes") s += ", real";
  if (c.upstream == "yes") s += ", upstream";
  for (const auto& [who, v] : {std::pair<const char*, const std::string*>{"real", &c.real}, {"upstream", &c.upstream}})
    if (*v != "yes" && *v != "-" && *v != "not installed") s += std::string("; ") + who + ": " + *v;
  return s;
}

// The class's timeline: the confirmations' runs, model first; a model run of
// its own when nothing was confirmed (--no real backend, a harness failure).
Timeline class_timeline(const HuntClass& c, size_t i) {
  Timeline t;
  t.id = "class-" + std::to_string(i + 1);
  t.title = std::to_string(i + 1) + ". " + c.stem;
  t.file = c.t.minimal;
  std::vector<SingleRun> runs = c.runs;
  std::stable_sort(runs.begin(), runs.end(), [](const SingleRun& a, const SingleRun& b) { return a.backend < b.backend; });
  for (const auto& run : runs) t.backends.push_back({backend_name(run.backend), run.observations, run.findings});
  if (t.backends.empty()) {
    RunResult r = run_checked(c.t.minimal);
    t.backends.push_back({"model", r.observations, r.findings});
  }
  t.notes.push_back("signature: " + c.t.signature);
  t.notes.push_back("found by " + c.found_by + ", " + std::to_string(c.hits) + " candidates triaged into it; confirmed: " + confirmed_text(c));
  const RootCauseEntry e = root_cause_entry(c.t.root_cause.id);
  t.notes.push_back("root cause " + e.id + " (" + verdict_text(e) + "): " + c.t.root_cause.how);
  if (!c.t.fix_switch.empty()) t.notes.push_back("patched's " + c.t.fix_switch + " removes it (" + c.t.fix_cites + ")");
  for (const auto& d : c.divergences) t.notes.push_back(d);
  return t;
}

}  // namespace

std::string hunt_html(const HuntReport& r) {
  std::ostringstream s;
  s << "<section class=\"catalogue\">\n<h1>fsdpsim hunt: " << r.classes.size() << " classes</h1>\n<p class=\"summary\">seed " << r.seed
    << " &middot; profile " << html_escape(r.profile) << " &middot; world " << r.world << " &middot; " << r.sequences
    << " sequences fuzzed, " << r.explored << " from the explorer, " << r.triaged << " triaged</p>\n";
  if (!r.upstream_versions.empty()) s << "<p class=\"note\">" << html_escape(r.upstream_versions) << "</p>\n";
  if (r.infra) s << "<p class=\"note\">harness failure: " << html_escape(r.infra_message) << "</p>\n";
  // The root causes first, one row each, with their verdict and page; the classes below name theirs.
  const std::vector<HuntRootCause> rcs = root_causes_of(r);
  s << "<h2>" << rcs.size() << " root causes</h2>\n<table class=\"tl roots\"><thead><tr><th>root cause</th><th>verdict</th><th>spec</th>"
       "<th>classes</th><th>confirmed</th><th>mechanism</th></tr></thead>\n<tbody>\n";
  for (const auto& rc : rcs)
    s << "<tr class=\"root-row\"><td>" << (rc.page.empty() ? html_escape(rc.entry.id) : "<a href=\"" + html_escape(rc.page) + "\">" + html_escape(rc.entry.id) + "</a>")
      << "</td><td>" << html_escape(verdict_text(rc.entry)) << "</td><td>" << html_escape(rc.specs) << "</td><td>" << rc.classes.size() << "</td><td>"
      << html_escape(rc.confirmed) << "</td><td>" << html_escape(rc.entry.title) << "</td></tr>\n";
  s << "</tbody></table>\n<h2>classes</h2>\n";
  s << "<table class=\"tl\"><thead><tr><th>#</th><th>class</th><th>spec</th><th>symptom</th><th>ops</th><th>world</th>"
       "<th>confirmed</th><th>root cause</th><th>regression</th><th>file</th></tr></thead>\n<tbody>\n";
  for (size_t i = 0; i < r.classes.size(); ++i) {
    const HuntClass& c = r.classes[i];
    const std::string verdict = c.t.root_cause.id;
    s << "<tr class=\"class-row" << (class_disagrees(c) ? " differs" : "") << "\" data-class=\"" << html_escape(c.stem) << "\"><td>" << i + 1
      << "</td><td><a href=\"#class-" << i + 1 << "\">" << html_escape(c.stem) << "</a></td><td>" << html_escape(c.t.spec) << "</td><td>"
      << html_escape(c.t.symptom) << "</td><td>" << c.t.minimal.ops.size() << "</td><td>" << c.t.minimal.scenario.world << "</td><td>"
      << html_escape(confirmed_text(c)) << "</td><td>" << html_escape(verdict) << "</td><td>"
      << html_escape(c.regression.empty() ? "-" : c.regression) << "</td><td>" << html_escape(c.file.empty() ? "-" : c.file)
      << "</td></tr>\n";
  }
  s << "</tbody></table>\n</section>\n";
  for (size_t i = 0; i < r.classes.size(); ++i) s << timeline_section(class_timeline(r.classes[i], i));
  return html_page("fsdpsim hunt (seed " + std::to_string(r.seed) + ", " + r.profile + ")", s.str());
}

}  // namespace fsdpsim
