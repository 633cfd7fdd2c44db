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

// print_aligned within `width` columns (0: no limit): the widest columns from `keep` on are
// narrowed, one column at a time, down to 12, and a longer cell wraps at its blanks onto lines
// of its own (a word still too long breaks after a '/', ',', ':' or '='). Nothing is cut.
// True when a row was wrapped.
bool print_fitted(std::ostream& os, const std::vector<std::vector<std::string>>& rows, size_t width, size_t keep);

}  // namespace fsdpsim
