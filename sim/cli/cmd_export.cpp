// `fsdpsim export FILE.seq --python [--no-shrink] [--out PATH]`: the finding as a
// self-contained torchrun script on the real libraries that checks it (exit 1
// when it reproduces, 0 when not, 2 when it fails differently), written by the
// upstream backend's own package (real_backend/upstream/fsdpsim_upstream/export.py)
// from the canonical text and the effective profile. By default the file is
// triaged first, so the script holds the minimal sequence and its class.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <unistd.h>

#include "model/vocab/profile.hpp"
#include "real_backend/upstream/pool_client.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/progress.hpp"
#include "sim/triage.hpp"

namespace fsdpsim::cli {

namespace {

// The sequence the script runs: the triaged minimal one (its comments carry
// `# signature:`, `# class:` and `# finding:`), or with --no-shrink the file as
// written with its first finding's signature and sentence. A file without a
// finding is exported as written and the script checks nothing (stderr says so).
SeqFile sequence_to_export(SeqFile f, const Args& a, const std::string& file) {
  if (!a.no_shrink) {
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

}  // namespace

int cmd_export(const Args& a) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "export expects exactly one FILE.seq");
  if (!a.python) throw SourceError("<command line>", {}, "export expects --python (the only format so far)");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file);
  apply_overrides(f, a, file);
  f = sequence_to_export(f, a, file);
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
  if (!a.out.empty()) args.insert(args.end(), {"--out", a.out});
  std::string error;
  int rc = 0;
  {
    Progress progress("export", a.quiet);
    Waiting waiting(progress, "writing the script with the upstream libraries");  // starts the pool: seconds
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
