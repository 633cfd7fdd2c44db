// The observer: the ranks' reports in, the vocabulary's Observations out.
#pragma once
#include <vector>

#include "model/vocab/observation.hpp"
#include "real_backend/layout.hpp"
#include "real_backend/rank_report.hpp"

namespace fsdpsim::real {

// per_rank[r]: rank r's reports in the order it ran its ops. Observations come
// out in (step, rank) order.
std::vector<Observation> observe(const Layout& layout, uint64_t seed, const std::vector<std::vector<RankReport>>& per_rank);

}  // namespace fsdpsim::real
