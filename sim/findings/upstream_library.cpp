#include "sim/findings/upstream_library.hpp"

#include <array>

namespace fsdpsim {
namespace {

// The pins of real_backend/upstream/requirements.txt (a unit test compares them with the file).
constexpr std::array<UpstreamPin, 4> kPins = {{
    {"PEFT", "peft", "0.21.2", "v0.21.2", "huggingface/peft", "src/peft"},
    {"PyTorch", "torch", "2.13.0", "v2.13.0", "pytorch/pytorch", "torch"},
    {"accelerate", "accelerate", "1.15.0", "v1.15.0", "huggingface/accelerate", "src/accelerate"},
    {"transformers", "transformers", "5.24.0", "v5.24.0", "huggingface/transformers", "src/transformers"},
}};

}  // namespace

const UpstreamPin& upstream_pin(UpstreamLibrary lib) { return kPins[static_cast<size_t>(lib)]; }

bool parse_upstream_library(const std::string& package, UpstreamLibrary* out) {
  for (size_t i = 0; i < kPins.size(); ++i)
    if (package == kPins[i].package) {
      *out = static_cast<UpstreamLibrary>(i);
      return true;
    }
  return false;
}

std::string pinned_link(UpstreamLibrary lib, const std::string& file) {
  const UpstreamPin& p = upstream_pin(lib);
  const std::string pkg = std::string(p.package) + "/";
  const std::string rest = file.compare(0, pkg.size(), pkg) == 0 ? file.substr(pkg.size()) : file;
  return std::string("https://github.com/") + p.repo + "/blob/" + p.tag + "/" + p.src + "/" + rest;
}

}  // namespace fsdpsim
