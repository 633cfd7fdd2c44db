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
