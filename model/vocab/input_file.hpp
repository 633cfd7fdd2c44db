// The one reader of user-supplied files (.seq files, results and verdict
// JSON, corpus directories' files, matrix and fake-release lists). A FIFO, a
// device, a socket or a directory is refused from its type before any open
// for reading (a FIFO never blocks, /dev/zero is never read), and a file or a
// line over its kind's stated limit is refused at the `file:line:column` where
// the limit is crossed, so no input can hang a command or grow it without bound.
#pragma once
#include <cstdint>
#include <string>

namespace fsdpsim {

struct InputLimits {
  const char* what;  // "a .seq file": the messages' noun
  int64_t max_bytes;
  int64_t max_line;  // bytes in one line, its newline excluded
};

// A .seq file: 4 MiB and 64 KiB lines (the largest file the project keeps is
// 20 kB; 4 MiB is ~200 000 ops).
constexpr InputLimits kSeqInput{"a .seq file", int64_t{4} << 20, int64_t{64} << 10};
// JSON written by fsdpsim itself (crosscheck --results, versions --json, a
// hunt's summary): one record may be one long line.
constexpr InputLimits kJsonInput{"a JSON input", int64_t{64} << 20, int64_t{64} << 20};
// Other text: line lists (the release matrix, FSDPSIM_FAKE_RELEASES, a hunt's
// scripts.tsv and manifest) and the pages `findings --check` compares.
constexpr InputLimits kTextInput{"a text file", int64_t{16} << 20, int64_t{1} << 20};

// Throws SourceError(path) unless `path` names a regular file (following
// symbolic links): "not a regular file (a FIFO)", "is a directory", "cannot
// open file: <reason>". Opens nothing.
void check_input_file(const std::string& path, const InputLimits& lim);

// The whole file, checked as above, opened without blocking, read at most
// max_bytes + 1 bytes. Throws SourceError: the type or open errors above, a
// read error, "PATH:L:C: ... larger than the N limit", "PATH:L:C: a line
// longer than the N limit".
std::string read_input_file(const std::string& path, const InputLimits& lim);

// "4 MiB", "64 KiB", "100 bytes".
std::string limit_text(int64_t bytes);

}  // namespace fsdpsim
