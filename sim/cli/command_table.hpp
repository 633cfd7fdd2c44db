// The command line as one table: a row per command with its name, the function
// that runs it, the flags it takes and its lines of the usage. `fsdpsim --help`,
// `fsdpsim CMD --help`, the unknown-command hint and the unknown-flag error are
// all read off it, so a command is added in one place (docs/guide/command-line.md).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "sim/cli/commands.hpp"

namespace fsdpsim::cli {

struct Command {
  const char* name;
  int (*run)(const Args&);
  std::vector<std::string> flags;  // its own flags; --quiet and --help are every command's
  const char* usage;               // its lines of `fsdpsim --help`, continuations included
  const char* notes = "";          // shared notes that follow its lines in `fsdpsim --help`
  bool backend_notes = false;      // `CMD --help` also prints every shared note (it takes --backend)
  bool lists_builtins = false;     // `CMD --help` also lists the built-in scenarios
  bool help_word = true;           // `fsdpsim CMD help` is its help (false: `help` would be a positional)
  // Old spellings it refuses (exit 3), each with the message that gives the new one.
  std::vector<std::pair<std::string, std::string>> renamed = {};
};

// The rows in the order `fsdpsim --help` shows them; the first is the default command.
const std::vector<Command>& command_table();
// The row named `name`, or nullptr.
const Command* find_command(const std::string& name);
// `fsdpsim --help`: every row's lines and notes, the exit codes and the flags of every command.
const std::string& full_usage();
// `fsdpsim CMD --help`: the row's lines, the shared notes where it takes --backend, and the exit codes.
std::string command_usage(const Command& c);

}  // namespace fsdpsim::cli
