// The command line as one table: a row per command with its name, the function
// that runs it, the flags it takes (each declared once: what it takes, where it
// stores it, what it writes, its help line; args.hpp) and its lines of the usage.
// The parser, `fsdpsim --help`, `fsdpsim CMD --help`, the unknown-command hint,
// the unknown-flag error and the output-path checks are all read off it, so a
// command is added in one place and a flag is one row (docs/guide/command-line.md).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "sim/cli/args.hpp"

namespace fsdpsim::cli {

// The own struct of a command that has no options of its own.
struct NoOwnFlags {};

struct Command {
  const char* name;
  std::vector<Flag> flags;  // its flags in the order `CMD --help` lists them; --quiet and --help are every command's
  const char* usage;        // its lines of `fsdpsim --help`, continuations included
  const char* notes = "";   // shared notes that follow its lines in `fsdpsim --help`
  bool backend_notes = false;   // `CMD --help` also prints every shared note (it takes --backend)
  bool lists_builtins = false;  // `CMD --help` also lists the built-in scenarios
  bool help_word = true;        // `fsdpsim CMD help` is its help (false: `help` would be a positional)
  bool takes_command = false;   // the words after `--` are a command it runs (Args::command)
  // Old spellings it refuses (exit 3), each with the message that gives the new one.
  std::vector<std::pair<std::string, std::string>> renamed = {};
  // Its own struct, default-made, and the handler that takes it (command() below fills both).
  std::function<std::shared_ptr<void>()> make_own = nullptr;
  std::function<int(const Args&, const void* own)> run = nullptr;
  const std::type_info* own_type = nullptr;
};

// A row whose handler takes the command's own struct `Own` beside the common args.
template <class Own>
Command command(const char* name, int (*handler)(const Args&, const Own&), std::vector<Flag> flags, const char* usage,
                const char* notes = "") {
  Command c{name, std::move(flags), usage, notes};
  c.make_own = [] { return std::static_pointer_cast<void>(std::make_shared<Own>()); };
  c.run = [handler](const Args& a, const void* own) { return handler(a, *static_cast<const Own*>(own)); };
  c.own_type = &typeid(Own);
  return c;
}
// A row whose handler takes the common args alone.
Command command(const char* name, int (*handler)(const Args&), std::vector<Flag> flags, const char* usage, const char* notes = "");

// A command line parsed against a row: the common args, the row's own struct, and each flag given
// with its value (in the order given).
struct Invocation {
  Args args;
  std::shared_ptr<void> own;
  std::vector<std::pair<const Flag*, std::string>> given;
};
// The flags of `argv` that command `c` takes (its row, and --quiet). Throws SourceError
// ("<command line>: ...", exit 3) on a bad flag or value; an unknown flag names the command.
Invocation parse_args(const std::vector<std::string>& argv, const Command& c);
// Every path the row's flags write (given, or by default), checked before the command runs (output_path.hpp).
void check_output_paths(const Command& c, const Invocation& inv);

// The rows in the order `fsdpsim --help` shows them; the first is the default command.
const std::vector<Command>& command_table();
// The row named `name`, or nullptr.
const Command* find_command(const std::string& name);
// `fsdpsim --help`: every row's lines and notes, the exit codes and the flags of every command.
const std::string& full_usage();
// `fsdpsim CMD --help`: the row's lines, the shared notes where it takes --backend, its flags, one a line
// with what each takes and does, and the exit codes.
std::string command_usage(const Command& c);

}  // namespace fsdpsim::cli
