// `check FILE --near K`: the sequences within K edits of a recorded one, built from the file's own
// ops (insert one of them anywhere, delete one, swap two neighbours, run one on a single rank),
// run on the model and gathered by finding class (spec and root cause, root_cause.hpp). Each class
// keeps its shortest edit (the first found, breadth first, in a fixed order): that sequence is the
// one a caller confirms on the other backends. Torch-free; the command is sim/cli/cmd_check_near.cpp.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "model/spec/spec_checks.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim {

// One edit. Ops are named by `origin`: their index among the recorded file's ops (an inserted op:
// the recorded op it copies, `inserted` set), so an edit reads back to the script line of that op.
struct NearEdit {
  enum class Kind { Insert, Delete, Swap, Diverge };
  Kind kind = Kind::Insert;
  int op = -1;                 // Insert: the op copied; Delete, Diverge: the op; Swap: the first of the two
  bool op_inserted = false;    // the op (Delete, Diverge, Swap's first) was inserted by an earlier edit
  int other = -1;              // Insert: the op it goes after (-1: first); Swap: the second op
  bool other_inserted = false;
  int rank = -1;               // Diverge: the rank it is left on
  int position = 0;            // 0-based index of the (first) op the edit touches in the edited sequence
};

struct NearClass {
  std::string id;        // "S3 flag-on-copy/set_adapter": spec and root cause
  std::string spec;      // "S3"
  std::string root_cause;
  bool now = false;      // the recorded file hits it
  int distance = 0;      // edits of its representative (0: the recorded file)
  std::vector<NearEdit> edits;  // the representative's
  SeqFile file;                 // the representative sequence (no expects)
  std::vector<int> origins;     // its ops' origins (an inserted op's: the op it copies)
  Finding finding;              // the representative's first finding of the class
  int reached = 0;              // sequences that hit it (the recorded one included)
};

struct NearResult {
  std::vector<NearClass> classes;  // the recorded file's first (first finding's order), then by distance and edit order
  int64_t sequences = 0;           // distinct edited sequences (the recorded one not counted)
  int64_t refused = 0;             // of those, the ones the vocabulary's rules refuse (validate)
  int64_t clean = 0;               // of those, the ones with no finding
  // The shortest edit to one with no finding, a removal before a swap, an addition, one rank's op
  // (empty: none has none).
  std::vector<NearEdit> first_clean;
  double seconds = 0;
};

// The neighbourhood of `recorded` within `k` edits (1 or 2). `progress(done, total)` after each
// batch of model runs.
NearResult explore_near(const SeqFile& recorded, int k, const std::function<void(int64_t, int64_t)>& progress = {});

// "insert `set_adapter task_b` (op 8) after `eval` (op 6)": `where(origin)` names an op's place
// ("examples/sft.py:51"), `text(origin)` its op text.
std::string near_edit_text(const NearEdit& e, const std::function<std::string(int)>& text,
                           const std::function<std::string(int)>& where);

}  // namespace fsdpsim
