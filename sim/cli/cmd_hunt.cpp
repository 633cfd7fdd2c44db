// `fsdpsim hunt` (and `fsdpsim` with no arguments): the main job. And
// `fsdpsim triage`: one file's class, as the hunt and the nightly name it.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <vector>

#include "sim/cli/commands.hpp"
#include "sim/cli/interrupt.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/junit.hpp"
#include "sim/cli/progress.hpp"
#include "sim/findings/hunt.hpp"
#include "sim/report/hunt_html.hpp"
#include "sim/findings/hunt_scenarios.hpp"
#include "model/vocab/profile.hpp"
#include "real_backend/signal_cleanup.hpp"
#include "real_backend/upstream/pool_client.hpp"

namespace fsdpsim::cli {

namespace {

void print_hunt_json(const HuntReport& rep, const std::string& out, int code, int sig) {
  for (const auto& c : rep.classes)
    JsonRecord("hunt_class")
        .str("class", c.stem).str("signature", c.t.signature).str("spec", c.t.spec).str("symptom", c.t.symptom)
        .num("ops", static_cast<int64_t>(c.t.minimal.ops.size())).num("world", c.t.minimal.scenario.world)
        .str("root_cause", c.t.root_cause.id).str("verdict", root_verdict_name(root_cause_entry(c.t.root_cause.id).verdict))
        .str("fix_switch", c.t.fix_switch).str("found_by", c.found_by).num("hits", c.hits)
        .str("real", c.real).str("upstream", c.upstream).strs("divergences", c.divergences).str("file", c.file)
        .str("regression", c.regression)
        .print(std::cout);
  for (const auto& row : reports_of(rep))
    JsonRecord("hunt_report")
        .str("id", row.report->id).str("title", row.report->title).str("owner", upstream_pin(row.report->owner).package)
        .str("action", report_action_word(report_action(*row.report))).str("verdict", root_verdict_name(report_verdict(*row.report)))
        .str("fix_site", row.report->fix_site.file + "::" + row.report->fix_site.function).str("alternative", row.report->alternative)
        .strs("entry_points", row.report->entry_points).strs("reached", row.reached).num("classes", static_cast<int64_t>(row.classes))
        .print(std::cout);
  for (const auto& rc : root_causes_of(rep)) {
    std::vector<std::string> classes;
    for (size_t i : rc.classes) classes.push_back(rep.classes[i].stem);
    JsonRecord("hunt_root_cause")
        .str("id", rc.entry.id).str("title", rc.entry.title).str("verdict", root_verdict_name(rc.entry.verdict))
        .str("verdict_detail", rc.entry.verdict_detail).strs("citations", citation_lines(rc.entry)).str("specs", rc.specs)
        .str("blame", rc.how).str("confirmed", rc.confirmed).str("page", rc.page).str("repro", rc.repro).str("script", rc.script).strs("classes", classes)
        .print(std::cout);
  }
  JsonRecord("hunt_summary")
      .num("seed", static_cast<int64_t>(rep.seed)).str("profile", rep.profile).num("world", rep.world).num("sequences", rep.sequences)
      .num("with_findings", rep.with_findings).num("explored", rep.explored).num("triaged", rep.triaged)
      .num("classes", static_cast<int64_t>(rep.classes.size())).flag("upstream_installed", rep.upstream_installed)
      .str("upstream_versions", rep.upstream_versions).real("explore_seconds", rep.t_explore).real("fuzz_seconds", rep.t_fuzz)
      .real("triage_seconds", rep.t_triage).real("confirm_seconds", rep.t_confirm)
      .num("not_confirmed_budget", static_cast<int64_t>(unconfirmed_by_budget(rep))).str("out", out).num("exit_code", code)
      .str("infra_message", rep.infra ? rep.infra_message : "").num("interrupted", sig)
      .print(std::cout);
}

// A testcase per class: a failure where a backend disagrees with the model (the
// hunt's exit 2) or, with --fail-on-new, where the class has no known fix (exit 1).
void write_hunt_junit(const HuntReport& rep, const Args& a, const HuntFlags& own) {
  JunitReport junit("fsdpsim hunt (seed " + std::to_string(rep.seed) + ", profile " + rep.profile + ")");
  for (const auto& c : rep.classes) {
    JunitCase jc;
    jc.classname = "hunt", jc.name = c.stem;
    const bool differs = class_disagrees(c);
    if (differs) {
      jc.outcome = JunitCase::Outcome::Failure, jc.message = "real " + c.real + ", upstream " + c.upstream;
      for (const auto& d : c.divergences) jc.text += d + "\n";
    } else if (own.fail_on_unreported && is_unreported(root_cause_entry(c.t.root_cause.id).verdict)) {
      jc.outcome = JunitCase::Outcome::Failure, jc.message = "root cause " + c.t.root_cause.id + ": no upstream report covers it";
    } else if (own.fail_on_uncatalogued && c.regression.empty()) {
      jc.outcome = JunitCase::Outcome::Failure, jc.message = "no regression file in the corpus carries this signature";
    }
    jc.text = c.t.signature + "\n" + c.t.symptom + "\n" + jc.text;
    junit.add(std::move(jc));
  }
  if (rep.infra) {
    JunitCase jc;
    jc.classname = "hunt", jc.name = "harness", jc.outcome = JunitCase::Outcome::Error, jc.message = "infrastructure failure";
    jc.text = rep.infra_message;
    junit.add(std::move(jc));
  }
  junit.write(a.junit, rep.t_explore + rep.t_fuzz + rep.t_triage + rep.t_confirm);
}

// --scripts: each root cause's shortest class exported (fsdpsim_upstream.export) and run under
// torchrun with real gloo (fsdpsim_upstream.repro_run, two at a time): the plain libraries' word.
// A class whose finding shows without FSDP (fsdp_independent, as `export --python` decides it) gets
// a plain `python` script with no torch.distributed. With --plain-scripts only those are exported
// and run (each a single python process, no torchrun launch): the others get no script.
void run_scripts(HuntReport& rep, const std::string& out, Progress& progress, const Args& a, bool plain_only) {
  std::map<std::string, std::string> id_of;  // script path -> root cause id
  std::vector<std::string> paths = {"--results", out + "/scripts.tsv"};
  RealPools pools = pools_of(a);  // one world-1 pool for every root cause's check without fully_shard
  for (const auto& rc : root_causes_of(rep)) {
    const HuntClass& c = rep.classes[rc.classes.front()];
    const Profile profile = effective_profile(c.t.minimal.scenario);
    const std::string py = out + "/" + finding_stem(rc.entry.id) + ".py";
    const bool plain = fsdp_independent(c.t.minimal, a, &pools);
    if (plain_only && !plain) continue;
    std::string error;
    progress.note("scripts: exporting " + rc.entry.id);
    std::vector<std::string> args = {c.file, "--switches", switches_json(profile), "--name", c.file, "--out", py};
    if (plain) args.push_back("--plain");
    const int code = upstream::run_python_module("fsdpsim_upstream.export", args, &error);
    if (code != 0) {
      rep.scripts[rc.entry.id] = code == 3 ? "unexported: the export cannot express it" : "unexported: " + (error.empty() ? "export failed" : error);
      continue;
    }
    id_of[std::filesystem::absolute(py).string()] = rc.entry.id;
    paths.push_back(py);
  }
  if (id_of.empty()) return;
  progress.note("scripts: running " + std::to_string(id_of.size()) + " (torchrun, or plain python), two at a time");
  std::string error;
  if (upstream::run_python_module("fsdpsim_upstream.repro_run", paths, &error) != 0) return;
  std::ifstream in(out + "/scripts.tsv");
  for (std::string line; std::getline(in, line);) {
    const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
    if (t1 == std::string::npos || t2 == std::string::npos || !id_of.count(line.substr(0, t1))) continue;
    const std::string code = line.substr(t1 + 1, t2 - t1 - 1);
    rep.scripts[id_of[line.substr(0, t1)]] = code == "1" ? "reproduces" : code == "0" ? "no-repro" : "differs";
  }
}

}  // namespace

int cmd_hunt(const Args& a, const HuntFlags& own) {
  if (!a.positional.empty()) throw SourceError("<command line>", {}, "hunt takes no files, got '" + a.positional[0] + "'");
  // The corpus the catalogue is checked against: --corpus DIR, else the project's
  // corpus/regressions and corpus/divergences (sim/core/project_data.hpp), wherever fsdpsim runs.
  if (!own.corpus.empty() && !std::filesystem::is_directory(own.corpus))
    throw SourceError("<command line>", {}, "--corpus expects a directory of .seq files, got '" + own.corpus + "'");
  std::vector<std::string> corpus;
  if (!own.corpus.empty()) corpus.push_back(own.corpus);
  if (own.corpus.empty()) corpus = project_data().corpus_dirs();
  HuntOptions o;
  o.seconds = a.have_seconds ? a.seconds : own.model_only ? kHuntModelOnlyDefaultSeconds : kHuntDefaultSeconds;
  o.world = a.world > 0 ? a.world : 2;
  o.profile = a.profile.empty() ? "upstream" : a.profile;
  o.seed = a.have_seed ? a.seed : 1;
  if (own.budget_states > 0 && own.budget_sequences == 0)
    throw SourceError("<command line>", {}, "--budget-states bounds a hunt bounded by counts: give --budget-sequences N too");
  o.budget_sequences = own.budget_sequences;
  o.budget_states = own.budget_states;
  o.scenarios = hunt_scenarios();
  o.explore = hunt_explore_hook();
  o.confirm_real = o.confirm_upstream = !own.model_only;
  // sim/findings/hunt.cpp already spaces its lines (a phase done, fuzzing every 2 s): each one stays.
  Progress progress("hunt", a.quiet);
  o.progress = [&progress](const std::string& line) { progress.note(line); };
  o.status = [&progress](const std::string& line) { progress.status(line); };
  const std::string out = a.out.empty() ? "out/hunt" : a.out;
  progress.note("seed " + std::to_string(o.seed) + ", profile " + o.profile + ", world " + std::to_string(o.world) + ", " +
                (o.budget_sequences > 0 ? std::to_string(o.budget_sequences) + " sequences, " + std::to_string(static_cast<int>(o.seconds)) +
                                              " s budget (" + (own.model_only ? "model only" : "confirmation") + "), "
                                        : std::to_string(static_cast<int>(o.seconds)) + " s budget (" +
                                              (own.model_only ? "model only" : "the model a third, confirmation the rest") + "), ") +
                std::to_string(o.scenarios.size()) +
                " built-in scenarios, explorer " + (o.explore ? "on" : "not built in"));
  // SIGINT/SIGTERM/SIGHUP: the backends' handler stops their ranks and pools first
  // (it chains to ours), then the hunt ends at its next step with what it has.
  arm_interrupts();
  o.stop = [] { return interrupted() != 0 || real::interrupt_count() > 0; };
  RealPools pools = pools_of(a);
  HuntReport rep = hunt(o, pools);
  progress.done();
  const int sig = !rep.interrupted ? 0 : interrupted() ? interrupted() : real::interrupting_signal();
  if (!corpus.empty()) {
    std::vector<std::string> problems;  // an unreadable or empty corpus directory: said, not fatal
    std::vector<std::string> files = seq_files(corpus, &problems);  // each directory's files in order
    for (auto& f : files) f = shown_path(f);  // the regression column names them as the user reaches them
    for (const auto& p : problems) std::cerr << "fsdpsim: --corpus: " << p << "\n";
    attach_regressions(rep, corpus_signatures(files));
  }
  // Said once: which columns go without the project's data, and why.
  if (const std::string line = missing_data_line(own.corpus.empty() ? "the regression column" : "", "the repro column and page links"); !line.empty())
    std::cerr << "fsdpsim: " << line << "\n";
  int code = sig ? interrupted_exit(sig) : hunt_exit_code(rep, own.fail_on_unreported, own.fail_on_uncatalogued);
  std::string error;
  if (!write_hunt_outputs(rep, out, code, &error)) {
    std::cerr << "fsdpsim: " << error << "\n";
    return kInfra;
  }
  if ((own.scripts || own.plain_scripts) && !own.model_only && rep.upstream_installed && !sig) {
    run_scripts(rep, out, progress, a, own.plain_scripts && !own.scripts);
    code = hunt_exit_code(rep, own.fail_on_unreported, own.fail_on_uncatalogued);
    if (!write_hunt_outputs(rep, out, code, &error)) {
      std::cerr << "fsdpsim: " << error << "\n";
      return kInfra;
    }
  }
  if (!a.junit.empty()) write_hunt_junit(rep, a, own);
  if (!own.html.empty()) {  // after write_hunt_outputs: the page names each class's file
    std::ofstream page(own.html, std::ios::binary | std::ios::trunc);
    if (page) page << hunt_html(rep, own.html);
    if (!page.flush()) {
      std::cerr << "fsdpsim: --html: cannot write '" << own.html << "': " << std::strerror(errno) << "\n";
      return kInfra;
    }
  }
  if (a.json) {
    print_hunt_json(rep, out, code, sig);
    if (rep.infra) std::cerr << "fsdpsim: " << rep.infra_message << "\n";
    return code;
  }
  // Within 120 columns, as the catalogue below.
  std::cout << "hunt (seed " << rep.seed << ", " << rep.profile << ", world " << rep.world << "): " << rep.sequences << " fuzzed ("
            << rep.with_findings << " with findings), " << rep.explored << " explored, " << rep.triaged << " triaged into "
            << rep.classes.size() << " classes\n";
  if (own.model_only) std::cout << "not confirmed (--model-only): the model's findings only\n";
  print_catalogue(std::cout, rep);
  if (!rep.upstream_versions.empty()) std::cout << rep.upstream_versions << "\n";
  else if (!rep.upstream_installed) std::cout << "upstream: not installed (.venv missing), confirmed on the real backend only\n";
  else if (!own.model_only)
    std::cout << "upstream: no pool was ready before " << (sig ? "the signal" : "the --seconds deadline") << ", nothing confirmed there\n";
  char times[200];
  std::snprintf(times, sizeof times, "time: explore %.1f s, fuzz %.1f s, triage %.1f s, confirm %.1f s\n", rep.t_explore, rep.t_fuzz, rep.t_triage,
                rep.t_confirm);
  std::cout << times << "written: " << out << "/summary.json and one .seq per class" << (own.html.empty() ? "" : ", " + own.html) << "\n";
  if (rep.infra) std::cerr << "fsdpsim: " << rep.infra_message << "\n";
  if (sig) std::cerr << "fsdpsim: hunt interrupted by signal " << sig << " (" << strsignal(sig) << "): partial results, exit " << code << "\n";
  return code;
}

// Prints FILE, class stem, verdict and signature (tab-separated) per file;
// --out DIR writes each minimal sequence there; --check compares with the
// file's own `# signature:` line (exit 1 on any difference).
int cmd_triage(const Args& a, const TriageFlags& own) {
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
    // A minimal sequence often shows several findings at its last op: the recorded class
    // names which one (its spec and status) the file keeps.
    const bool found = triage(f, &t, {}, recorded.substr(0, recorded.find(' ')));
    // The catalogue's verdict word (as the hunt's table and the finding pages print it), not the triage's own.
    const std::string verdict = found ? root_verdict_word(root_cause_entry(t.root_cause.id).verdict) : "none";
    if (a.json)
      JsonRecord("triage")
          .str("file", file).str("class", found ? class_file_stem(t) : "").str("verdict", verdict)
          .str("fix_switch", found ? t.fix_switch : "").str("signature", found ? t.signature : "").str("recorded", recorded)
          .str("root_cause", found ? t.root_cause.id : "")
          .print(std::cout);
    if (!found) {
      if (!a.json) std::cout << file << "\t-\tnone\t-\n";
      if (own.check && !recorded.empty()) {
        std::cerr << file << ": records '" << recorded << "' but has no finding\n";
        code = kFinding;
      }
      continue;
    }
    if (!a.json)
      std::cout << file << "\t" << class_file_stem(t) << "\t" << t.root_cause.id << "\t" << verdict
                << (t.fix_switch.empty() ? "" : ", removed by " + t.fix_switch) << "\t" << t.signature << "\n";
    if (own.check && recorded != t.signature) {
      std::cerr << file << ": signature line says '" << recorded << "', triage computes '" << t.signature << "'\n";
      code = kFinding;
    }
    // A recorded fix claim holds only while the re-run still bears it out.
    if (const std::string fix = fix_comment(f); own.check && !fix.empty() && fix != fix_comment(t.minimal)) {
      std::cerr << file << ": fix line says '" << fix << "', a re-run on the " << kFixClaimBackend << " says '" << fix_comment(t.minimal) << "'\n";
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
