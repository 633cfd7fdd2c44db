// Turns what the parent knows about each rank of a broken run into one
// report: which ranks died (exit status or signal), which were too slow (which
// rank, where, for how long) and every rank's own last error, causes first.
// A rank whose collective timed out because a peer stopped is not the cause:
// the peer is. Torch-free.
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "real_backend/rank_progress.hpp"

namespace fsdpsim::real {

struct RankState {
  bool answered = false;           // sent its reports
  std::string error;               // its own last error, as it sent it
  std::optional<int> wait_status;  // it has exited (waitpid status)
  bool stopped = false;            // SIGSTOP, a debugger: state T in /proc
  RankSnapshot progress;
};

// What the parent saw: the ranks, and why it stopped waiting.
enum class Verdict { Broken, Stalled, Interrupted };
std::string describe_failure(const std::vector<RankState>& ranks, Verdict why, double stall_seconds, int signal);

// "exit 3", "signal 9 (Killed)".
std::string wait_status_text(int status);
// Whether /proc says the process is stopped (T or t).
bool process_stopped(pid_t pid);

}  // namespace fsdpsim::real
