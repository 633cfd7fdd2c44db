#include "real_backend/child_signal.hpp"

#include <sys/wait.h>

#include <cerrno>
#include <csignal>

namespace fsdpsim::real {

bool signal_child(pid_t pid, int sig) {
  if (!signallable_pid(pid)) {
    errno = EINVAL;
    return false;
  }
  return ::kill(pid, sig) == 0;
}

bool signal_child_group(pid_t pgid, int sig) {
  if (!signallable_pid(pgid)) {
    errno = EINVAL;
    return false;
  }
  return ::kill(-pgid, sig) == 0;
}

bool process_exists(pid_t pid) { return signallable_pid(pid) && (::kill(pid, 0) == 0 || errno == EPERM); }

pid_t wait_child(pid_t pid, int* status, int flags) {
  if (!signallable_pid(pid)) {
    errno = EINVAL;
    return -1;
  }
  pid_t r;
  while ((r = ::waitpid(pid, status, flags)) < 0 && errno == EINTR) {
  }
  return r;
}

}  // namespace fsdpsim::real
