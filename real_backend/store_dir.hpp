// The private directory a process-rank pool meets in: its FileStore lives
// there. Named $TMPDIR/fsdpsim-real-<owner pid>-XXXXXX, like the upstream pool's
// fsdpsim-pool-<pid>-... (real_backend/upstream/fsdpsim_upstream/pool.py,
// remove_stale_dirs), and holding `owner.lock`, flocked by the owner (and
// inherited by its forked ranks) for the pool's life. Removed by the pool, by
// the signal handler (signal_cleanup.hpp), or, after a SIGKILL or a crash, by
// the next pool's start in any process.
#pragma once
#include <string>
#include <vector>

#include "real_backend/signal_cleanup.hpp"

namespace fsdpsim::real {

class StoreDir {
 public:
  // Removes stale directories first; throws std::runtime_error naming the path
  // and the reason when the directory cannot be made.
  StoreDir();
  ~StoreDir();
  StoreDir(const StoreDir&) = delete;
  StoreDir& operator=(const StoreDir&) = delete;
  const std::string& path() const { return dir_; }
  std::string store_file() const { return dir_ + "/store"; }

 private:
  std::string dir_;
  int lock_fd_ = -1;
  SignalCleanup cleanup_;
};

// $TMPDIR, or /tmp where it is unset or empty.
std::string temp_base();

// Removes the store directories under `base` whose owner is gone: nobody holds
// owner.lock, and the owner pid is not alive here or the directory is over a
// minute old (a pid in another pid namespace, or reused). Returns the paths removed.
std::vector<std::string> remove_stale_store_dirs(const std::string& base);

}  // namespace fsdpsim::real
