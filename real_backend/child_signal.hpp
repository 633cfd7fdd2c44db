// The only way fsdpsim signals or waits for a process. It may signal only the
// children it started, by their pid, or the process group it created for one
// (a child made leader of its own group). kill(2) reads 0 as "my own group",
// -1 as "every process I may signal" and a negative pid as a group: a zeroed or
// stale table entry passed to it would kill the caller's shell and its
// siblings. So every function here refuses a pid or group id <= 1 (1 is init)
// and does nothing then. All are async-signal-safe: the signal handlers use them.
#pragma once
#include <sys/types.h>

namespace fsdpsim::real {

// Whether `pid` may be signalled: a real process id (> 1).
constexpr bool signallable_pid(pid_t pid) { return pid > 1; }

// kill(pid, sig) for a child `pid`; false (nothing sent, errno EINVAL) when
// pid <= 1, else kill's own result.
bool signal_child(pid_t pid, int sig);

// kill(-pgid, sig) for the group a child leads (it called setpgid(0, 0));
// false (nothing sent, errno EINVAL) when pgid <= 1.
bool signal_child_group(pid_t pgid, int sig);

// Whether a process `pid` exists (signal 0: it exists, EPERM included); false for pid <= 1.
bool process_exists(pid_t pid);

// waitpid(pid, status, flags) for one child, retried on EINTR: its result, or
// -1 (errno EINVAL) for pid <= 1: waitpid(0 or -1) would reap any child, one
// that another part of the program waits for among them.
pid_t wait_child(pid_t pid, int* status, int flags = 0);

}  // namespace fsdpsim::real
