#include "real_backend/rank_failure.hpp"

#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace fsdpsim::real {
namespace {

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

// "waiting in all_gather(lin0, 96 elements) at step 3 (train_step) for 5.0 s"
std::string where(const RankSnapshot& p) {
  switch (p.phase) {
    case RankPhase::InCollective: return "waiting in " + p.what + " for " + seconds(p.seconds);
    case RankPhase::Failed: return "in " + p.what;
    case RankPhase::Running: return "running " + p.what + " for " + seconds(p.seconds);
    case RankPhase::Joining: return "joining the process group for " + seconds(p.seconds);
    case RankPhase::Starting: return "starting";
    case RankPhase::Idle: return "waiting for its next sequence";
    case RankPhase::Done: return "done";
  }
  return "?";
}

bool waiting_on_peers(const RankSnapshot& p) { return p.phase == RankPhase::InCollective || p.phase == RankPhase::Failed; }

}  // namespace

std::string wait_status_text(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}

bool process_stopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < stat.size() && (stat[paren + 2] == 'T' || stat[paren + 2] == 't');
}

std::string describe_failure(const std::vector<RankState>& ranks, Verdict why, double stall_seconds, int signal) {
  // Causes first (died, stopped, still computing while its peers wait), then
  // every rank's own error, then the ranks that said nothing.
  std::vector<std::string> causes, errors, silent;
  bool peers_wait = false;
  for (const auto& r : ranks) peers_wait = peers_wait || (!r.answered && waiting_on_peers(r.progress));
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankState& r = ranks[i];
    const std::string name = "rank " + std::to_string(i);
    if (r.answered) continue;
    if (!r.error.empty()) {
      std::string line = name + ": " + r.error;
      if (waiting_on_peers(r.progress)) line += " (" + where(r.progress) + ")";
      errors.push_back(line);
    } else if (r.wait_status) {
      // Gone without a word: a crash, a kill, the OOM killer.
      causes.push_back(name + " died (" + wait_status_text(*r.wait_status) + ") while " + where(r.progress));
    } else if (r.stopped) {
      causes.push_back(name + " too slow: stopped (SIGSTOP or a debugger) while " + where(r.progress));
    } else if (!waiting_on_peers(r.progress) && (peers_wait || why == Verdict::Stalled)) {
      causes.push_back(name + " too slow: still " + where(r.progress) + (peers_wait ? " while its peers waited for it" : ""));
    } else {
      silent.push_back(name + " no answer, " + where(r.progress));
    }
  }
  std::string out;
  if (why == Verdict::Interrupted) out = std::string("interrupted by ") + strsignal(signal) + "; ranks killed";
  else if (why == Verdict::Stalled) out = "no rank made progress for " + seconds(stall_seconds) + "; ranks killed";
  for (const auto* list : {&causes, &errors, &silent})
    for (const auto& line : *list) out += (out.empty() ? "" : "; ") + line;
  return out;
}

}  // namespace fsdpsim::real
