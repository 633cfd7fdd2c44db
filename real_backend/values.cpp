#include "real_backend/values.hpp"

#include <cmath>
#include <cstring>

namespace fsdpsim::real {
namespace {

// splitmix64: a tiny generator that gives the same floats on every platform.
struct Mix {
  uint64_t s;
  float next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(static_cast<int64_t>(z >> 40) - (1 << 23)) / static_cast<float>(1 << 23);  // [-1, 1)
  }
};

// A float rounded to bf16 (round to nearest even), as a bf16 base stores its loaded weight.
float bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &u, sizeof u);
  return x;
}

}  // namespace

std::vector<float> initial_values(const Layout& l, uint64_t seed, int param, bool loaded) {
  const ParamSpec& p = l.params[param];
  // A modules_to_save copy is a deep copy of original_module made at get_peft_model, before
  // anything changed it (peft/utils/other.py::ModulesToSaveWrapper.update).
  if (p.role == Role::SavedWeight) return initial_values(l, seed, l.layers[p.layer].weight, false);
  if (p.role == Role::SavedBias) return initial_values(l, seed, l.layers[p.layer].bias, false);
  if (p.role == Role::LoraM) return dora_magnitude(l, seed, param, loaded);
  std::vector<float> v(static_cast<size_t>(p.rows * p.cols), 0.0f);
  // LoRA's default init leaves B at zero (peft/tuners/lora/layer.py::LoraLayer.reset_lora_parameters);
  // a loaded adapter's checkpoint is its own fresh init, saved, so its B is zero too.
  bool zero = p.role == Role::LoraB && l.adapters[p.adapter].init == LoraInit::Zero;
  if (zero) return v;
  Mix m{seed * 1000003ull + static_cast<uint64_t>(param) * 7919ull + (loaded ? 0x5eedull : 0ull)};
  float scale = p.role == Role::Bias ? 0.1f : 0.5f;
  for (auto& x : v) x = scale * m.next();
  return v;
}

// peft/tuners/lora/dora.py::DoraLinearLayer.update_layer: the magnitude starts as get_weight_norm of the
// base weight plus scaling * (B @ A), the L2 norm of each output row, so a merge before any step is
// W + delta. The base is read as stored (a bf16 base's rounded values), the sum taken in fp32.
std::vector<float> dora_magnitude(const Layout& l, uint64_t seed, int param, bool loaded) {
  const ParamSpec& p = l.params[param];
  const LayerSpec& ls = l.layers[p.layer];
  const std::vector<float> w = initial_values(l, seed, ls.weight, false);
  const std::vector<float> a = initial_values(l, seed, ls.lora_a[p.adapter], loaded);
  const std::vector<float> b = initial_values(l, seed, ls.lora_b[p.adapter], loaded);
  const int64_t out = ls.out, in = ls.in, r = l.params[ls.lora_a[p.adapter]].rows;
  const float scale = lora_scaling(l, p.adapter);
  const bool bf16 = l.dtype == DType::BF16;
  std::vector<float> v(static_cast<size_t>(out), 0.0f);
  for (int64_t i = 0; i < out; ++i) {
    double sum = 0.0;
    for (int64_t j = 0; j < in; ++j) {
      float wij = w[static_cast<size_t>(i * in + j)];
      if (bf16) wij = bf16_round(wij);
      float d = 0.0f;
      for (int64_t k = 0; k < r; ++k) d += b[static_cast<size_t>(i * r + k)] * a[static_cast<size_t>(k * in + j)];
      const float x = wij + scale * d;
      sum += static_cast<double>(x) * x;
    }
    v[static_cast<size_t>(i)] = static_cast<float>(std::sqrt(sum));
  }
  return v;
}

std::vector<float> rank_input(const Layout& l, uint64_t seed, int rank) {
  Mix m{seed * 31ull + 17ull + static_cast<uint64_t>(rank) * 1000033ull};
  // Under a MixedPrecisionPolicy upstream's batch (session.py BATCH = 4): bmm's dtype check depends on
  // batch * in * out; without one the backend's 3 rows, which its fingerprints were taken with.
  const int64_t rows = l.mixed_precision ? 4 : 3;
  std::vector<float> v(static_cast<size_t>(rows * l.layers.front().in));
  for (auto& x : v) x = m.next();
  return v;
}

float lora_scaling(const Layout& l, int adapter) {
  return static_cast<float>(l.adapters[adapter].alpha) / static_cast<float>(l.adapters[adapter].r);
}

}  // namespace fsdpsim::real
