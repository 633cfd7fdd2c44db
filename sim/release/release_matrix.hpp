// Release sets ("peft==0.17.1,accelerate==1.6.0") the upstream backend can run
// on, and the named matrices of them in real_backend/upstream/matrix.txt
// (`fsdpsim versions`, `--upstream SET`). The environments themselves are made
// by real_backend/upstream/fsdpsim_upstream/release_env.py.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "model/vocab/source_error.hpp"

namespace fsdpsim {

struct ReleaseSet {
  std::map<std::string, std::string> pins;  // "peft" -> "0.17.1"; peft always there unless `path` is set
  std::string path;  // peft=PATH: a local PEFT checkout or wheel (absolute), the other packages .venv's
  // The normalized text: peft first, then the others by name ("peft==0.15.2,accelerate==1.6.0,..."), or "peft=PATH".
  std::string text() const;
  // "peft 0.17.1" or "peft PATH" for tables.
  std::string peft() const;
};

// The packages a set may pin: the ones the upstream backend imports.
extern const char* const kReleasePackages[3];  // peft, accelerate, transformers

// Throws SourceError(file, pos + the offending part's column) on a malformed set,
// or on a peft=PATH whose PATH does not exist.
ReleaseSet parse_release_set(const std::string& text, const std::string& file = "<command line>", SourcePos pos = {1, 1});

struct ReleaseMatrix {
  std::string name;
  std::vector<ReleaseSet> sets;
};

// The file's matrices in file order: "matrix NAME" lines, each followed by one
// set a line; '#' starts a comment. Throws SourceError (file:line:col).
std::vector<ReleaseMatrix> parse_matrix_file(const std::string& text, const std::string& file);
// The named matrix; SourceError("<command line>") naming the file's matrices when absent.
const ReleaseMatrix& find_matrix(const std::vector<ReleaseMatrix>& all, const std::string& name, const std::string& file);

}  // namespace fsdpsim
