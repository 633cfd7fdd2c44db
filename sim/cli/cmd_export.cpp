// `fsdpsim export FILE.seq --python [--no-shrink] [--out PATH]`: the finding as a
// short self-contained script on the real libraries that ends in one assert of the
// invariant it breaks (exit 1 while the bug is there, 0 once fixed), written by the
// upstream backend's own package (real_backend/upstream/fsdpsim_upstream/export.py)
// from the canonical text and the effective profile. By default the file is
// triaged first, so the script holds the minimal sequence. A finding that the real
// libraries show at world 1 without any fully_shard is FSDP-independent: its script
// is plain `python`, with no torch.distributed at all.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <unistd.h>

#include "model/vocab/profile.hpp"
#include "sim/core/crosscheck.hpp"
#include "real_backend/upstream/pool_client.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/progress.hpp"
#include "sim/findings/triage.hpp"

namespace fsdpsim::cli {

namespace {

// The sequence the script runs: the triaged minimal one (its comments carry
// `# signature:`, `# class:` and `# finding:`), or with --no-shrink the file as
// written with its first finding's signature and sentence. A file without a
// finding is exported as written and the script checks nothing (stderr says so).
SeqFile sequence_to_export(SeqFile f, const Args& a, const ExportFlags& own, const std::string& file) {
  if (!own.no_shrink) {
    TriageResult t;
    if (triage(f, &t)) return t.minimal;
  } else {
    RunResult r = run_checked(f);
    if (!r.findings.empty()) {
      f.comments = {"signature: " + class_signature(f, r, r.findings[0]), "finding: " + r.findings[0].text};
      return f;
    }
  }
  std::cerr << "fsdpsim: " << file << " has no finding (the model runs it clean): exported as written; "
            << "the script exits 0 unless an op fails\n";
  f.comments.clear();
  return f;
}

// The finding's spec and step from the minimal sequence's `# finding: S1 step 3 ...` comment.
bool recorded_finding(const SeqFile& f, std::string* spec, int* step) {
  for (const auto& c : f.comments)
    if (c.rfind("finding: S", 0) == 0 && std::sscanf(c.c_str() + 9, "S%*d step %d", step) == 1) {
      *spec = c.substr(9, c.find(' ', 9) - 9);
      return true;
    }
  return false;
}

}  // namespace

// Whether the finding needs FSDP (commands.hpp): the same sequence at world 1 with no fully_shard on
// the upstream backend (the real libraries) must show the same spec at the same step to be
// FSDP-independent. Sequences that call FSDP themselves (unshard, gradient_sync, a rank's
// own op, ram-efficient loading, the optimizer checkpoint's DTensor API) need it.
bool fsdp_independent(const SeqFile& f, const Args& a, RealPools* pools) {
  std::string spec;
  int step = 0;
  if (!recorded_finding(f, &spec, &step) || f.scenario.loading != Loading::Full) return false;
  for (const Op& op : f.ops)
    if (op.rank >= 0 || op.kind == OpKind::Unshard || op.kind == OpKind::Reshard || op.kind == OpKind::GradientSync ||
        op.kind == OpKind::Prepare || op.kind == OpKind::SaveOptimizer || op.kind == OpKind::LoadOptimizer)
      return false;
  SeqFile plain = f;
  plain.scenario.world = 1;
  plain.scenario.shards.clear();
  std::optional<RealPools> own;
  if (!pools) pools = &own.emplace(pools_of(a));
  const BackendRun res = run_backend(plain, {Backend::Upstream}, *pools, /*twice=*/false);
  if (res.infra_failure) {
    std::cerr << "fsdpsim: the run without fully_shard failed (" << res.infra_message << "): the script keeps FSDP\n";
    return false;
  }
  for (const auto& fd : res.findings)
    if (fd.spec == spec && fd.step == step) return true;
  return false;
}

int cmd_export(const Args& a, const ExportFlags& own) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "export expects exactly one FILE.seq");
  if (!own.python) throw SourceError("<command line>", {}, "export expects --python (the only format so far)");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file);
  apply_overrides(f, a, file);
  f = sequence_to_export(f, a, own, file);
  const Profile profile = effective_profile(f.scenario);
  std::string tmp = (std::filesystem::temp_directory_path() / "fsdpsim-export-XXXXXX").string();
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    std::cerr << "fsdpsim: cannot create a temporary file in " << std::filesystem::temp_directory_path() << "\n";
    return kInfra;
  }
  ::close(fd);
  {
    std::ofstream out(tmp);
    out << print_seq(f);
    if (!out.flush()) {
      std::remove(tmp.c_str());
      std::cerr << "fsdpsim: cannot write " << tmp << "\n";
      return kInfra;
    }
  }
  std::cout.flush();
  std::vector<std::string> args = {tmp, "--switches", switches_json(profile), "--name", file};
  std::string error;
  int rc = 0;
  {
    // Both steps start the upstream libraries: seconds each, one waiting line over both.
    Progress progress("export", a.quiet);
    Waiting waiting(progress, "running it without fully_shard, then writing the script (upstream libraries)");
    if (fsdp_independent(f, a)) args.push_back("--plain");
    if (!a.out.empty()) args.insert(args.end(), {"--out", a.out});
    rc = upstream::run_python_module("fsdpsim_upstream.export", args, &error);
  }
  std::remove(tmp.c_str());
  if (rc < 0) {
    std::cerr << "fsdpsim: " << error << "\n";
    return kInfra;
  }
  return rc == 0 ? kClean : rc == 3 ? kBadInput : kInfra;
}

}  // namespace fsdpsim::cli
