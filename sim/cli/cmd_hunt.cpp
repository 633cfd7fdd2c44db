// `fsdpsim hunt` (and `fsdpsim` with no arguments): the main job. And
// `fsdpsim triage`: one file's class, as the hunt and the nightly name it.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "sim/cli/commands.hpp"
#include "sim/hunt.hpp"
#include "sim/hunt_scenarios.hpp"

namespace fsdpsim::cli {

int cmd_hunt(const Args& a) {
  if (!a.positional.empty()) throw SourceError("<command line>", {}, "hunt takes no files, got '" + a.positional[0] + "'");
  HuntOptions o;
  o.seconds = a.have_seconds ? a.seconds : 10.0;
  o.world = a.world > 0 ? a.world : 2;
  o.profile = a.profile.empty() ? "upstream" : a.profile;
  o.seed = a.have_seed ? a.seed : 1;
  o.scenarios = hunt_scenarios();
  o.explore = hunt_explore_hook();
  o.progress = [](const std::string& line) { std::cerr << "hunt: " << line << "\n" << std::flush; };
  const std::string out = a.out.empty() ? "out/hunt" : a.out;
  std::cerr << "hunt: seed " << o.seed << ", profile " << o.profile << ", world " << o.world << ", " << o.seconds << " s model budget, "
            << o.scenarios.size() << " built-in scenarios, explorer " << (o.explore ? "on" : "not built in") << "\n";
  RealPools pools = pools_of(a);
  HuntReport rep = hunt(o, pools);
  int code = hunt_exit_code(rep, a.fail_on_new);
  std::string error;
  if (!write_hunt_outputs(rep, out, code, &error)) {
    std::cerr << "fsdpsim: " << error << "\n";
    return kInfra;
  }
  std::cout << "hunt (seed " << rep.seed << ", profile " << rep.profile << ", world " << rep.world << "): " << rep.sequences << " sequences fuzzed, "
            << rep.with_findings << " with findings, " << rep.explored << " from the explorer, " << rep.triaged << " triaged into "
            << rep.classes.size() << " classes\n";
  print_catalogue(std::cout, rep);
  if (!rep.upstream_versions.empty()) std::cout << rep.upstream_versions << "\n";
  else if (!rep.upstream_installed) std::cout << "upstream: not installed (.venv missing), confirmed on the real backend only\n";
  char times[200];
  std::snprintf(times, sizeof times, "time: explore %.1f s, fuzz %.1f s, triage %.1f s, confirm %.1f s\n", rep.t_explore, rep.t_fuzz, rep.t_triage,
                rep.t_confirm);
  std::cout << times << "written: " << out << "/summary.json and one .seq per class\n";
  if (rep.infra) std::cerr << "fsdpsim: " << rep.infra_message << "\n";
  return code;
}

// Prints FILE, class stem, verdict and signature (tab-separated) per file;
// --out DIR writes each minimal sequence there; --check compares with the
// file's own `# signature:` line (exit 1 on any difference).
int cmd_triage(const Args& a) {
  if (a.positional.empty()) throw SourceError("<command line>", {}, "triage expects FILE.seq or a directory");
  int code = kClean;
  std::vector<std::string> problems;
  const std::vector<std::string> files = seq_files(a.positional, &problems);
  for (const auto& p : problems) std::cerr << "fsdpsim: " << p << "\n";
  if (!problems.empty()) code = kBadInput;
  for (const auto& file : files) {
    SeqFile f = parse_seq_file(file);
    apply_overrides(f, a, file);
    const std::string recorded = signature_comment(f);
    TriageResult t;
    if (!triage(f, &t)) {
      std::cout << file << "\t-\tnone\t-\n";
      if (a.check && !recorded.empty()) {
        std::cerr << file << ": records '" << recorded << "' but has no finding\n";
        code = kFinding;
      }
      continue;
    }
    std::cout << file << "\t" << class_file_stem(t) << "\t" << verdict_name(t.verdict) << (t.fix_switch.empty() ? "" : " " + t.fix_switch) << "\t"
              << t.signature << "\n";
    if (a.check && recorded != t.signature) {
      std::cerr << file << ": signature line says '" << recorded << "', triage computes '" << t.signature << "'\n";
      code = kFinding;
    }
    if (!a.out.empty()) {
      std::filesystem::create_directories(a.out);
      std::ofstream(a.out + "/" + class_file_stem(t) + ".seq") << print_seq(t.minimal);
    }
  }
  return code;
}

}  // namespace fsdpsim::cli
