// Checked output: every file the command line writes, and standard output
// itself, is written and flushed with its result checked, so a full disk or
// a bad path is exit 4 naming the path and the reason, never "wrote N".
#pragma once
#include <stdexcept>
#include <string>

namespace fsdpsim::cli {

// A failed write or flush: main() prints "fsdpsim: cannot write PATH: REASON"
// and exits 4.
class WriteError : public std::runtime_error {
 public:
  WriteError(const std::string& path, const std::string& reason)
      : std::runtime_error("cannot write " + path + ": " + reason) {}
};

// --out DIR, before the run starts: creates it and checks it is a writable
// directory; a SourceError on "<command line>" (exit 3) otherwise.
void prepare_out_dir(const std::string& dir);

// A file FLAG names (--results, --junit, --html), before the run starts: an
// existing one must be a writable file, a new one's directory must exist and
// be writable; a SourceError on "<command line>" (exit 3) otherwise. Creates nothing.
void check_output_file(const std::string& flag, const std::string& path);

// Writes `text` to `path` (replacing it); throws WriteError.
void write_file(const std::string& path, const std::string& text);

// After a write to std::cout: throws WriteError("standard output", strerror(err))
// if it failed (err: errno right after the write), so a loop stops at once.
void check_stdout(int err);

// Flushes std::cout (and stdout under it); throws WriteError("standard output", ...).
void flush_stdout();

}  // namespace fsdpsim::cli
