// A fork copies one thread and every lock as it stands. If another thread of
// fsdpsim is inside the allocator when a rank or pool process is forked, the
// child inherits a lock nobody will release: glibc's malloc resets its own at
// fork, ASan's allocator (the sanitizer build) does not, and the child hangs in
// its first allocation ("still joining the process group"). So the threads that
// live beside a fork (the progress ticker, sim/cli/progress.hpp) do their work
// holding this lock, and every fork in fsdpsim holds it across fork().
#pragma once
#include <mutex>

namespace fsdpsim::real {

// The one lock, shared by every translation unit of the binary.
inline std::mutex& fork_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace fsdpsim::real
