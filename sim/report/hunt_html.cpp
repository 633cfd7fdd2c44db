#include "sim/report/hunt_html.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include "real_backend/upstream/pool_client.hpp"
#include "sim/report/report_html.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim {
namespace {

// "model, real, upstream" as confirmed, with any disagreement or missing confirmation named.
std::string confirmed_text(const HuntClass& c) {
  std::string s = "model";
  if (c.real == "yes") s += ", real";
  if (c.upstream == "yes") s += ", upstream";
  for (const auto& [who, v] : {std::pair<const char*, const std::string*>{"real", &c.real}, {"upstream", &c.upstream}})
    if (*v != "yes" && *v != "-" && *v != "not installed") s += std::string("; ") + who + ": " + *v;
  return s;
}

// The class's timeline: the confirmations' runs, model first; a model run of
// its own when nothing was confirmed (--model-only, the time budget, a harness
// failure). Its header holds what is the class's own (signature, how it was
// found and confirmed, differences); the root cause and fix are its group's.
Timeline class_timeline(const HuntReport& r, size_t i) {
  const HuntClass& c = r.classes[i];
  Timeline t;
  t.id = "class-" + std::to_string(i + 1);
  t.title = std::to_string(i + 1) + ". " + c.stem;
  t.file = c.t.minimal;
  t.file.comments.clear();  // triage's signature, root-cause, fix lines: said once, in the header and the group
  std::vector<SingleRun> runs = c.runs;
  std::stable_sort(runs.begin(), runs.end(), [](const SingleRun& a, const SingleRun& b) { return a.backend < b.backend; });
  for (const auto& run : runs) t.backends.push_back({backend_name(run.backend), run.observations, run.findings});
  if (t.backends.empty()) {
    RunResult res = run_checked(c.t.minimal);
    t.backends.push_back({"model", res.observations, res.findings});
  }
  // The same rule as `report` and the confirmation: upstream's unobserved fields are not compared.
  const std::vector<std::string> skip = r.upstream_unobserved;
  if (!skip.empty())
    t.ignored = [skip](const std::string& backend, const std::string& d) {
      return backend == backend_name(Backend::Upstream) && upstream::diff_field_in(d, skip);
    };
  t.legend = false;  // once, at the top of the page
  t.notes.push_back("signature: " + c.t.signature);
  t.notes.push_back("found by " + c.found_by + ", " + std::to_string(c.hits) + " candidates triaged into it; confirmed: " + confirmed_text(c));
  for (const auto& d : c.divergences) t.notes.push_back(d);
  return t;
}

// A few lines of script for the filter: a text box over each class row and its
// root cause's header, and a checkbox per verdict. Without script every row shows.
const char* kFilterScript = R"JS(<script>
(function () {
  const q = document.getElementById('q'), boxes = Array.from(document.querySelectorAll('input.verdict'));
  function apply() {
    const text = q.value.toLowerCase(), on = new Set(boxes.filter(b => b.checked).map(b => b.value));
    let shown = 0;
    for (const rc of document.querySelectorAll('section.rc')) {
      const head = rc.querySelector('.rc-head').textContent.toLowerCase();
      let any = false;
      for (const tr of rc.querySelectorAll('tr.class-row')) {
        const hit = on.has(rc.dataset.verdict) && (!text || head.includes(text) || tr.textContent.toLowerCase().includes(text));
        tr.hidden = !hit;
        document.getElementById(tr.dataset.timeline).hidden = !hit;
        any = any || hit;
        shown += hit;
      }
      rc.hidden = !any;
    }
    document.getElementById('shown').textContent = shown + ' classes shown';
  }
  q.addEventListener('input', apply);
  boxes.forEach(b => b.addEventListener('change', apply));
  apply();
})();
</script>
)JS";

