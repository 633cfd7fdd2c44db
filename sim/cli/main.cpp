// fsdpsim: the command line. Finds the command in the command table
// (command_table.hpp) and maps every error to its exit code; no exception
// escapes as a crash.
#include <iostream>
#include <string>

#include "model/vocab/suggest.hpp"
#include "sim/core/builtin_scenarios.hpp"
#include "sim/cli/command_table.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/output.hpp"
#include "sim/cli/output_path.hpp"

using namespace fsdpsim;
using namespace fsdpsim::cli;

namespace {

// The --builtin choices, wrapped to the usage's width.
std::string builtin_usage() {
  std::string out = "built-in scenarios (explore --builtin NAME; the hunt explores them all):\n", line = "           ";
  for (const auto& b : builtin_scenarios()) {
    if (line.size() + b.name.size() + 1 > 110) {
      out += line + "\n";
      line = "           ";
    }
    line += " " + b.name;
  }
  return out + line + "\n";
}

bool asks_for_help(const Command& c, const std::vector<std::string>& rest) {
  for (const auto& a : rest) {
    if (a == "--") break;  // what follows is record's command, with its own --help
    if (a == "--help" || a == "-h") return true;
  }
  return c.help_word && rest.size() == 1 && rest[0] == "help";
}

const char* kVersion =
    "fsdpsim " FSDPSIM_VERSION "\n"
    "upstream backend pins: torch 2.13.0, peft 0.21.2, accelerate 1.15.0 (real_backend/upstream/requirements.txt)\n";

// The row's flags parsed, every output path checked (exit 3 now, not after the work: output_path.hpp), then its handler.
int run_command(const Command& c, const std::vector<std::string>& argv) {
  const Invocation inv = parse_args(argv, c);
  check_output_paths(c, inv);
  return c.run(inv.args, inv.own.get());
}

int dispatch(const std::vector<std::string>& args) {
  const Command& default_command = command_table().front();  // the hunt
  if (args.empty()) return run_command(default_command, {});
  std::string name = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (name == "-h" || name == "--help" || name == "help") {
    std::cout << full_usage() << builtin_usage();
    return kClean;
  }
  if (name == "--version" || name == "-V" || name == "version") {
    std::cout << kVersion;
    return kClean;
  }
  // Flags with no command before them are the default command's: `fsdpsim --seconds 3` is a hunt.
  if (name.rfind("--", 0) == 0) {
    rest = args;
    name = default_command.name;
  }
  const Command* c = find_command(name);
  if (!c) {
    std::vector<std::string> names;
    for (const Command& row : command_table()) names.push_back(row.name);
    const std::string hint = did_you_mean(name, names);
    if (!hint.empty()) {  // one line with the fix; the whole usage only when nothing is near
      std::cerr << "fsdpsim: unknown command '" << name << "'" << hint << " (fsdpsim --help lists the commands)\n";
      return kBadInput;
    }
    std::cerr << "fsdpsim: unknown command '" << name << "'\n" << full_usage();
    return kBadInput;
  }
  if (asks_for_help(*c, rest)) {
    std::cout << command_usage(*c) << (c->lists_builtins ? builtin_usage() : "");
    return kClean;
  }
  return run_command(*c, rest);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    int rc = dispatch(args);
    flush_stdout();  // a full disk or closed pipe is exit 4, not a silent 0
    return rc;
  } catch (const WriteError& e) {
    std::cerr << "fsdpsim: " << e.what() << "\n";
    return kInfra;
  } catch (const SourceError& e) {
    std::cerr << e.what() << "\n";
    return kBadInput;
  } catch (const InfraError& e) {
    std::cerr << "fsdpsim: " << e.what() << "\n";
    return kInfra;
  } catch (const std::exception& e) {
    std::cerr << "fsdpsim: internal error: " << e.what() << "\n";
    return kInfra;
  }
}
