// `fsdpsim versions --bisect FILE [--releases A..B | A,B,C] [--json]`: the
// first PEFT release where FILE (a root cause's minimal sequence) reproduces
// and the first later one where it is gone, over PEFT's releases on PyPI in a
// range (release_env.py --list) or a list given, probing a logarithmic number
// of release environments (sim/release/release_bisect.hpp; it assumes the root cause
// appears once and is fixed once). Exit 1 when a probed release reproduces (a
// finding, as everywhere), 0 when none does.
#include <chrono>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "sim/cli/interrupt.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/progress.hpp"
#include "sim/cli/versions_run.hpp"
#include "sim/release/release_bisect.hpp"

namespace fsdpsim::cli {
namespace {

std::string strip_peft(std::string v) {
  for (const char* p : {"peft==", "peft"})
    if (v.compare(0, std::strlen(p), p) == 0) return v.substr(std::strlen(p));
  return v;
}

// Validates one version as a set would be (`<command line>:1:COL` on bad input).
std::string version_at(const std::string& v, int column) {
  return parse_release_set("peft==" + v, "<command line>", {1, column}).pins.at("peft");
}

// --releases A..B: PyPI's final releases between A and B (inclusive), A and B
// themselves need not be releases (0.13..0.21.2); A,B,C: those, oldest first.
std::vector<std::string> releases_of(const VersionsFlags& own, std::string* range) {
  std::string spec = own.releases;
  if (spec.empty()) {  // the default matrix's span
    const std::vector<ReleaseSet> sets = matrix_sets("default");
    spec = sets.front().pins.at("peft") + ".." + sets.back().pins.at("peft");
  }
  *range = spec;
  const size_t dots = spec.find("..");
  if (dots == std::string::npos) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= spec.size()) {
      const size_t comma = spec.find(',', start);
      const std::string part = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      out.push_back(version_at(strip_peft(part), static_cast<int>(start) + 1 + static_cast<int>(part.size() - strip_peft(part).size())));
      if (out.size() > 1 && compare_release_versions(out[out.size() - 2], out.back()) >= 0)
        throw SourceError("<command line>", {1, static_cast<int>(start) + 1},
                          "expected --releases oldest first, each once, got " + out.back() + " after " + out[out.size() - 2]);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return out;
  }
  const std::string lo_text = strip_peft(spec.substr(0, dots)), hi_text = strip_peft(spec.substr(dots + 2));
  const std::string lo = version_at(lo_text, 1 + static_cast<int>(spec.substr(0, dots).size() - lo_text.size()));
  const std::string hi = version_at(hi_text, static_cast<int>(dots) + 3 + static_cast<int>(spec.size() - dots - 2 - hi_text.size()));
  std::vector<std::string> all, out;
  std::string message;
  const int rc = upstream::release_list("peft", &all, &message);
  if (rc != 0) throw InfraError(message.empty() ? "release_env --list peft: exit " + std::to_string(rc) : message);
  for (const auto& v : all)
    if (compare_release_versions(lo, v) <= 0 && compare_release_versions(v, hi) <= 0) out.push_back(v);
  if (out.empty()) throw SourceError("<command line>", {1, 1}, "expected --releases A..B to hold a PEFT release on PyPI, got '" + own.releases + "'");
  return out;
}

std::string name_or(const std::vector<std::string>& rel, size_t i, const std::string& none) {
  return i == BisectAnswer::kNone ? none : rel[i];
}

std::vector<std::string> names(const std::vector<std::string>& rel, const std::vector<size_t>& idx) {
  std::vector<std::string> out;
  for (size_t i : idx) out.push_back(rel[i]);
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// "appears: 0.15.0 (0.14.0 does not reproduce)" and "fixed: ..." as the answer reads.
std::string appears_line(const BisectAnswer& b, const std::vector<std::string>& rel) {
  std::string out = "appears: " + rel[b.first_reproducing];
  if (b.clean_before != BisectAnswer::kNone) out += " (" + rel[b.clean_before] + " does not reproduce";
  else if (b.unknown_before.empty()) out = "appears: at or before " + rel[b.first_reproducing] + " (the oldest release in the range";
  else out = "appears: at or before " + rel[b.first_reproducing] + " (every older release in the range cannot run";
  if (b.clean_before != BisectAnswer::kNone && !b.unknown_before.empty()) out += "; " + joined(names(rel, b.unknown_before)) + " cannot run";
  return out + ")";
}

std::string fixed_line(const BisectAnswer& b, const std::vector<std::string>& rel) {
  if (b.fixed_in == BisectAnswer::kNone)
    return "fixed: not in the range (" + rel[b.last_reproducing] + " reproduces" +
           (b.unknown_after.empty() ? "" : "; " + joined(names(rel, b.unknown_after)) + " cannot run") + ")";
  std::string out = "fixed: " + rel[b.fixed_in] + " (" + rel[b.last_reproducing] + " reproduces";
  if (!b.unknown_after.empty()) out += "; " + joined(names(rel, b.unknown_after)) + " cannot run: fixed at or before " + rel[b.fixed_in];
  return out + ")";
}

}  // namespace

int cmd_versions_bisect(const Args& a, const VersionsFlags& own) {
  if (!a.positional.empty()) throw SourceError("<command line>", {}, "versions --bisect expects one FILE after --bisect and no other paths, got '" + a.positional.front() + "'");
  if (!a.upstream_set.empty() || !own.peft_path.empty()) throw SourceError("<command line>", {}, "versions --bisect takes --releases, not --upstream or --peft");
  const auto t0 = std::chrono::steady_clock::now();
  parse_seq_file(own.bisect);  // bad input before any environment is made
  std::string range;
  const std::vector<std::string> rel = releases_of(own, &range);
  arm_interrupts();
  Progress progress("versions", a.quiet);
  progress.note("bisect " + own.bisect + " over PEFT " + range + ": " + std::to_string(rel.size()) +
                " releases (assumes it appears in one release and is fixed in one later release)");
  std::vector<Cell> cells(rel.size());
  std::vector<double> env_seconds(rel.size(), 0);
  int probes = 0;
  std::string broken;
  const BisectAnswer b = bisect_releases(rel.size(), [&](size_t i) {
    if (interrupted() || !broken.empty()) return ProbeVerdict::CannotRun;  // ends the search: reported below
    Cell c;
    {
      Waiting waiting(progress, "probe " + std::to_string(probes + 1) + ": peft " + rel[i] + " (its environment made on first use)");
      c = run_on_release(own.bisect, "peft==" + rel[i], a, &env_seconds[i]);
    }
    ++probes;
    std::ostringstream line;
    line << "probe " << probes << ": peft " << rel[i] << ": " << c.verdict << (c.detail.empty() ? "" : ": " + c.detail) << " ("
         << std::fixed << std::setprecision(1) << c.seconds << " s, environment " << env_seconds[i] << " s)";
    progress.note(line.str());
    if (a.json) {
      JsonRecord r("versions_probe");
      r.str("file", own.bisect).str("release", "peft==" + rel[i]).num("probe", probes).str("verdict", c.verdict).str("detail", c.detail);
      r.real("seconds", c.seconds).real("environment_seconds", env_seconds[i]).print(std::cout);
    }
    if (c.verdict == "broken") broken = "peft " + rel[i] + ": " + c.detail;
    cells[i] = c;
    return c.verdict == "reproduces" ? ProbeVerdict::Reproduces
           : c.verdict == "does not reproduce" ? ProbeVerdict::DoesNotReproduce : ProbeVerdict::CannotRun;
  });
  progress.done();
  if (interrupted()) return interrupted_exit(interrupted());
  if (!broken.empty()) {
    std::cerr << "versions: broken: " << broken << "\n";
    return kInfra;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.json) {
    JsonRecord r("versions_bisect");
    r.str("file", own.bisect).str("range", range).num("releases", static_cast<int64_t>(rel.size())).num("probes", probes).flag("found", b.found);
    if (b.found) {
      r.str("first_reproducing", rel[b.first_reproducing]).str("clean_before", name_or(rel, b.clean_before, ""));
      r.str("last_reproducing", rel[b.last_reproducing]).str("fixed_in", name_or(rel, b.fixed_in, ""));
      r.strs("unknown_before", names(rel, b.unknown_before)).strs("unknown_after", names(rel, b.unknown_after));
    }
    r.real("seconds", seconds).print(std::cout);
    return b.found ? kFinding : kClean;  // a release that reproduces is a finding
  }
  std::cout << "bisect " << own.bisect << ": PEFT " << rel.front() << ".." << rel.back() << ", " << rel.size() << " releases, " << probes
            << " probed (assumes it appears in one release and is fixed in one later release)\n";
  std::cout << std::left << std::setw(10) << "release" << "verdict\n";
  for (size_t i = 0; i < rel.size(); ++i)
    if (!cells[i].verdict.empty())
      std::cout << std::setw(10) << rel[i] << cells[i].verdict << (cells[i].detail.empty() ? "" : ": " + cells[i].detail) << "\n";
  std::cout << std::right;
  if (!b.found) {
    std::cout << "no probed release reproduces: neither end of the range, nor the midpoints swept between them (a narrower range "
                 "strictly inside can be missed: name a range with an end that reproduces)\n";
    return kClean;
  }
  std::cout << appears_line(b, rel) << "\n" << fixed_line(b, rel) << "\n";
  std::cout << std::fixed << std::setprecision(1) << seconds << " s\n" << std::defaultfloat;
  return kFinding;
}

}  // namespace fsdpsim::cli
