// Aligned text tables: every column padded to its widest cell.
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace fsdpsim {

// Rows of cells, each column as wide as its widest cell, two spaces between columns, no
// trailing spaces. (fmt is kept to the vocabulary's own sources: a translation unit that also
// sees torch's headers would find the fmt copy the wheel ships.)
void print_aligned(std::ostream& os, const std::vector<std::vector<std::string>>& rows);

}  // namespace fsdpsim
