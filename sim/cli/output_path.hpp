// Every path a command will write, checked before any work starts: a bad
// one is exit 3 with one line naming the flag, the path and the reason, never
// exit 4 (or a traceback) after minutes of work. Writability is probed by
// creating and removing a file, so a read-only mount, /proc or /sys is caught
// for root too (root passes access(2) and permission bits).
#pragma once
#include <string>

namespace fsdpsim::cli {

struct Args;

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

// Every output flag `command` takes, and the default directories it writes
// (hunt: out/hunt; findings: docs/findings), checked as above before the command runs.
void check_output_paths(const std::string& command, const Args& a);

}  // namespace fsdpsim::cli
