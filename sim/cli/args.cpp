// The common flags (declared once here, taken by the rows that list them) and the
// parser that reads a command line against a row of the command table; errors are
// SourceErrors on "<command line>" so they exit 3 like any other bad input.
#include <cctype>
#include <stdexcept>

#include "model/vocab/number.hpp"
#include "model/vocab/profile.hpp"
#include "model/vocab/suggest.hpp"
#include "sim/cli/command_table.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/output_path.hpp"
#include "sim/core/generator.hpp"
#include "sim/release/release_matrix.hpp"

namespace fsdpsim::cli {

void usage_error(const std::string& what) { throw SourceError("<command line>", {}, what); }

// model/vocab/number.hpp: the .seq parser's reader too, so both say the value, the range and why.
int64_t flag_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  int64_t x = 0;
  const std::string why = read_whole_number(v, lo, hi, &x);
  if (!why.empty()) usage_error(flag + " expects " + why);
  return x;
}

namespace {

// "512M", "8G", "8000000000": decimal units (G = 10^9 bytes, as `cost` prints them).
int64_t parse_bytes(const std::string& flag, const std::string& v) {
  const std::string units = "KMGT";
  size_t u = v.empty() ? std::string::npos : units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(v.back()))));
  int64_t scale = 1;
  for (size_t i = 0; u != std::string::npos && i <= u; ++i) scale *= 1000;
  const std::string digits = u == std::string::npos ? v : v.substr(0, v.size() - 1);
  int64_t n = flag_int(flag, digits, 1, int64_t{1} << 50);
  if (n > (int64_t{1} << 50) / scale) usage_error(flag + " expects at most 1125T, got '" + v + "'");
  return n * scale;
}

void store_backends(Args& a, const std::string& flag, const std::string& v) {
  std::string err;
  if (!parse_backends(v, &a.backends, &err))
    usage_error(flag + " expects model, real, upstream, both or a comma list of them (model,upstream), got '" + v + "': " + err);
  if (flag == "--backends" && a.backends.size() < 2) usage_error("--backends expects two or three backends, got '" + v + "'");
  a.backend = v;
}

using Store = void (*)(Args&, const std::string&);

Flag shared(const char* name, const char* value, const char* example, const char* help, Store store, Writes writes = Writes::Nothing) {
  Flag f;
  f.name = name;
  f.value = value;
  f.example = example;
  f.help = help;
  f.writes = writes;
  f.store = [store](Args& a, void*, const std::string& v) { store(a, v); };
  return f;
}

// The flags several commands take, each declared once. A row takes one by name (common_flag)
// and may give it its own help line or output kind.
const std::vector<Flag>& common_flags() {
  static const std::vector<Flag> flags = {
      shared("--backend", "B", "model", "the backends to run: model, real, upstream, both, or a comma list (the first is the reference)",
             [](Args& a, const std::string& v) { store_backends(a, "--backend", v); }),
      shared("--backends", "B,B[,B]", "model,real", "two or three backends, compared with the first",
             [](Args& a, const std::string& v) { store_backends(a, "--backends", v); }),
      shared("--against", "real|upstream", "real", "the backend compared with the model",
             [](Args& a, const std::string& v) {
               if (v != "real" && v != "upstream") usage_error("--against expects real or upstream, got '" + v + "'");
               a.backends = {Backend::Model, v == "real" ? Backend::Real : Backend::Upstream};
               a.backend = "model," + v;
             }),
      shared("--profile", "P", "upstream", "the profile (fsdpsim profiles lists them) instead of the file's own",
             [](Args& a, const std::string& v) {
               if (!profile_by_name(v)) {
                 std::string names;
                 for (const auto& n : profile_names()) names += (names.empty() ? "" : ", ") + n;
                 usage_error("--profile expects one of " + names + ", got '" + v + "'");
               }
               a.profile = v;
             }),
      shared("--set", "k=v", "set_adapter_reshard=unmerge_first", "one switch of the profile set to a value (repeatable)",
             [](Args& a, const std::string& v) {
               size_t eq = v.find('=');
               if (eq == std::string::npos) usage_error("--set expects switch=value, got '" + v + "'");
               Profile probe = *profile_by_name("upstream");
               std::string err = apply_override(probe, v.substr(0, eq), v.substr(eq + 1));
               if (!err.empty()) usage_error("--set: " + err);
               a.sets.push_back({v.substr(0, eq), v.substr(eq + 1)});
             }),
      shared("--world", "N", "2", "the number of ranks (1..64) instead of the file's own",
             [](Args& a, const std::string& v) { a.world = static_cast<int>(flag_int("--world", v, 1, 64)); }),
      shared("--json", "", "", "one JSON object per line, each with a \"type\" (docs/cli-json.schema.json)",
             [](Args& a, const std::string&) { a.json = true; }),
      shared("--wide", "", "", "tables with every cell whole (default: cut to fit 120 columns)",
             [](Args& a, const std::string&) { a.wide = true; }),
      shared("--junit", "FILE", "x", "a JUnit XML report",
             [](Args& a, const std::string& v) {
               if (v.empty()) usage_error("--junit expects a file name");
               a.junit = v;
             },
             Writes::File),
      shared("--seed", "S", "1", "the first seed",
             [](Args& a, const std::string& v) {
               a.seed = static_cast<uint64_t>(flag_int("--seed", v, 0, 999999999999999999LL));
               a.have_seed = true;
             }),
      shared("--count", "N", "1", "how many seeds, from the first",
             [](Args& a, const std::string& v) {
               a.count = static_cast<int>(flag_int("--count", v, 1, 100000000));
               a.count_given = true;
             }),
      shared("--out", "DIR", "x", "the directory it writes into", [](Args& a, const std::string& v) { a.out = v; }, Writes::Dir),
      shared("--seconds", "T", "1", "the time budget in seconds (1..3600)",
             [](Args& a, const std::string& v) {
               a.seconds = static_cast<double>(flag_int("--seconds", v, 1, 3600));
               a.have_seconds = true;
             }),
      shared("--ranks", "processes|threads", "threads", "the real backend's ranks: one process each (default) or threads",
             [](Args& a, const std::string& v) {
               if (v != "processes" && v != "threads") usage_error("--ranks expects processes or threads, got '" + v + "'");
               a.ranks = v;
             }),
      shared("--memory-budget", "BYTES", "8G", "refuse a sequence whose peak is over BYTES (512M, 8G; default half the memory)",
             [](Args& a, const std::string& v) { a.memory_budget = parse_bytes("--memory-budget", v); }),
      shared("--timeout", "MS", "5000", "the real ranks' and the upstream pool's timeout (100..600000, default 5000)",
             [](Args& a, const std::string& v) { a.timeout_ms = static_cast<int>(flag_int("--timeout", v, 100, 600000)); }),
      shared("--draw", "checkpoint=P,...", "checkpoint=50", "optional draws of the generator, in percent",
             [](Args& a, const std::string& v) {
               GenOptions probe;
               std::string err = apply_draws(v, &probe);
               if (!err.empty()) usage_error("--draw " + err);
               a.draw = v;
             }),
      shared("--upstream", "peft==X[,...]", "peft==0.21.2", "the upstream pool on that release set (its environment made on first use)",
             [](Args& a, const std::string& v) { a.upstream_set = parse_release_set(v, "<command line>", {1, 1}).text(); }),
      shared("--quiet", "", "", "no progress lines on stderr", [](Args& a, const std::string&) { a.quiet = true; }),
  };
  return flags;
}

