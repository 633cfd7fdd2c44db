// lifecycle_fuzzer: decoded scenarios and op sequences through the N-rank
// simulator and the spec. Under `patched` (ops with known fixes only) a
// finding aborts: a crash artifact, printable as `.seq`. Under `upstream`
// findings are recorded by signature; with FSDPSIM_FINDINGS_DIR set each new
// signature's input is written there as a `.seq` file.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>

#include "fuzz/lifecycle_input.hpp"
#include "sim/core/shrink.hpp"
#include "sim/core/simulator.hpp"

using namespace fsdpsim;

namespace {

const auto kStart = std::chrono::steady_clock::now();

// The seeds' findings, recognised for the time-to-finding figures: seed 000 is
// an S1 at a training step after set_adapter on a merged model (a merge, then a
// PeftModel.set_adapter with no unmerge between); seed 004 an S4 KeyError from
// save_optimizer after an eval.
const char* seed_of(const SeqFile& f, const std::string& full_sig, int step) {
  // spec:op:status: the symptom's direction finding_signature appends (":missing") does not matter here.
  const size_t a = full_sig.find(':'), b = a == std::string::npos ? a : full_sig.find(':', a + 1);
  const size_t c = b == std::string::npos ? b : full_sig.find(':', b + 1);
  const std::string sig = full_sig.substr(0, c);
  if (sig == "S1:train_step:no_grad_fn") {
    bool merged = false, switched = false;
    for (int i = 0; i + 1 < step; ++i) {
      const Op& op = f.ops[i];
      if (op.kind == OpKind::Merge) merged = true;
      if (op.kind == OpKind::Unmerge) merged = false;
      if (op.kind == OpKind::SetAdapter && !op.list_form && merged) switched = true;
    }
    if (switched) return "000";
  }
  if (sig == "S4:save_optimizer:key_error")
    for (int i = 0; i + 1 < step; ++i)
      if (f.ops[i].kind == OpKind::Eval) return "004";
  // broadcasts at prepare: of other bytes a mismatch, of a smaller bf16 root a part-filled copy
  if ((sig == "S5:mismatch" || sig == "S5:cross_paired") && f.ops[step - 1].kind == OpKind::Prepare) return "001";
  if (sig.rfind("S7:", 0) == 0) return "002";                                          // sharded get_delta_weight
  if (sig == "S6:save_adapters:ok") return "003";                                      // a shard-only save
  return nullptr;
}

std::string file_name(std::string sig) {
  for (char& c : sig)
    if (c == ':' || c == '/') c = '_';
  return sig + ".seq";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const SeqFile& f = fuzz::decode_cached(data, size);
  if (f.ops.empty()) return 0;
  // S8 on one input in 16: the model is deterministic, doubling every run would halve the speed.
  // Most mutations leave the scenario as it was: its topology is compiled once.
  RunResult r = run_checked_sampled(f, compile_topology_reused(f), 16);
  // The next input's observations are written over these (sim/core/simulator.hpp).
  struct Recycle {
    RunResult& r;
    ~Recycle() { recycle(std::move(r)); }
  } recycle_at_return{r};
  if (r.findings.empty()) return 0;
  if (f.scenario.profile == "patched") {
    std::cerr << "spec finding under patched:\n" << r.findings[0].text << "\n" << print_seq(f);
    std::abort();
  }
  static std::set<std::string> seen;
  for (const auto& fd : r.findings) {
    std::string sig = finding_signature(f, r, fd);
    if (const char* seed = seed_of(f, sig, fd.step); seed && seen.insert(std::string("seed ") + seed).second) {
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - kStart).count();
      std::fprintf(stderr, "SEED %s REACHED after %.2f s (%s)\n", seed, t, sig.c_str());
    }
    if (!seen.insert(sig).second) continue;
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - kStart).count();
    std::fprintf(stderr, "NEW FINDING %s after %.2f s: %s\n", sig.c_str(), t, fd.text.c_str());
    if (const char* dir = std::getenv("FSDPSIM_FINDINGS_DIR")) {
      SeqFile out = f;
      out.comments = {"lifecycle_fuzzer finding " + sig};
      std::ofstream(std::string(dir) + "/" + file_name(sig)) << print_seq(out);
    }
  }
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  SeqFile decoded;
  std::string text = fuzz::mutate(fuzz::decode_cached(data, size), seed, &decoded);
  if (text.size() > max_size) return size;
  std::copy(text.begin(), text.end(), data);
  fuzz::remember_decoded(text, std::move(decoded));  // the target runs this text next
  return text.size();
}
