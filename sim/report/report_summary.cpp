// `fsdpsim report`'s opening box: what a reader needs before the timeline, so
// the first screen names the first finding, why it happens and how to see it
// again, instead of the healthy steps above it.
#include <algorithm>
#include <filesystem>
#include <fmt/format.h>

#include "model/vocab/profile.hpp"
#include "sim/report/report_html.hpp"
#include "sim/findings/fix_claim.hpp"
#include "sim/core/project_data.hpp"
#include "sim/findings/root_cause.hpp"
#include "sim/findings/root_cause_catalogue.hpp"
#include "sim/core/simulator.hpp"
#include "sim/findings/triage.hpp"

namespace fsdpsim {
namespace {

// The first finding by step (a finding about one step before one about the whole run), the
// first backend's before the others'; the backend's index in *backend.
const Finding* first_finding(const Timeline& t, size_t* backend) {
  const Finding* best = nullptr;
  for (size_t b = 0; b < t.backends.size(); ++b)
    for (const auto& f : t.backends[b].findings) {
      auto order = [](const Finding& x) { return x.step > 0 ? x.step : 1 << 30; };
      if (!best || order(f) < order(*best)) best = &f, *backend = b;
    }
  return best;
}

// The spec text after "S3 step 4 rank 0: ".
std::string what_of(const Finding& f) {
  const size_t colon = f.text.find(": ");
  return colon == std::string::npos ? f.text : f.text.substr(colon + 2);
}

std::string code(const std::string& s) { return "<code>" + html_escape(s) + "</code>"; }

// What a modelled fix does to this very file, from re-runs on the model (sim/findings/fix_claim.hpp):
// the switch that leaves no finding of the root cause, else what the catalogue's switch
// (or, without one, the whole patched profile) still shows.
std::string fix_paragraph(const SeqFile& file, const std::string& root_cause, const std::string& catalogue_switch) {
  const std::string sw = fixing_switch(file, root_cause);
  if (!sw.empty())
    return "<p>The model's " + code(sw) + " removes it: this file re-run on the " + kFixClaimBackend + " with " + code("--set " + sw) +
           " shows no finding of this root cause (the switch mirrors " +
           html_escape(switch_table()[static_cast<size_t>(*switch_from_name(sw.substr(0, sw.find('='))))].mirrors) + ").</p>\n";
  const FixRerun r = catalogue_switch.empty() ? rerun_patched(file, root_cause) : rerun_with_switch(file, catalogue_switch, root_cause);
  const std::string how = catalogue_switch.empty() ? code("--profile patched") + " (every modelled fix)" : code("--set " + catalogue_switch);
  if (r.removes())
    return "<p>No single switch removes it; this file re-run on the " + std::string(kFixClaimBackend) + " with " + how +
           " shows no finding of this root cause.</p>\n";
  if (!r.valid) return "";
  return fmt::format("<p>No modelled fix removes it: this file re-run on the {} with {} still shows {} finding{} of this root cause: {}.</p>\n",
                     kFixClaimBackend, how, r.remaining.size(), r.remaining.size() == 1 ? "" : "s", html_escape(remaining_text(r)));
}

}  // namespace

std::string report_summary_box(const Timeline& t, const std::string& file, const std::string& backends, const std::string& page) {
  size_t b = 0;
  const Finding* f = first_finding(t, &b);
  const std::string step_id = (t.id.empty() ? "step-" : t.id + "-step-");
  std::string s;
  if (!f) {
    s = "<div class=\"box clean\" id=\"summary\"><h2>No findings</h2><p>" + std::to_string(t.file.ops.size()) + " ops on " +
        html_escape(backends) + ": every spec check held";
    return s + (t.backends.size() > 1 ? "; differences between backends, if any, are outlined below" : "") + ".</p></div>\n";
  }
  s = "<div class=\"box\" id=\"summary\"><h2>First finding: " + html_escape(f->spec) +
      (f->step > 0 ? fmt::format(" at step {}", f->step) : std::string(" over the whole run")) + "</h2>\n";
  if (f->step > 0) {
    const std::string op = f->step <= static_cast<int>(t.file.ops.size()) ? op_text(t.file.ops[f->step - 1]) : "";
    s += fmt::format("<p><a class=\"jump\" href=\"#{}{}\">jump to step {}</a> ({}{}{})</p>\n", html_escape(step_id), f->step, f->step,
                     code(op), f->rank >= 0 ? fmt::format(", rank {}", f->rank) : "", t.backends.size() > 1 ? ", " + t.backends[b].name : "");
  }
  s += "<p><b>" + html_escape(what_of(*f)) + "</b></p>\n<p>" + html_escape(f->spec) + " guards: " + html_escape(spec_explanation(f->spec)) + "</p>\n";
  // The mechanism, read from the model replaying the file (sim/findings/root_cause.hpp); a finding of
  // the whole run (S8) or one the model does not have is not attributed.
  RunResult model = run_checked(t.file);
  const bool on_model = std::find(model.findings.begin(), model.findings.end(), *f) != model.findings.end();
  if (f->step > 0 && on_model) {
    const Blame blame = attribute_root_cause(t.file, *f);
    const RootCauseEntry e = root_cause_entry(blame.id);
    std::string link = html_escape(e.id);
    const std::string stem = project_data().findings_dir() + "/" + finding_stem(e.id);  // as the hunt looks them up
    if (std::filesystem::exists(stem + ".md")) link = "<a href=\"" + html_escape(page_relative(stem + ".md", page)) + "\">" + link + "</a>";
    s += "<p>Root cause " + link + " (" + html_escape(verdict_text(e)) + "): " + html_escape(e.title.empty() ? blame.how : e.title) + "</p>\n";
    if (!e.title.empty()) s += "<p>" + html_escape(blame.how) + "</p>\n";
    if (!e.fix.empty()) s += "<p>Fix: " + html_escape(e.fix) + "</p>\n";
    s += fix_paragraph(t.file, blame.id, e.fix_switch);
  } else {
    s += "<p>Root cause: not attributed (" + std::string(f->step > 0 ? "the model does not show this finding" : "a finding over the whole run") + ").</p>\n";
  }
  s += "<p>Reproduce: " + code("fsdpsim run " + file + " --backend model,upstream") + " (the model and the real libraries, op by op); " +
       code("fsdpsim export " + file + " --python --out repro.py") + " then the " + code("torchrun") +
       " command its docstring names (plain libraries only).</p>\n</div>\n";
  return s;
}

}  // namespace fsdpsim
