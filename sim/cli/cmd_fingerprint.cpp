// `fsdpsim fingerprint`: one hash over generated sequences and what one backend
// observed of each (the sequence text, its observations, its findings). A
// refactoring that changes no behaviour leaves it unchanged; the figure is
// printed with the per-world counts so two runs can be compared by eye.
#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include "model/vocab/observation_binary.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/cli/progress.hpp"
#include "sim/core/generator.hpp"

namespace fsdpsim::cli {

namespace {

constexpr uint64_t kOffset = 1469598103934665603ull, kPrime = 1099511628211ull;

uint64_t fold(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * kPrime;
  return h;
}

uint64_t fold_text(uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = (h ^ c) * kPrime;
  return fold(h, s.size());
}

std::string hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

int cmd_fingerprint(const Args& a) {
  if (!a.have_seed) throw SourceError("<command line>", {}, "fingerprint expects --seed S");
  if (a.backends.size() != 1) throw SourceError("<command line>", {}, "fingerprint expects one --backend (model, real or upstream), got " + a.backend);
  const Backend b = a.backends[0];
  GenOptions opt;
  apply_draws_or_default(a.draw, &opt);
  RealPools pools = pools_of(a);
  Progress progress("fingerprint", a.quiet);
  uint64_t all = kOffset;
  std::map<int, uint64_t> per_world;  // world -> its sequences' hash, in seed order
  std::map<int, int> count;
  int broken = 0;
  for (int i = 0; i < a.count; ++i) {
    const uint64_t seed = a.seed + static_cast<uint64_t>(i);
    // --world W fixes the world; without it the worlds 1..4 take turns.
    opt.world = a.world > 0 ? a.world : 1 + i % 4;
    Prng rng(seed);
    SeqFile f = generate_seq(rng, opt);
    if (!a.profile.empty()) f.scenario.profile = a.profile;
    BackendRun res = run_backend(f, {b}, pools, false);
    uint64_t h = fold_text(kOffset, print_seq(f));
    if (res.infra_failure) {
      ++broken;
      h = fold_text(h, "broken");
    } else {
      h = fold(h, observations_hash(res.runs[0].observations));
      for (const auto& fd : res.runs[0].findings) h = fold_text(h, fd.text);
    }
    all = fold(all, h);
    auto [it, fresh] = per_world.emplace(opt.world, kOffset);
    it->second = fold(it->second, h);
    ++count[opt.world];
    // --wide: each sequence's own hash, so two runs that differ name the sequences that moved
    if (a.wide) {
      if (a.json) {
        JsonRecord j("fingerprint_sequence");
        j.num("seed", static_cast<int64_t>(seed)).num("world", opt.world).str("hash", hex(h)).print(std::cout);
      } else {
        std::cout << "  seed " << seed << " world " << opt.world << ": " << hex(h) << (res.infra_failure ? " broken" : "") << "\n";
      }
    }
    if (i % 256 == 0) progress.status(std::to_string(i) + "/" + std::to_string(a.count) + " sequences");
  }
  progress.done();
  if (a.json) {
    JsonRecord j("fingerprint");
    j.num("seed", static_cast<int64_t>(a.seed)).num("count", a.count).str("backend", backend_name(b)).str("fingerprint", hex(all));
    for (const auto& [w, h] : per_world) j.str(("world" + std::to_string(w)).c_str(), hex(h));
    j.num("broken", broken).print(std::cout);
  } else {
    std::cout << "fingerprint " << hex(all) << "  (" << a.count << " sequences from seed " << a.seed << ", backend " << backend_name(b)
              << (a.draw.empty() ? "" : ", draw " + a.draw) << (a.profile.empty() ? "" : ", profile " + a.profile) << ")\n";
    for (const auto& [w, h] : per_world) std::cout << "  world " << w << ": " << count[w] << " sequences, " << hex(h) << "\n";
    if (broken) std::cout << "  backend failures: " << broken << "\n";
  }
  return broken ? kInfra : kClean;
}

}  // namespace fsdpsim::cli
