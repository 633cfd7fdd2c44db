// The results of `fsdpsim crosscheck` as one JSON object, so that a seed range
// split over N jobs (`--shard I/N`) merges back (`fsdpsim merge-results`) into
// exactly what one job over the whole range writes. Nothing in it depends on
// timing or on the machine: only what was run and what was found.
#pragma once
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace fsdpsim {

struct CrosscheckResults {
  // What was asked for: sequence i of the run is generated from seed + i, 0 <= i < count.
  uint64_t seed = 0;
  int64_t count = 0;
  int world = 2;
  std::string backends;  // "model,real"
  std::string profile;   // "" = each generated sequence's own
  std::string draw;      // --draw as written ("" = none; a file without the field reads as "")
  // The sequences these results cover: indexes [first, end).
  int64_t first = 0;
  int64_t end = 0;
  std::vector<uint64_t> divergent;        // seeds of the divergent sequences, ascending
  std::vector<uint64_t> broken;           // seeds whose run failed (exit 4)
  std::map<std::string, int64_t> findings;  // first backend's findings by spec

  bool operator==(const CrosscheckResults& o) const;
};

// Block I of N of count sequences: [count*I/N, count*(I+1)/N). The blocks of
// 0..N-1 are disjoint, in order, and cover [0, count).
std::pair<int64_t, int64_t> shard_range(int64_t count, int index, int shards);

// One line of JSON and a newline; fields in a fixed order, so equal results
// print byte for byte the same.
void write_results_json(std::ostream& os, const CrosscheckResults& r);

// Writes the results to path (--results); throws SourceError when it cannot.
void write_results_file(const std::string& path, const CrosscheckResults& r);

// Reads what write_results_json wrote. Throws SourceError naming
// file:line:column (or file: field) and what was expected.
CrosscheckResults read_results_json(const std::string& text, const std::string& file);

// Merges results of the same crosscheck (seed, count, world, backends,
// profile, draw) whose ranges are disjoint and leave no gap; throws SourceError
// naming the file that does not fit. files[i] names parts[i].
CrosscheckResults merge_results(const std::vector<CrosscheckResults>& parts, const std::vector<std::string>& files);

// How the upstream backend's `prepare` ran over a crosscheck (prepare.py::run): through
// accelerate's Accelerator.prepare, or the direct path for a reason, counted by reason key.
// Timing-free, but not part of the results file: only an upstream run knows it.
struct PrepareTally {
  int64_t upstream_runs = 0;  // sequences the upstream backend completed
  int64_t accelerate = 0;     // of those, prepared by Accelerator.prepare
  // no rank reported a path: none reached its prepare, or gloo aborted every rank (pool.py::died)
  int64_t unprepared = 0;
  int64_t mixed = 0;          // the ranks' prepare took different paths
  std::map<std::string, int64_t> fallbacks;  // reason key -> sequences prepared by the direct path

  // One completed upstream run's UpstreamResult::prepared_by ("accelerate", a reason key, "mixed", "").
  void add(const std::string& prepared_by);
  // "N of M (P %)" for the summary table; "no upstream run" when M is 0.
  std::string accelerate_text() const;
  // The summary table's rows: the accelerate share, then one row per fallback reason, most first.
  std::vector<std::vector<std::string>> rows() const;
};

}  // namespace fsdpsim
