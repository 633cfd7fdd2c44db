// The upstream libraries a finding is filed against, at the releases this
// project pins (real_backend/upstream/requirements.txt, the .venv): the
// owner of a report, the home of a source line a verdict rests on, and the
// link to that file at the pinned tag.
#pragma once
#include <string>

namespace fsdpsim {

enum class UpstreamLibrary { Peft, Torch, Accelerate, Transformers };

struct UpstreamPin {
  const char* name;     // "PEFT"
  const char* package;  // "peft": the installed package directory
  const char* version;  // "0.21.2", as pinned
  const char* tag;      // "v0.21.2": the git tag of that release
  const char* repo;     // "huggingface/peft"
  const char* src;      // the package's directory in its repository: "src/peft", "torch"
};

const UpstreamPin& upstream_pin(UpstreamLibrary lib);
// "peft" -> Peft; false for another word.
bool parse_upstream_library(const std::string& package, UpstreamLibrary* out);
// The file (relative to the installed package, "peft/utils/other.py") at the pinned tag:
// https://github.com/huggingface/peft/blob/v0.21.2/src/peft/utils/other.py
std::string pinned_link(UpstreamLibrary lib, const std::string& file);

}  // namespace fsdpsim
