// Checked output: every file the command line writes, and standard output
// itself, is written and flushed with its result checked, so a full disk or
// a bad path is exit 4 naming the path and the reason, never "wrote N".
#pragma once
#include <stdexcept>
#include <string>

#include "sim/cli/output_path.hpp"

namespace fsdpsim::cli {

// A failed write or flush: main() prints "fsdpsim: cannot write PATH: REASON"
// and exits 4.
class WriteError : public std::runtime_error {
 public:
  WriteError(const std::string& path, const std::string& reason)
      : std::runtime_error("cannot write " + path + ": " + reason) {}
};

// Writes `text` to `path` (replacing it); throws WriteError.
void write_file(const std::string& path, const std::string& text);

// After a write to std::cout: throws WriteError("standard output", strerror(err))
// if it failed (err: errno right after the write), so a loop stops at once.
void check_stdout(int err);

// Flushes std::cout (and stdout under it); throws WriteError("standard output", ...).
void flush_stdout();

}  // namespace fsdpsim::cli
