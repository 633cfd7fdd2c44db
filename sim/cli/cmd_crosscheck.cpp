// `fsdpsim crosscheck`: generated sequences through the model and the real
// backend, compared op by op; every divergent sequence is written out.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "model/vocab/table.hpp"
#include "sim/cli/commands.hpp"
#include "sim/generator.hpp"

namespace fsdpsim::cli {

int cmd_crosscheck(const Args& a) {
  if (!a.have_seed) throw SourceError("<command line>", {}, "crosscheck expects --seed S");
  GenOptions opt;
  opt.world = a.world > 0 ? a.world : 2;
  std::string out_dir = a.out.empty() ? "crosscheck-" + std::to_string(a.seed) : a.out;
  RealPools pools = pools_of(a);
  auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  int divergent = 0, broken = 0;
  std::map<std::string, int> findings;
  std::cout << "crosscheck seed " << a.seed << ", " << a.count << " sequences, world " << opt.world << ", ranks " << a.ranks << "\n";
  for (int i = 0; i < a.count; ++i) {
    uint64_t seed = a.seed + static_cast<uint64_t>(i);
    Prng rng(seed);
    SeqFile f = generate_seq(rng, opt);
    if (!a.profile.empty()) f.scenario.profile = a.profile;
    BackendRun res = run_backend(f, Backend::Both, pools, false);
    if (res.infra_failure) {
      ++broken;
      std::cout << "sequence " << seed << ": real backend failed: " << res.infra_message << "\n";
    }
    for (const auto& fd : res.findings) ++findings[fd.spec];
    if (!res.divergences.empty()) {
      ++divergent;
      std::filesystem::create_directories(out_dir);
      f.comments = {"divergent in fsdpsim crosscheck (replay: fsdpsim run FILE --backend both)",
                    "fsdpsim random --seed " + std::to_string(seed) + " --count 1 --world " + std::to_string(opt.world)};
      for (size_t k = 0; k < res.divergences.size() && k < 5; ++k) f.comments.push_back("  " + res.divergences[k]);
      std::ofstream(out_dir + "/divergent_" + std::to_string(seed) + ".seq") << print_seq(f);
    }
    auto now = std::chrono::steady_clock::now();
    if (secs(now - last) >= 3.0) {
      last = now;
      std::cout << "crosscheck: " << i + 1 << "/" << a.count << " sequences, " << divergent << " divergent, "
                << static_cast<int>((i + 1) / secs(now - t0)) << " seq/s\n"
                << std::flush;
    }
  }
  double total = secs(std::chrono::steady_clock::now() - t0);
  std::vector<std::vector<std::string>> rows = {{"sequences", std::to_string(a.count)},
                                                {"divergent", std::to_string(divergent) + (divergent ? " (written to " + out_dir + "/)" : "")},
                                                {"real backend failures", std::to_string(broken)},
                                                {"time", std::to_string(total) + " s"},
                                                {"sequences/s", std::to_string(a.count / total)}};
  std::string spec;
  for (const auto& [k, v] : findings) spec += (spec.empty() ? "" : ", ") + k + " " + std::to_string(v);
  rows.push_back({"findings (model)", spec.empty() ? "none" : spec});
  print_aligned(std::cout, rows);
  if (broken) return kInfra;
  return divergent ? kDivergence : kClean;
}

}  // namespace fsdpsim::cli
