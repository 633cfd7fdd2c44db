// The command line's two halves: `Args`, what several commands take (a file's
// overrides, the backends, the seed range, the output directory...), and `Flag`,
// one flag of a command's row in the command table (command_table.hpp): its name,
// what it takes, where it stores its value and what it writes, its help line.
// A command's own options live in its own struct next to its handler
// (commands.hpp); its row's flags store into that struct or into Args.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "sim/core/crosscheck.hpp"

namespace fsdpsim::cli {

// The options several commands share; the common flags (args.cpp) store into it.
struct Args {
  std::vector<std::string> positional;
  std::string backend = "model";  // as written: "both", "model,upstream"
  BackendList backends = {Backend::Model};  // --backend, --backends or --against (a backend), parsed
  std::string profile;                                       // empty: the file's own
  std::vector<std::pair<std::string, std::string>> sets;     // --set k=v
  int world = 0;                                             // 0: the file's own
  bool json = false;   // --json: one typed JSON object per line (docs/cli-json.schema.json)
  bool quiet = false;  // --quiet: no progress lines on stderr
  bool wide = false;   // --wide: tables with every cell whole (default: within 120 columns)
  std::string junit;   // --junit FILE: JUnit XML (check, crosscheck, hunt)
  uint64_t seed = 0;
  bool have_seed = false;
  int count = 1;
  bool count_given = false;  // --count was given (coverage's default differs)
  std::string out;           // --out: a directory (export: a file)
  double seconds = 2.0;
  bool have_seconds = false;
  std::string ranks = "processes";  // real backend: processes | threads
  int64_t memory_budget = 0;  // --memory-budget BYTES (K/M/G suffixes); 0: default_memory_budget()
  int timeout_ms = kDefaultTimeoutMs;  // one default for the real ranks and the upstream pool
  std::string draw;           // --draw checkpoint=P,... (GenOptions' optional draws)
  std::string upstream_set;   // --upstream peft==X[,...]: the release set the upstream pool runs (normalized)
  std::vector<std::string> command;  // after `--` (record: the command it runs); only rows with takes_command
};

// What a flag's value names that the command will write: checked before any work (output_path.hpp).
enum class Writes { Nothing, File, Dir };

// One flag of a command. Built by common_flag (the shared ones) or the own_* builders below.
struct Flag {
  std::string name;     // "--depth"
  std::string value;    // what it takes, as `CMD --help` shows it ("D"); "" for a switch
  std::string example;  // a value it accepts (the command-table test parses every row with it); "" for a switch
  std::string help;     // its line in `CMD --help`
  Writes writes = Writes::Nothing;
  // Stores the value ("" for a switch) into the common args or the command's own struct; throws
  // SourceError on a bad one.
  std::function<void(Args& common, void* own, const std::string& value)> store;
  // The path it writes when it is not given ("" or unset: none), checked like a given one.
  std::function<std::string(const Args& common, const void* own)> default_path;
  const std::type_info* own_type = nullptr;  // the own struct `store` writes into; nullptr: Args

  bool is_switch() const { return value.empty(); }
  Flag with_help(std::string h) const {
    Flag f = *this;
    f.help = std::move(h);
    return f;
  }
  Flag writing(Writes w, std::string shown_value) const {
    Flag f = *this;
    f.writes = w;
    f.value = std::move(shown_value);
    return f;
  }
};

// A usage error on "<command line>" (a SourceError: exit 3).
[[noreturn]] void usage_error(const std::string& what);
// FLAG's value as a whole number in [lo, hi], or a usage error saying the value, the range and why.
int64_t flag_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi);

// The shared declaration of a common flag ("--world", "--out"...): std::logic_error for a name
// that is not one (a mistake in the command table, caught by its test).
Flag common_flag(const std::string& name);
// --quiet: every command's, after its row's flags.
const Flag& quiet_flag();

// A flag that stores into the command's own struct `Own` through `parse`.
template <class Own>
Flag own_flag(const char* name, const char* value, const char* example, const char* help, void (*parse)(Own&, const std::string&)) {
  Flag f;
  f.name = name;
  f.value = value;
  f.example = example;
  f.help = help;
  f.own_type = &typeid(Own);
  f.store = [parse](Args&, void* own, const std::string& v) { parse(*static_cast<Own*>(own), v); };
  return f;
}

// A switch that sets `field` of the command's own struct.
template <class Own>
Flag own_switch(const char* name, bool Own::*field, const char* help) {
  Flag f = own_flag<Own>(name, "", "", help, nullptr);
  f.store = [field](Args&, void* own, const std::string&) { static_cast<Own*>(own)->*field = true; };
  return f;
}

// A flag whose value is kept as written in `field` (a path, a name).
template <class Own>
Flag own_text(const char* name, const char* value, std::string Own::*field, const char* help, Writes writes = Writes::Nothing) {
  Flag f = own_flag<Own>(name, value, "x", help, nullptr);
  f.writes = writes;
  f.store = [field](Args&, void* own, const std::string& v) { static_cast<Own*>(own)->*field = v; };
  return f;
}

// A whole number in [lo, hi] into `field`.
template <class Own, class Int>
Flag own_int(const char* name, const char* value, Int Own::*field, int64_t lo, int64_t hi, const char* help) {
  Flag f = own_flag<Own>(name, value, "", help, nullptr);
  f.example = std::to_string(lo);
  const std::string flag = name;
  f.store = [field, flag, lo, hi](Args&, void* own, const std::string& v) {
    static_cast<Own*>(own)->*field = static_cast<Int>(flag_int(flag, v, lo, hi));
  };
  return f;
}

// The default path a flag checks when it is not given, read off the command's own struct.
template <class Own>
Flag with_default_path(Flag f, std::string (*path)(const Args&, const Own&)) {
  f.default_path = [path](const Args& a, const void* own) { return path(a, *static_cast<const Own*>(own)); };
  return f;
}

}  // namespace fsdpsim::cli