const char* kHuntStyle = R"CSS(<style>
table.cat{width:100%;border-collapse:collapse;table-layout:fixed;margin:4px 0 8px}
table.cat th{background:#f1f3f4;text-align:left;padding:3px 5px;font-weight:600}
table.cat td{padding:3px 5px;border-top:1px solid #e8eaed;vertical-align:top;overflow-wrap:anywhere}
section.rc{border-left:4px solid #9aa0a6;padding:2px 0 2px 10px;margin:14px 0}
section.rc[data-verdict="unreported"],section.rc[data-verdict="unreviewed"]{border-left-color:#d93025}
.rc-head h2{margin:0} .rc-head p{margin:2px 0} .note{overflow-wrap:anywhere}
.filter{position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #e8eaed;z-index:1}
.filter label{margin-right:10px;white-space:nowrap} #q{width:320px}
.counts{font-size:14px;margin:4px 0}
</style>
)CSS";

}  // namespace

std::string hunt_html(const HuntReport& r, const std::string& page) {
  const std::vector<HuntRootCause> rcs = root_causes_of(r);
  std::map<std::string, int> by_verdict;  // in catalogue order below: root_causes_of sorts by verdict
  std::vector<std::string> verdicts;
  for (const auto& rc : rcs)
    if (by_verdict[root_verdict_word(rc.entry.verdict)]++ == 0) verdicts.push_back(root_verdict_word(rc.entry.verdict));
  int agree = 0, differ = 0, late = 0;
  for (const auto& c : r.classes) {
    if (class_disagrees(c)) ++differ;
    else if (c.real == kNotConfirmedBudget || c.upstream == kNotConfirmedBudget) ++late;
    else ++agree;
  }
  std::ostringstream s;
  s << kHuntStyle << "<section class=\"catalogue\">\n<h1>fsdpsim hunt: " << rcs.size() << " root causes, " << r.classes.size()
    << " classes</h1>\n<p class=\"counts\">";
  for (size_t k = 0; k < verdicts.size(); ++k)
    s << (k ? ", " : "") << "<span data-verdict-count=\"" << verdicts[k] << "\">" << by_verdict[verdicts[k]] << " " << verdicts[k] << "</span>";
  s << " &middot; classes: " << agree << " confirmed where run, <span data-count=\"differ\">" << differ << "</span> where a backend differs";
  if (late) s << ", <span data-count=\"budget\">" << late << "</span> " << kNotConfirmedBudget;
  s << "</p>\n<p class=\"summary\">seed " << r.seed << " &middot; profile " << html_escape(r.profile) << " &middot; world " << r.world
    << " &middot; " << r.sequences << " sequences fuzzed, " << r.explored << " from the explorer, " << r.triaged << " triaged</p>\n";
  if (!r.upstream_versions.empty()) s << "<p class=\"note\">" << html_escape(r.upstream_versions) << "</p>\n";
  if (r.infra) s << "<p class=\"note\">harness failure: " << html_escape(r.infra_message) << "</p>\n";
  s << "<div class=\"filter\">filter <input id=\"q\" type=\"search\" placeholder=\"text in a class or its root cause\"> ";
  for (const auto& v : verdicts)
    s << "<label><input type=\"checkbox\" class=\"verdict\" value=\"" << v << "\" checked> " << v << " (" << by_verdict[v] << ")</label>";
  s << "<span id=\"shown\"></span></div>\n<details class=\"legend-box\"><summary>how to read the timelines below</summary>"
    << timeline_legend() << "</details>\n</section>\n";
  for (size_t g = 0; g < rcs.size(); ++g) {
    const HuntRootCause& rc = rcs[g];
    const HuntClass& first = r.classes[rc.classes.front()];
    s << "<section class=\"rc\" id=\"rc-" << g + 1 << "\" data-verdict=\"" << root_verdict_word(rc.entry.verdict) << "\">\n<div class=\"rc-head\"><h2>"
      << (rc.page.empty() ? html_escape(rc.entry.id) : "<a href=\"" + html_escape(page_relative(rc.page, page)) + "\">" + html_escape(rc.entry.id) + "</a>")
      << "</h2>\n<p><b>" << html_escape(verdict_text(rc.entry)) << "</b> &middot; " << html_escape(rc.specs) << " &middot; " << rc.classes.size()
      << (rc.classes.size() == 1 ? " class" : " classes") << " &middot; confirmed: " << html_escape(rc.confirmed) << "</p>\n";
    if (!rc.entry.title.empty()) s << "<p>" << html_escape(rc.entry.title) << "</p>\n";
    if (rc.how != rc.entry.title) s << "<p class=\"note\">" << html_escape(rc.how) << "</p>\n";
    if (!rc.entry.fix.empty()) s << "<p class=\"note\">fix: " << html_escape(rc.entry.fix) << "</p>\n";
    if (!first.t.fix_switch.empty())
      s << "<p class=\"note\">the model's " << html_escape(first.t.fix_switch) << " removes it (the minimal sequence re-run on the "
        << kFixClaimBackend << " with it shows no finding of this root cause; " << html_escape(first.t.fix_cites) << ")</p>\n";
    if (!rc.repro.empty())
      s << "<p class=\"note\">script: <a href=\"" << html_escape(page_relative(rc.repro, page)) << "\">" << html_escape(rc.repro) << "</a></p>\n";
    s << "</div>\n<table class=\"cat\"><colgroup><col style=\"width:3%\"><col style=\"width:17%\"><col style=\"width:4%\"><col style=\"width:34%\">"
         "<col style=\"width:4%\"><col style=\"width:4%\"><col style=\"width:14%\"><col style=\"width:10%\"><col style=\"width:10%\"></colgroup>"
         "<thead><tr><th>#</th><th>class</th><th>spec</th><th>symptom</th><th>ops</th><th>world</th><th>confirmed</th><th>regression</th>"
         "<th>file</th></tr></thead>\n<tbody>\n";
    for (size_t i : rc.classes) {
      const HuntClass& c = r.classes[i];
      auto link = [&](const std::string& path) {
        if (path.empty()) return std::string("-");
        const std::string rel = html_escape(page_relative(path, page));
        return "<a href=\"" + rel + "\">" + html_escape(path.substr(path.rfind('/') + 1)) + "</a>";
      };
      s << "<tr class=\"class-row" << (class_disagrees(c) ? " differs" : "") << "\" data-class=\"" << html_escape(c.stem)
        << "\" data-timeline=\"class-" << i + 1 << "\"><td>" << i + 1 << "</td><td><a href=\"#class-" << i + 1 << "\">" << html_escape(c.stem)
        << "</a></td><td>" << html_escape(c.t.spec) << "</td><td>" << html_escape(c.t.symptom) << "</td><td>" << c.t.minimal.ops.size() << "</td><td>"
        << c.t.minimal.scenario.world << "</td><td>" << html_escape(confirmed_text(c)) << "</td><td>" << link(c.regression) << "</td><td>"
        << link(c.file) << "</td></tr>\n";
    }
    s << "</tbody></table>\n";
    for (size_t i : rc.classes) s << timeline_section(class_timeline(r, i));
    s << "</section>\n";
  }
  return html_page("fsdpsim hunt (seed " + std::to_string(r.seed) + ", " + r.profile + ")", s.str() + kFilterScript);
}

}  // namespace fsdpsim
