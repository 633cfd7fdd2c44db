#include "real_backend/store_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "real_backend/child_signal.hpp"

namespace fsdpsim::real {
namespace {

const char kPrefix[] = "fsdpsim-real-";
const char kLock[] = "owner.lock";

// The owner pid in "fsdpsim-real-<pid>-XXXXXX", or -1.
long owner_of(const std::string& name) {
  if (name.compare(0, sizeof kPrefix - 1, kPrefix) != 0) return -1;
  size_t i = sizeof kPrefix - 1, start = i;
  long pid = 0;
  while (i < name.size() && i - start < 10 && name[i] >= '0' && name[i] <= '9') pid = pid * 10 + (name[i++] - '0');
  if (i == start || i >= name.size() || name[i] != '-') return -1;
  return pid;
}

bool owner_alive(long pid) { return pid <= std::numeric_limits<pid_t>::max() && process_exists(static_cast<pid_t>(pid)); }

}  // namespace

std::string temp_base() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? std::string(t) : std::string("/tmp");
}

std::vector<std::string> remove_stale_store_dirs(const std::string& base) {
  std::vector<std::string> removed;
  DIR* d = ::opendir(base.c_str());
  if (!d) return removed;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const std::string& name : names) {
    long pid = owner_of(name);
    if (pid < 0 || pid == ::getpid()) continue;
    std::string dir = base + "/" + name;
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (owner_alive(pid) && std::time(nullptr) - st.st_mtime < 60) continue;
    // Taking the lock proves no process of that pool is left; it is held while removing.
    int fd = ::open((dir + "/" + kLock).c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      continue;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (fd >= 0) ::close(fd);
    if (!ec) removed.push_back(dir);
  }
  return removed;
}

StoreDir::StoreDir() {
  const std::string base = temp_base();
  remove_stale_store_dirs(base);
  std::string tmpl = base + "/" + kPrefix + std::to_string(::getpid()) + "-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    throw std::runtime_error("cannot create a store directory " + tmpl + ": " + std::strerror(errno) + " (TMPDIR)");
  dir_ = tmpl;
  cleanup_.set_paths({dir_ + "/" + kLock, store_file()}, dir_);
  lock_fd_ = ::open((dir_ + "/" + kLock).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX) != 0) {
    std::string why = std::strerror(errno);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    cleanup_.clear_paths();
    if (lock_fd_ >= 0) ::close(lock_fd_);
    throw std::runtime_error("cannot lock " + dir_ + "/" + kLock + ": " + why);
  }
}

StoreDir::~StoreDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  cleanup_.clear_paths();
  ::close(lock_fd_);
}

}  // namespace fsdpsim::real
