// Flag parsing shared by the subcommands; errors are SourceErrors on
// "<command line>" so they exit 3 like any other bad input.
#include <cctype>
#include <iostream>

#include "model/vocab/number.hpp"
#include "model/vocab/profile.hpp"
#include "model/vocab/suggest.hpp"
#include "model/vocab/text.hpp"
#include "sim/core/generator.hpp"
#include "sim/release/release_matrix.hpp"
#include "sim/cli/command_table.hpp"
#include "sim/cli/commands.hpp"

namespace fsdpsim::cli {
namespace {

[[noreturn]] void usage_error(const std::string& what) { throw SourceError("<command line>", {}, what); }

// An unknown flag, named with its command: the nearest of the command's flags, or all of them
// (its row of the command table, command_table.hpp).
[[noreturn]] void unknown_flag(const std::string& flag, const Command& c, const std::vector<std::string>& allowed) {
  const std::string cmd = c.name;
  const std::string near = did_you_mean(flag, allowed);
  if (!near.empty()) usage_error("unknown flag " + flag + " for " + cmd + near + " (fsdpsim " + cmd + " --help lists its flags)");
  std::string all;
  for (const auto& f : allowed) all += (all.empty() ? "" : ", ") + f;
  usage_error("unknown flag " + flag + " for " + cmd + " (it takes " + all + "; fsdpsim " + cmd + " --help says what each does)");
}

// model/vocab/number.hpp: the .seq parser's reader too, so both say the value, the range and why.
int64_t to_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  int64_t x = 0;
  const std::string why = read_whole_number(v, lo, hi, &x);
  if (!why.empty()) usage_error(flag + " expects " + why);
  return x;
}

// "512M", "8G", "8000000000": decimal units (G = 10^9 bytes, as `cost` prints them).
int64_t parse_bytes(const std::string& flag, const std::string& v) {
  const std::string units = "KMGT";
  size_t u = v.empty() ? std::string::npos : units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(v.back()))));
  int64_t scale = 1;
  for (size_t i = 0; u != std::string::npos && i <= u; ++i) scale *= 1000;
  const std::string digits = u == std::string::npos ? v : v.substr(0, v.size() - 1);
  int64_t n = to_int(flag, digits, 1, int64_t{1} << 50);
  if (n > (int64_t{1} << 50) / scale) usage_error(flag + " expects at most 1125T, got '" + v + "'");
  return n * scale;
}

// "I/N": block I (0-based) of N.
void parse_shard(const std::string& v, int* index, int* count) {
  size_t slash = v.find('/');
  if (slash == std::string::npos) usage_error("--shard expects I/N (0 <= I < N), got '" + v + "'");
  *count = static_cast<int>(to_int("--shard N", v.substr(slash + 1), 1, 100000));
  *index = static_cast<int>(to_int("--shard I", v.substr(0, slash), 0, 100000));
  if (*index >= *count) usage_error("--shard expects I/N with 0 <= I < N, got '" + v + "'");
}

}  // namespace

void apply_draws_or_default(const std::string& draw, GenOptions* opt) {
  if (draw.empty()) return;
  std::string err = apply_draws(draw, opt);
  if (!err.empty()) usage_error("--draw " + err);
}

