#include "sim/cli/interrupt.hpp"

#include <csignal>
#include <initializer_list>

namespace fsdpsim::cli {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void note_signal(int sig) {
  if (g_signal == 0) g_signal = sig;
}

}  // namespace

void arm_interrupts() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction cur {};
    ::sigaction(sig, nullptr, &cur);
    if (cur.sa_handler == note_signal) continue;
    struct sigaction sa {};
    sa.sa_handler = note_signal;
    sa.sa_flags = SA_RESTART;  // the sequence in progress goes on undisturbed where it can
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

int interrupted() { return g_signal; }

}  // namespace fsdpsim::cli