// An unknown flag, named with its command: the nearest of the command's flags, or all of them.
[[noreturn]] void unknown_flag(const std::string& flag, const Command& c, const std::vector<std::string>& allowed) {
  const std::string cmd = c.name;
  const std::string near = did_you_mean(flag, allowed);
  if (!near.empty()) usage_error("unknown flag " + flag + " for " + cmd + near + " (fsdpsim " + cmd + " --help lists its flags)");
  std::string all;
  for (const auto& f : allowed) all += (all.empty() ? "" : ", ") + f;
  usage_error("unknown flag " + flag + " for " + cmd + " (it takes " + all + "; fsdpsim " + cmd + " --help says what each does)");
}

}  // namespace

Flag common_flag(const std::string& name) {
  for (const Flag& f : common_flags())
    if (f.name == name && name != "--quiet") return f;
  throw std::logic_error("the command table names " + name + ", which is no common flag (sim/cli/args.cpp)");
}

const Flag& quiet_flag() { return common_flags().back(); }

void apply_draws_or_default(const std::string& draw, GenOptions* opt) {
  if (draw.empty()) return;
  std::string err = apply_draws(draw, opt);
  if (!err.empty()) usage_error("--draw " + err);
}

Invocation parse_args(const std::vector<std::string>& argv, const Command& c) {
  std::vector<const Flag*> takes;
  for (const Flag& f : c.flags) takes.push_back(&f);
  takes.push_back(&quiet_flag());
  Invocation inv;
  inv.own = c.make_own();
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (s == "--") {
      if (!c.takes_command) usage_error(std::string(c.name) + " takes no command after `--`");
      inv.args.command.assign(argv.begin() + static_cast<std::ptrdiff_t>(i) + 1, argv.end());
      break;
    }
    if (s.size() < 2 || s.compare(0, 2, "--") != 0) {
      inv.args.positional.push_back(s);
      continue;
    }
    for (const auto& [old, instead] : c.renamed)
      if (s == old) usage_error(instead);
    const Flag* flag = nullptr;
    for (const Flag* f : takes)
      if (f->name == s) flag = f;
    if (!flag) {
      std::vector<std::string> names;
      for (const Flag* f : takes) names.push_back(f->name);
      unknown_flag(s, c, names);
    }
    if (!flag->is_switch() && i + 1 >= argv.size()) usage_error(s + " expects a value");
    const std::string value = flag->is_switch() ? "" : argv[++i];
    flag->store(inv.args, inv.own.get(), value);
    inv.given.push_back({flag, value});
  }
  return inv;
}

void check_output_paths(const Command& c, const Invocation& inv) {
  // In the row's order; an empty value is as if the flag were not given.
  for (const Flag& f : c.flags) {
    if (f.writes == Writes::Nothing) continue;
    std::string path;
    for (const auto& [given, value] : inv.given)
      if (given == &f && !value.empty()) path = value;
    if (path.empty() && f.default_path) path = f.default_path(inv.args, inv.own.get());
    if (path.empty()) continue;
    if (f.writes == Writes::Dir)
      check_output_dir(f.name, path);
    else
      check_output_file(f.name, path);
  }
}

void apply_overrides(SeqFile& f, const Args& a, const std::string& file) {
  if (!a.profile.empty()) f.scenario.profile = a.profile;
  for (const auto& [k, v] : a.sets) f.scenario.overrides.push_back({k, v, {}});
  if (a.world > 0) f.scenario.world = a.world;
  validate(f, file);
}

}  // namespace fsdpsim::cli
