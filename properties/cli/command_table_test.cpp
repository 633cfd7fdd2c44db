// The command table (sim/cli/command_table.hpp) drives the parser, `CMD --help` and the
// unknown-flag error: every row's flags parse with a value they take and are listed in the
// row's help; a flag another row declares is refused naming this command (exit 3 through
// the binary); a flag's value lands in Args or in its own command's struct.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "model/vocab/source_error.hpp"
#include "properties/cli_run.hpp"
#include "sim/cli/command_table.hpp"
#include "sim/cli/commands.hpp"

using namespace fsdpsim;
using namespace fsdpsim::cli;

namespace {

// A scratch path under TMPDIR for a flag that writes (its directory exists and is writable).
std::string scratch_path(const Flag& f) {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/command_table_test" + (f.writes == Writes::Dir ? "_dir" : "_file.out");
}

std::vector<std::string> argv_for(const Flag& f) {
  if (f.is_switch()) return {f.name};
  return {f.name, f.writes == Writes::Nothing ? f.example : scratch_path(f)};
}

// The flag's own line in `CMD --help`: "  --name VALUE   help".
bool help_lists(const std::string& help, const Flag& f) {
  const std::string line = "\n  " + f.name + (f.is_switch() ? "" : " " + f.value) + " ";
  return help.find(line) != std::string::npos && help.find(f.help) != std::string::npos;
}

template <class Own>
const Own& own_of(const Invocation& inv) {
  return *static_cast<const Own*>(inv.own.get());
}

}  // namespace

TEST(CommandTable, EveryRowsFlagsParseAndAppearInItsHelp) {
  int flags = 0;
  for (const Command& c : command_table()) {
    const std::string help = command_usage(c);
    std::set<std::string> seen;
    for (const Flag& f : c.flags) {
      ++flags;
      EXPECT_TRUE(seen.insert(f.name).second) << c.name << " declares " << f.name << " twice";
      EXPECT_FALSE(f.help.empty()) << c.name << " " << f.name << " has no help line";
      EXPECT_TRUE(f.is_switch() || !f.example.empty()) << c.name << " " << f.name << " takes a value but gives no example";
      EXPECT_TRUE(help_lists(help, f)) << c.name << " --help does not list " << f.name << ":\n" << help;
      try {
        const Invocation inv = parse_args(argv_for(f), c);
        ASSERT_EQ(inv.given.size(), 1u) << c.name << " " << f.name;
        EXPECT_EQ(inv.given[0].first->name, f.name);
        EXPECT_TRUE(inv.args.positional.empty()) << c.name << " " << f.name << " left a word unread";
        if (f.writes != Writes::Nothing) check_output_paths(c, inv);
      } catch (const SourceError& e) {
        ADD_FAILURE() << c.name << " refuses its own " << f.name << " with its example: " << e.what();
      }
    }
    EXPECT_EQ(parse_args({"--quiet"}, c).args.quiet, true) << c.name;
  }
  EXPECT_GT(flags, 100);
}

TEST(CommandTable, AFlagOfAnotherCommandIsRefusedNamingTheCommand) {
  std::set<std::string> every;
  for (const Command& c : command_table())
    for (const Flag& f : c.flags) every.insert(f.name);
  int refused = 0;
  for (const Command& c : command_table()) {
    std::set<std::string> own = {"--quiet"};
    for (const Flag& f : c.flags) own.insert(f.name);
    for (const auto& [old, instead] : c.renamed) own.insert(old);  // refused too, with its new name
    for (const std::string& name : every) {
      if (own.count(name)) continue;
      try {
        parse_args({name, "1"}, c);
        ADD_FAILURE() << c.name << " takes " << name << ", which its row does not declare";
      } catch (const SourceError& e) {
        ++refused;
        EXPECT_NE(std::string(e.what()).find("unknown flag " + name + " for " + c.name), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_GT(refused, 500);
  // Through the binary: exit 3, the command named, no work done.
  const test::CliResult r = test::run_cli("explore --peft /nowhere");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("unknown flag --peft for explore"), std::string::npos) << r.out;
}

TEST(CommandTable, AValueLandsInArgsOrItsOwnCommandsStruct) {
  const Invocation e = parse_args({"x.seq", "--depth", "3", "--ops", "merge,eval", "--world", "2", "--full"}, *find_command("explore"));
  EXPECT_EQ(own_of<ExploreFlags>(e).depth, 3);
  EXPECT_EQ(own_of<ExploreFlags>(e).ops, (std::vector<std::string>{"merge", "eval"}));
  EXPECT_TRUE(own_of<ExploreFlags>(e).full_alphabet);
  EXPECT_EQ(e.args.world, 2);
  EXPECT_EQ(e.args.positional, std::vector<std::string>{"x.seq"});
  const Invocation x = parse_args({"--seed", "7", "--shard", "1/3", "--against", "upstream"}, *find_command("crosscheck"));
  EXPECT_EQ(own_of<CrosscheckFlags>(x).shard_index, 1);
  EXPECT_EQ(own_of<CrosscheckFlags>(x).shard_count, 3);
  EXPECT_EQ(x.args.backend, "model,upstream");
  EXPECT_TRUE(x.args.have_seed);
  const Invocation v = parse_args({"--peft", "/src/peft", "a.seq"}, *find_command("versions"));
  EXPECT_EQ(own_of<VersionsFlags>(v).peft_path, "/src/peft");
  EXPECT_EQ(own_of<VersionsFlags>(v).matrix, "default");
  const Invocation h = parse_args({"--model-only", "--corpus", "c"}, *find_command("hunt"));
  EXPECT_TRUE(own_of<HuntFlags>(h).model_only);
  EXPECT_EQ(own_of<HuntFlags>(h).corpus, "c");
  const Invocation b = parse_args({"--model-only"}, *find_command("bench"));
  EXPECT_TRUE(own_of<BenchFlags>(b).model_only);
  // A bad value is the flag's own error, as before the table held the flags.
  try {
    parse_args({"--worlds", "3-1"}, *find_command("coverage"));
    ADD_FAILURE() << "coverage --worlds 3-1 parsed";
  } catch (const SourceError& err) {
    EXPECT_NE(std::string(err.what()).find("--worlds expects A-B with A <= B, got '3-1'"), std::string::npos) << err.what();
  }
}
