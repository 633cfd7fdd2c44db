// `fsdpsim shrink`: the minimal sequence keeping a file's first finding.
#include <iostream>

#include "sim/cli/commands.hpp"
#include "sim/shrink.hpp"

namespace fsdpsim::cli {

int cmd_shrink(const Args& a) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "shrink expects exactly one FILE.seq");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file);
  apply_overrides(f, a, file);
  ShrinkResult res;
  bool found = shrink(f, &res, [](const std::string& line) { std::cerr << "shrink: " << line << "\n"; });
  if (!found) {
    std::cerr << "shrink: " << file << " has no finding to keep\n";
    return kClean;
  }
  res.minimal.comments = {"shrunk from " + file + " by fsdpsim shrink (" + std::to_string(res.runs) + " runs)",
                          "signature " + res.signature};
  std::cout << print_seq(res.minimal);
  return kFinding;
}

}  // namespace fsdpsim::cli

namespace fsdpsim::cli {

// `fsdpsim expect FILE.seq`: the file with every op's expectations replaced by
// what the model observes (how a finding becomes a regression).
int cmd_expect(const Args& a) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "expect expects exactly one FILE.seq");
  const std::string& file = a.positional[0];
  SeqFile f = parse_seq_file(file);
  apply_overrides(f, a, file);
  fill_expectations(f, run_checked(f));
  std::cout << print_seq(f);
  return kClean;
}

}  // namespace fsdpsim::cli
