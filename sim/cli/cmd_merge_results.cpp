// `fsdpsim merge-results FILE...`: the --results files of `crosscheck --shard
// I/N` jobs merged into what one unsharded crosscheck writes; prints the
// summary, and with --results OUT writes the merged file.
#include <fstream>
#include <iostream>
#include <sstream>

#include "model/vocab/table.hpp"
#include "model/vocab/input_file.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/core/crosscheck_results.hpp"

namespace fsdpsim::cli {

int cmd_merge_results(const Args& a, const MergeResultsFlags& own) {
  if (a.positional.empty()) throw SourceError("<command line>", {}, "merge-results expects at least one results file");
  std::vector<CrosscheckResults> parts;
  for (const auto& file : a.positional) {
    parts.push_back(read_results_json(read_input_file(file, kJsonInput), file));
  }
  CrosscheckResults m = merge_results(parts, a.positional);
  auto seeds = [](const std::vector<uint64_t>& v) {
    std::string s = std::to_string(v.size());
    for (size_t i = 0; i < v.size() && i < 20; ++i) s += (i ? ", " : " (seeds ") + std::to_string(v[i]);
    if (v.size() > 20) s += ", ...";
    return v.empty() ? s : s + ")";
  };
  if (a.json) {
    JsonRecord("merged_results")
        .num("seed", static_cast<int64_t>(m.seed)).num("count", m.count).num("world", m.world).str("backends", m.backends)
        .str("profile", m.profile).num("first", m.first).num("end", m.end).seeds("divergent", m.divergent).seeds("broken", m.broken)
        .counts("findings", m.findings).strs("files", a.positional).print(std::cout);
    if (!own.results.empty()) write_results_file(own.results, m);
    if (!m.broken.empty()) return kInfra;
    return m.divergent.empty() ? kClean : kDivergence;
  }
  std::string spec;
  for (const auto& [k, v] : m.findings) spec += (spec.empty() ? "" : ", ") + k + " " + std::to_string(v);
  std::cout << "crosscheck seed " << m.seed << ", " << m.count << " sequences, world " << m.world << ", backends " << m.backends
            << (m.profile.empty() ? "" : ", profile " + m.profile) << ": " << parts.size() << " results files\n";
  print_aligned(std::cout, {{"sequences", std::to_string(m.end - m.first) + (m.end - m.first == m.count ? "" : " of " + std::to_string(m.count) + " (" + std::to_string(m.first) + ".." + std::to_string(m.end - 1) + ")")},
                            {"divergent", seeds(m.divergent)},
                            {"backend failures", seeds(m.broken)},
                            {"findings (model)", spec.empty() ? "none" : spec}});
  if (!own.results.empty()) write_results_file(own.results, m);
  if (!m.broken.empty()) return kInfra;
  return m.divergent.empty() ? kClean : kDivergence;
}

}  // namespace fsdpsim::cli