Args parse_args(const std::vector<std::string>& argv, const Command& c) {
  std::vector<std::string> allowed = c.flags;
  allowed.push_back("--quiet");  // every command's
  Args a;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (s.size() < 2 || s.compare(0, 2, "--") != 0) {
      a.positional.push_back(s);
      continue;
    }
    for (const auto& [old, instead] : c.renamed)
      if (s == old) usage_error(instead);
    bool ok = false;
    for (const auto& f : allowed) ok = ok || f == s;
    if (!ok) unknown_flag(s, c, allowed);
    if (s == "--json" || s == "--quiet" || s == "--wide") {
      (s == "--json" ? a.json : s == "--quiet" ? a.quiet : a.wide) = true;
      continue;
    }
    if (s == "--model-only" || s == "--stability" || s == "--scripts" || s == "--discovery") {
      (s == "--model-only" ? a.model_only : s == "--stability" ? a.stability : s == "--scripts" ? a.scripts : a.discovery) = true;
      continue;
    }
    if (s == "--python") {
      a.python = true;
      continue;
    }
    if (s == "--no-shrink") {
      a.no_shrink = true;
      continue;
    }
    if (s == "--divergence") {
      a.divergence = true;
      continue;
    }
    if (s == "--fail-on-new") {  // the old name: "new" meant "no patched switch removes it"
      std::cerr << "fsdpsim: --fail-on-new is now --fail-on-unreported (exit 1 on a root cause no upstream report covers)\n";
      a.fail_on_unreported = true;
      continue;
    }
    if (s == "--fail-on-unreported" || s == "--fail-on-uncatalogued") {
      (s == "--fail-on-unreported" ? a.fail_on_unreported : a.fail_on_uncatalogued) = true;
      continue;
    }
    if (s == "--check" || s == "--no-run") {
      (s == "--check" ? a.check : a.no_run) = true;
      continue;
    }
    if (s == "--rank-ops" || s == "--full") {
      (s == "--rank-ops" ? a.rank_ops : a.full_alphabet) = true;
      continue;
    }
    if (i + 1 >= argv.size()) usage_error(s + " expects a value");
    const std::string& v = argv[++i];
    if (s == "--backend" || s == "--backends") {
      std::string err;
      if (!parse_backends(v, &a.backends, &err))
        usage_error(s + " expects model, real, upstream, both or a comma list of them (model,upstream), got '" + v + "': " + err);
      if (s == "--backends" && a.backends.size() < 2) usage_error("--backends expects two or three backends, got '" + v + "'");
      a.backend = v;
    } else if (s == "--peft") {  // versions: a local PEFT checkout or wheel
      a.peft_path = v;
    } else if (s == "--against") {  // a backend, on every command that takes it
      if (v != "real" && v != "upstream") usage_error("--against expects real or upstream, got '" + v + "'");
      a.backends = {Backend::Model, v == "real" ? Backend::Real : Backend::Upstream};
      a.backend = "model," + v;
    } else if (s == "--profile") {
      if (!profile_by_name(v)) {
        std::string names;
        for (const auto& n : profile_names()) names += (names.empty() ? "" : ", ") + n;
        usage_error("--profile expects one of " + names + ", got '" + v + "'");
      }
      a.profile = v;
    } else if (s == "--set") {
      size_t eq = v.find('=');
      if (eq == std::string::npos) usage_error("--set expects switch=value, got '" + v + "'");
      Profile probe = *profile_by_name("upstream");
      std::string err = apply_override(probe, v.substr(0, eq), v.substr(eq + 1));
      if (!err.empty()) usage_error("--set: " + err);
      a.sets.push_back({v.substr(0, eq), v.substr(eq + 1)});
    } else if (s == "--world") {
      a.world = static_cast<int>(to_int(s, v, 1, 64));
    } else if (s == "--seed") {
      a.seed = static_cast<uint64_t>(to_int(s, v, 0, 999999999999999999LL));
      a.have_seed = true;
    } else if (s == "--count") {
      a.count = static_cast<int>(to_int(s, v, 1, 100000000));
      a.count_given = true;
    } else if (s == "--worlds") {
      const size_t dash = v.find('-');
      a.worlds_lo = static_cast<int>(to_int(s, v.substr(0, dash), 1, 64));
      a.worlds_hi = dash == std::string::npos ? a.worlds_lo : static_cast<int>(to_int(s, v.substr(dash + 1), 1, 64));
      if (a.worlds_hi < a.worlds_lo) usage_error("--worlds expects A-B with A <= B, got '" + v + "'");
    } else if (s == "--out") {
      a.out = v;
    } else if (s == "--issue") {
      a.issue = v;
    } else if (s == "--fuzzer") {
      a.fuzzer = v;
    } else if (s == "--corpus") {
      a.corpus = v;
    } else if (s == "--ranks") {
      if (v != "processes" && v != "threads") usage_error("--ranks expects processes or threads, got '" + v + "'");
      a.ranks = v;
    } else if (s == "--memory-budget") {
      a.memory_budget = parse_bytes(s, v);
    } else if (s == "--timeout") {
      a.timeout_ms = static_cast<int>(to_int(s, v, 100, 600000));
    } else if (s == "--html" || s == "--results") {
      (s == "--html" ? a.html : a.results) = v;
    } else if (s == "--junit") {
      if (v.empty()) usage_error("--junit expects a file name");
      a.junit = v;
    } else if (s == "--draw") {
      GenOptions probe;
      std::string err = apply_draws(v, &probe);
      if (!err.empty()) usage_error("--draw " + err);
      a.draw = v;
    } else if (s == "--upstream") {
      a.upstream_set = parse_release_set(v, "<command line>", {1, 1}).text();
    } else if (s == "--matrix") {
      a.matrix = v;
    } else if (s == "--bisect" || s == "--releases" || s == "--compare") {
      (s == "--bisect" ? a.bisect : s == "--releases" ? a.releases : a.compare) = v;
    } else if (s == "--shard") {
      parse_shard(v, &a.shard_index, &a.shard_count);
    } else if (s == "--seconds") {
      a.seconds = static_cast<double>(to_int(s, v, 1, 3600));
      a.have_seconds = true;
    } else if (s == "--builtin") {
      a.builtin = v;
    } else if (s == "--depth") {
      a.depth = static_cast<int>(to_int(s, v, 0, 64));
    } else if (s == "--max-states") {
      a.max_states = to_int(s, v, 1, int64_t{1} << 40);
    } else if (s == "--dot") {
      a.dot = v;
    } else if (s == "--svg") {
      a.svg = v;
    } else if (s == "--ops") {
      for (const std::string& item : split(v)) {
        if (item.empty()) usage_error("--ops expects a comma list of op kinds or op texts, got '" + v + "'");
        a.ops.push_back(item);
      }
    }
  }
  return a;
}

void apply_overrides(SeqFile& f, const Args& a, const std::string& file) {
  if (!a.profile.empty()) f.scenario.profile = a.profile;
  for (const auto& [k, v] : a.sets) f.scenario.overrides.push_back({k, v, {}});
  if (a.world > 0) f.scenario.world = a.world;
  validate(f, file);
}

}  // namespace fsdpsim::cli
