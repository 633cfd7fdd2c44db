// `fsdpsim scenario FILE.seq [--tree]`: what the parser reads from a file, without running it. The
// canonical text (print_seq), or with --tree the module tree of its `model` line: the one command
// that takes a `model` scenario while no backend runs one (docs/design/known-limits.md).
#include <iostream>

#include "model/vocab/module_tree.hpp"
#include "sim/cli/commands.hpp"

namespace fsdpsim::cli {

int cmd_scenario(const Args& a, const ScenarioFlags& own) {
  if (a.positional.size() != 1) throw SourceError("<command line>", {}, "scenario expects exactly one FILE.seq");
  const std::string& file = a.positional[0];
  const SeqFile f = parse_seq_file(file, /*allow_model=*/true);
  if (!own.tree) {
    std::cout << print_seq(f);
    return kClean;
  }
  if (!f.scenario.model)
    throw SourceError(file, f.separator, "--tree prints the module tree of a `model` line, and this file declares `layer` lines");
  std::cout << module_tree_text(module_tree(*f.scenario.model));
  return kClean;
}

}  // namespace fsdpsim::cli
