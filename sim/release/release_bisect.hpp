// Bisection over an ordered list of releases (`fsdpsim versions --bisect`):
// the first release where a root cause reproduces and the first after it
// where it is gone, probing a logarithmic number of releases. It assumes the
// root cause appears once and is fixed once (never reproduces, then
// reproduces, then never again); a release that cannot run is skipped outward
// and left as an unknown between the two releases that bound the answer.
// The newest release is probed first, then the oldest when the newest does not
// reproduce; when neither end does, a breadth-first sweep of midpoints (at most
// 2 * ceil(log2(n + 1)) probes) looks for a reproducing release strictly inside.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace fsdpsim {

enum class ProbeVerdict { Reproduces, DoesNotReproduce, CannotRun };

// Also the --releases list order: "0.9.0" < "0.10.0" < "0.18.0rc1" < "0.18.0".
int compare_release_versions(const std::string& a, const std::string& b);

struct BisectAnswer {
  static constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> probed;               // release indexes, in probe order
  std::vector<ProbeVerdict> verdicts;     // one per probed release
  bool found = false;                       // some probed release reproduces (false: none of the probes did)
  size_t first_reproducing = kNone;         // the oldest release known to reproduce
  size_t clean_before = kNone;              // the newest older one that ran and did not reproduce (kNone: none in range)
  size_t last_reproducing = kNone;          // the newest release known to reproduce
  size_t fixed_in = kNone;                  // the oldest newer one that ran and did not reproduce (kNone: not fixed in range)
  std::vector<size_t> unknown_before;       // cannot run, between clean_before and first_reproducing
  std::vector<size_t> unknown_after;        // cannot run, between last_reproducing and fixed_in
};

// `probe(i)` runs release i of `count` (oldest first); each release is probed at most once.
BisectAnswer bisect_releases(size_t count, const std::function<ProbeVerdict(size_t)>& probe);

}  // namespace fsdpsim
