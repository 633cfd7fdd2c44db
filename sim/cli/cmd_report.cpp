// `fsdpsim report FILE.seq --html OUT.html`: the sequence run on the named
// backends, drawn as one self-contained HTML timeline (sim/report/report_html.hpp).
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>

#include "sim/cli/commands.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/core/project_data.hpp"
#include "sim/report/report_html.hpp"

namespace fsdpsim::cli {

int cmd_report(const Args& a, const ReportFlags& own) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "report expects exactly one FILE.seq");
  if (own.html.empty()) throw SourceError("<command line>", {}, "report expects --html OUT.html");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file);
  apply_overrides(f, a, file);
  check_memory(f, a, file);
  RealPools pools = pools_of(a);
  BackendRun res = run_backend(f, a.backends, pools);
  if (res.infra_failure) {
    std::cerr << "fsdpsim: " << res.infra_message << "\n";
    return kInfra;
  }
  Timeline t;
  t.title = file;
  t.file = f;
  for (const auto& run : res.runs) t.backends.push_back({backend_name(run.backend), run.observations, run.findings});
  if (pools.upstream_started()) {
    // The same fields run_backend leaves out of its comparison.
    const std::vector<std::string> skip = pools.upstream_unobserved();
    if (res.runs.size() > 1 && !skip.empty())
      t.ignored = [skip](const std::string& backend, const std::string& d) {
        return backend == backend_name(Backend::Upstream) && upstream::diff_field_in(d, skip);
      };
    if (!pools.upstream_versions().empty()) t.notes.push_back(pools.upstream_versions_line());
  }
  if (!res.findings.empty())
    if (const std::string line = missing_data_line("", "the root cause's page link"); !line.empty()) std::cerr << "fsdpsim: " << line << "\n";
  TimelineCounts counts;
  std::string section = timeline_section(t, &counts);
  std::ofstream out(own.html, std::ios::binary | std::ios::trunc);
  if (out) out << html_page("fsdpsim report " + file, report_summary_box(t, file, backends_text(a.backends), own.html) + section);
  if (!out.flush()) throw SourceError("<command line>", {}, "--html: cannot write '" + own.html + "': " + std::strerror(errno));
  if (a.json) {
    JsonRecord r("report");
    r.str("html", own.html).str("file", file).num("ops", counts.steps).num("world", f.scenario.world).str("backends", backends_text(a.backends));
    r.num("findings", counts.findings).num("differing_cells", res.runs.size() > 1 ? counts.differing_cells : 0).print(std::cout);
  } else {
    std::cout << "wrote " << own.html << ": " << counts.steps << " ops, world " << f.scenario.world << ", backends "
            << backends_text(a.backends) << ", " << counts.findings << " findings";
    if (res.runs.size() > 1) std::cout << ", " << counts.differing_cells << " differing cells";
    std::cout << "\n";
  }
  if (!res.divergences.empty()) return kDivergence;
  return res.findings.empty() ? kClean : kFinding;
}

}  // namespace fsdpsim::cli
