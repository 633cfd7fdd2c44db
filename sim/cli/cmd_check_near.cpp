// `fsdpsim check FILE.seq --near K`: what a recorded sequence hits, and which finding classes are K
// edits of the script's own ops away (sim/findings/neighbourhood.hpp), each with its shortest edit
// and the script line it would happen at; every class confirmed on the backends after the model
// in --backend (`--backend model,upstream`). A table, or with --json a near_class record per class
// and a near_summary.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "model/vocab/table.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/interrupt.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/progress.hpp"
#include "sim/findings/neighbourhood.hpp"

namespace fsdpsim::cli {
namespace {

// Each recorded op's place in the script: the first word of its line's `# ...` comment
// (`fsdpsim record` writes `# train.py:53`), else the .seq's own FILE:LINE.
std::vector<std::string> script_places(const std::string& file, const SeqFile& f) {
  std::vector<std::string> lines;
  std::ifstream in(file);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::vector<std::string> out;
  for (const Op& op : f.ops) {
    std::string place = file + ":" + std::to_string(op.pos.line);
    if (op.pos.line >= 1 && op.pos.line <= static_cast<int>(lines.size())) {
      const std::string& l = lines[op.pos.line - 1];
      const size_t hash = l.find('#');
      const size_t b = hash == std::string::npos ? std::string::npos : l.find_first_not_of(" \t", hash + 1);
      if (b != std::string::npos) place = l.substr(b, l.find_first_of(" \t", b) - b);
    }
    out.push_back(place);
  }
  return out;
}

// One class's confirmation on one backend.
struct Confirmation {
  std::string backend;
  std::string verdict;  // "confirmed", "not seen", "broke: ..."
  bool broke = false;
};

// Runs each class's representative on the model and `other` (once per distinct sequence) and asks
// whether `other` reports the class's finding: the same spec at the same op.
std::vector<std::vector<Confirmation>> confirm(const NearResult& near, const BackendList& others, RealPools& pools,
                                               Progress& progress, int64_t sequences) {
  std::vector<std::vector<Confirmation>> out(near.classes.size());
  std::map<std::string, BackendRun> runs;  // by the sequence's text, per backend
  const size_t total = near.classes.size() * others.size();
  size_t done = 0;
  for (size_t c = 0; c < near.classes.size(); ++c) {
    const NearClass& k = near.classes[c];
    for (Backend b : others) {
      Confirmation conf;
      conf.backend = backend_name(b);
      if (interrupted()) {
        conf.verdict = "not confirmed (interrupted)";
        out[c].push_back(conf);
        continue;
      }
      const std::string key = std::string(backend_name(b)) + "\n" + print_seq(k.file);
      auto it = runs.find(key);
      if (it == runs.end()) it = runs.emplace(key, run_backend(k.file, {Backend::Model, b}, pools, /*twice=*/false)).first;
      arm_interrupts();  // a pool started here installed its own handler
      const BackendRun& r = it->second;
      if (r.infra_failure) {
        conf.verdict = "broke: " + r.infra_message, conf.broke = true;
      } else {
        bool seen = false;
        for (const Finding& fd : r.runs.back().findings) seen = seen || (fd.spec == k.spec && fd.step == k.finding.step);
        conf.verdict = seen ? "confirmed" : "not seen";
        if (!r.divergences.empty()) conf.verdict += " (" + std::to_string(r.divergences.size()) + " divergences from the model)";
      }
      out[c].push_back(conf);
      ++done;
      progress.status(std::to_string(sequences) + "/" + std::to_string(sequences) + " model, " + std::to_string(done) + "/" +
                      std::to_string(total) + " " + backends_text(others));
    }
  }
  return out;
}

}  // namespace

int cmd_check_near(const Args& a, int k) {
  if (a.positional.size() != 1)
    throw SourceError("<command line>", {}, "check --near K takes one .seq file, got " + std::to_string(a.positional.size()));
  if (!a.junit.empty()) throw SourceError("<command line>", {}, "check --near K does not write --junit (its classes are not one testcase per file)");
  if (a.backends.empty() || a.backends.front() != Backend::Model)
    throw SourceError("<command line>", {}, "check --near K explores on the model and confirms on the others: --backend model or model,upstream, got '" + a.backend + "'");
  const std::string file = a.positional[0];
  if (std::filesystem::is_directory(file)) throw SourceError(file, {}, "is a directory: check --near K takes one .seq file");
  SeqFile f = parse_seq_file(file);
  apply_overrides(f, a, file);
  const BackendList others(a.backends.begin() + 1, a.backends.end());
  for (Backend b : others) {
    SourcePos at;
    const std::string why = backend_refusal(f, b, &at);
    if (!why.empty()) throw SourceError(file, at, why);
  }
  check_memory(f, a, file);
  const std::vector<std::string> places = script_places(file, f);
  arm_interrupts();
  Progress progress("near", a.quiet);
  int64_t sequences = 0;
  const NearResult near = explore_near(f, k, [&](int64_t done, int64_t total) {
    sequences = total;
    progress.status(std::to_string(done) + "/" + std::to_string(total) + " model");
  });
  sequences = near.sequences;
  RealPools pools = pools_of(a);
  const auto confirmations = confirm(near, others, pools, progress, sequences);
  progress.done();

  auto text = [&](int origin) { return op_text(f.ops[origin]); };
  auto where = [&](int origin) { return places[origin]; };
  auto edit_text = [&](const NearClass& c) {
    std::string s;
    for (const NearEdit& e : c.edits) s += (s.empty() ? "" : ", then ") + near_edit_text(e, text, where);
    return s.empty() ? std::string("(as recorded)") : s;
  };
  // Where the class's finding shows: its op in the representative, by the script line of the op it copies.
  auto at_text = [&](const NearClass& c) {
    if (c.finding.step < 1 || c.finding.step > static_cast<int>(c.file.ops.size())) return std::string("the whole run");
    const int origin = c.origins[c.finding.step - 1];
    return "op " + std::to_string(c.finding.step) + " `" + op_text(c.file.ops[c.finding.step - 1]) + "` (" + places[origin] + ")";
  };
  bool broke = false;
  for (const auto& cs : confirmations)
    for (const auto& x : cs) broke = broke || x.broke;
  int now = 0;
  for (const auto& c : near.classes) now += c.now;
  const int64_t ran = near.sequences - near.refused;
  if (a.json) {
    for (size_t i = 0; i < near.classes.size(); ++i) {
      const NearClass& c = near.classes[i];
      JsonRecord r("near_class");
      r.str("class", c.id).str("spec", c.spec).str("root_cause", c.root_cause).flag("now", c.now).num("edits", c.distance);
      std::vector<std::string> edits, lines;
      for (const NearEdit& e : c.edits) edits.push_back(near_edit_text(e, text, where)), lines.push_back(places[e.op]);
      r.strs("edit", edits).strs("edit_lines", lines).num("step", c.finding.step).str("at", at_text(c)).str("finding", c.finding.text);
      r.num("sequences", c.reached);
      std::vector<std::string> conf;
      for (const auto& x : confirmations[i]) conf.push_back(x.backend + ": " + x.verdict);
      r.strs("confirmations", conf).print(std::cout);
    }
    std::vector<std::string> clean_edits;
    for (const NearEdit& e : near.first_clean) clean_edits.push_back(near_edit_text(e, text, where));
    JsonRecord s("near_summary");
    s.str("file", file).num("k", k).num("ops", static_cast<int64_t>(f.ops.size())).num("sequences", near.sequences)
        .num("refused", near.refused).num("clean", near.clean).num("classes_now", now).num("classes_near", static_cast<int64_t>(near.classes.size()) - now)
        .strs("first_clean", clean_edits).str("confirmed_on", backends_text(others)).real("model_seconds", near.seconds).print(std::cout);
  } else {
    std::cout << "near " << file << ": " << f.ops.size() << " ops, world " << f.scenario.world << ", " << f.scenario.profile << "; within " << k
              << (k == 1 ? " edit: " : " edits: ") << near.sequences << " sequences, " << near.refused << " refused by the .seq rules, " << ran
              << " run on the model\n";
    std::cout << "now: " << now << (now == 1 ? " class" : " classes") << "; " << near.classes.size() - now << " more within " << k
              << (k == 1 ? " edit" : " edits") << (others.empty() ? " (model only: --backend model,upstream confirms them)" : "") << "\n";
    // The classes as a table, then each one's shortest edit as a sentence (the table's cells stay short).
    std::vector<std::vector<std::string>> rows = {{"class", "edits", "finding at", "sequences"}};
    for (Backend b : others) rows[0].push_back(backend_name(b));
    for (size_t i = 0; i < near.classes.size(); ++i) {
      const NearClass& c = near.classes[i];
      rows.push_back({c.id, c.now ? "now" : std::to_string(c.distance), at_text(c), std::to_string(c.reached)});
      for (const auto& x : confirmations[i]) rows.back().push_back(x.verdict);
    }
    print_fitted(std::cout, rows, a.wide ? 0 : 120, 2);
    for (size_t i = 0; i < near.classes.size(); ++i) {
      const NearClass& c = near.classes[i];
      if (c.now) continue;
      std::cout << "- " << edit_text(c) << " leads to " << c.id << " at " << at_text(c);
      for (const auto& x : confirmations[i]) std::cout << "; " << x.verdict << " on " << x.backend;
      std::cout << "\n";
    }
    // Where the file hits something now: the shortest edit that leaves no finding at all.
    if (now > 0 && near.clean > 0) {
      NearClass clean;
      clean.edits = near.first_clean;
      std::cout << "- " << edit_text(clean) << " leaves no finding (" << near.clean << " of the " << ran << " sequences have none)\n";
    }
  }
  if (!others.empty()) print_upstream_versions(std::cout, pools, a.json);
  if (interrupted()) return interrupted_exit(interrupted());
  if (broke) return kInfra;
  return near.classes.empty() ? kClean : kFinding;
}

}  // namespace fsdpsim::cli
