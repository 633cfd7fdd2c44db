// `fsdpsim bench --stability [--seconds T]`: do hunts with other seeds name the
// same root causes? Five model-only hunts (seeds 1..5, T s each, default 10);
// the union of their root-cause ids over the largest single hunt's count, and
// the same ratio for class ids (which include the prefix ops, so they rename).
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <set>

#include "sim/cli/commands.hpp"
#include "sim/cli/json_record.hpp"
#include "sim/findings/hunt.hpp"
#include "sim/findings/hunt_scenarios.hpp"

namespace fsdpsim::cli {

int cmd_bench_stability(const Args& a) {
  const double seconds = a.have_seconds ? a.seconds : 10.0;
  std::set<std::string> all_rc, all_classes;
  size_t max_rc = 0, max_classes = 0;
  RealPools pools = pools_of(a);
  if (!a.json) std::cout << "hunt stability: seeds 1..5, " << seconds << " s each, model only\n";
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    HuntOptions o;
    o.seconds = seconds;
    o.seed = seed;
    o.scenarios = hunt_scenarios();
    o.explore = hunt_explore_hook();
    o.confirm_real = o.confirm_upstream = false;
    HuntReport r = hunt(o, pools);
    std::set<std::string> rc, classes;
    for (const auto& c : r.classes) {
      rc.insert(c.t.root_cause.id);
      classes.insert(c.stem);
    }
    all_rc.insert(rc.begin(), rc.end());
    all_classes.insert(classes.begin(), classes.end());
    max_rc = std::max(max_rc, rc.size());
    max_classes = std::max(max_classes, classes.size());
    if (!a.json) std::cout << "  seed " << seed << ": " << rc.size() << " root causes, " << classes.size() << " classes\n";
  }
  const double rc_ratio = static_cast<double>(all_rc.size()) / std::max<size_t>(max_rc, 1);
  const double class_ratio = static_cast<double>(all_classes.size()) / std::max<size_t>(max_classes, 1);
  if (a.json) {
    JsonRecord("bench_figure").str("name", "hunt_root_cause_stability").real("value", rc_ratio).str("unit", "union/max").print(std::cout);
    JsonRecord("bench_figure").str("name", "hunt_class_stability").real("value", class_ratio).str("unit", "union/max").print(std::cout);
    return kClean;
  }
  std::cout << std::fixed << std::setprecision(2) << "root causes: union " << all_rc.size() << " / largest hunt " << max_rc << " = "
            << rc_ratio << "  (target <= 1.25)\n"
            << "class ids:   union " << all_classes.size() << " / largest hunt " << max_classes << " = " << class_ratio << "\n";
  std::cout << "root causes named by any of the five:";
  for (const auto& id : all_rc) std::cout << " " << id;
  std::cout << "\n";
  return kClean;
}

}  // namespace fsdpsim::cli
