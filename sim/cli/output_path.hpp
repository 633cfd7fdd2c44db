// Every path a command will write, checked before any work starts: a bad
// one is exit 3 with one line naming the flag, the path and the reason, never
// exit 4 (or a traceback) after minutes of work. Writability is probed by
// creating and removing a file, so a read-only mount, /proc or /sys is caught
// for root too (root passes access(2) and permission bits).
#pragma once
#include <string>

namespace fsdpsim::cli {

// A directory FLAG names (--out DIR): an existing one must be a writable
// directory; a new one needs its nearest existing ancestor to be a writable
// directory. Creates nothing. A SourceError on "<command line>" otherwise.
void check_output_dir(const std::string& flag, const std::string& dir);

// check_output_dir, then creates the directory (--out DIR of random, crosscheck, findings).
void prepare_out_dir(const std::string& dir);

// A file FLAG names (--results, --junit, --html, --dot, --svg, export's --out):
// an existing one must be writable and not a directory (a FIFO without a
// reader is refused, never waited on); a new one's directory must exist and be
// writable. Creates nothing. A SourceError on "<command line>" otherwise.
void check_output_file(const std::string& flag, const std::string& path);
// Every output flag of a command (its row's flags that write, command_table.hpp: --out,
// --results, --junit, --html, --dot, --svg) and the default directories they write (hunt:
// out/hunt; findings: docs/findings) are checked as above before the command runs.

}  // namespace fsdpsim::cli
