// Ctrl-C, SIGTERM and SIGHUP during the long loops (`check`, `crosscheck`, `hunt`):
// the signal is noted, the sequence in progress finishes (a real or upstream
// run ends within its timeout; ranks in the terminal's process group die with
// Ctrl-C themselves), and the loop stops, prints its partial summary and
// returns 128 + signal, so destructors stop the backends' ranks and remove
// their directories and buffered output reaches the file.
#pragma once

namespace fsdpsim::cli {

// Installs the noting handler for SIGINT, SIGTERM and SIGHUP where it is not
// the current one. Call before each sequence: a backend started since may have
// installed its own (which then chains to this one or is replaced by it).
void arm_interrupts();

// The signal noted since the program started, or 0.
int interrupted();

// 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP: what a shell reports for a
// process killed by the signal.
inline int interrupted_exit(int sig) { return 128 + sig; }

}  // namespace fsdpsim::cli
