// `fsdpsim hunt --html`: the catalogue as one self-contained page, a row per
// class linking to that class's timeline (sim/report_html.hpp) further down
// the same page, drawn from the confirmations' runs of its minimal sequence.
#pragma once
#include <string>

#include "sim/hunt.hpp"

namespace fsdpsim {

std::string hunt_html(const HuntReport& r);

}  // namespace fsdpsim
