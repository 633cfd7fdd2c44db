// `fsdpsim hunt --html`: the catalogue as one self-contained page: counts per
// verdict, a filter (text and verdicts, a few lines of inline script), then
// one section per root cause (its verdict, mechanism, fix) holding a row per
// class and each class's timeline (sim/report/report_html.hpp), drawn from the
// confirmations' runs of its minimal sequence. Links are relative to `page`,
// the path the page is written to.
#pragma once
#include <string>

#include "sim/findings/hunt.hpp"

namespace fsdpsim {

std::string hunt_html(const HuntReport& r, const std::string& page);

}  // namespace fsdpsim
