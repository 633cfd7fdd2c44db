// lifecycle_input_test SEED_CORPUS: the mutator's primed decode cache
// (remember_decoded) must hand the target the file decode would have made of
// the same text. From every seed input, chains of 40 mutations; each text is
// decoded afresh and compared with what mutate handed over, by their `.seq`
// text and by a run of both. Exit 1 on the first difference.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/lifecycle_input.hpp"
#include "sim/core/generator.hpp"
#include "model/vocab/observation.hpp"
#include "sim/core/simulator.hpp"

using namespace fsdpsim;

namespace {

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

}  // namespace

// The libraries are built for libFuzzer's edge counters; this program runs without its
// runtime, so the counters' registration hooks are no-ops here.
extern "C" __attribute__((weak)) void __sanitizer_cov_8bit_counters_init(uint8_t*, uint8_t*) {}
extern "C" __attribute__((weak)) void __sanitizer_cov_pcs_init(const uintptr_t*, const uintptr_t*) {}


int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: lifecycle_input_test SEED_CORPUS\n");
    return 3;
  }
  std::vector<std::filesystem::path> inputs;
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) inputs.push_back(e.path());
  std::sort(inputs.begin(), inputs.end());
  int mutations = 0, primed = 0, runs = 0;
  DrawsReached reached;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::ifstream in(inputs[i], std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SeqFile cur = fuzz::decode(bytes(text), text.size());
    for (uint32_t k = 0; k < 40; ++k) {
      SeqFile handed;
      const std::string out = fuzz::mutate(cur, static_cast<uint32_t>(i * 7919 + k), &handed);
      ++mutations;
      const SeqFile fresh = fuzz::decode(bytes(out), out.size());
      primed += fuzz::remember_decoded(out, handed);
      const SeqFile& cached = fuzz::decode_cached(bytes(out), out.size());
      if (print_seq(cached) != print_seq(fresh)) {
        std::fprintf(stderr, "FAIL: from %s, mutation %u: the primed file differs from decode's\n--- primed\n%s--- decode\n%s",
                     inputs[i].filename().c_str(), k, print_seq(cached).c_str(), print_seq(fresh).c_str());
        return 1;
      }
      if (k % 8 == 0) {  // the same observations and findings from both
        RunResult a = run_checked_sampled(cached, 1), b = run_checked_sampled(fresh, 1);
        if (!(a.observations == b.observations) || !(a.findings == b.findings)) {
          std::fprintf(stderr, "FAIL: from %s, mutation %u: the primed file runs differently\n%s", inputs[i].filename().c_str(), k,
                       print_seq(fresh).c_str());
          return 1;
        }
        ++runs;
      }
      if (!fresh.ops.empty()) reached.count(fresh);  // a file to replay
      cur = fresh;
    }
  }
  std::printf("lifecycle_input_test: %d mutations from %zu inputs, %d primed (%.1f%%), %d run on both\n", mutations,
              inputs.size(), primed, 100.0 * primed / std::max(mutations, 1), runs);
  std::printf("reached: grouped adjacent %d, apart %d, reversed %d, with a raising member %d; world 3-4 with a padding-only rank %d\n",
              reached.adjacent, reached.apart, reached.reversed, reached.raising, reached.padded);
  if (!reached.every_grouping_draw()) {
    std::fprintf(stderr, "FAIL: the mutations never reached one of the scenarios counted above\n");
    return 1;
  }
  // Nearly every mutation must be primed, or the test compares almost nothing.
  if (primed * 10 < mutations * 9) {
    std::fprintf(stderr, "FAIL: only %d of %d mutations primed\n", primed, mutations);
    return 1;
  }
  return 0;
}
