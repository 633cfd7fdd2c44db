#include "sim/core/memory_use.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

namespace fsdpsim {
namespace {

bool address_space_limited(rlim_t* limit) {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return false;
  *limit = rl.rlim_cur;
  return true;
}

// cgroup v2's memory.max for this process ("max": none); 0 when there is none.
int64_t cgroup_memory_max() {
  std::ifstream cg("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(cg, line))
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  if (path.empty()) return 0;
  std::ifstream max("/sys/fs/cgroup" + path + "/memory.max");
  long long v = 0;
  return max >> v ? v : 0;  // "max" fails the read: no limit
}

}  // namespace

int64_t default_memory_budget() {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  int64_t budget = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page / 2 : int64_t{4} << 30;
  rlim_t as = 0;
  if (address_space_limited(&as)) budget = std::min<int64_t>(budget, static_cast<int64_t>(as / 4 * 3));
  if (const int64_t cg = cgroup_memory_max(); cg > 0) budget = std::min(budget, cg / 4 * 3);
  return budget;
}

int64_t memory_in_use() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const bool ok = std::fscanf(f, "%lld %lld", &size, &resident) == 2;
  std::fclose(f);
  if (!ok) return 0;
  rlim_t as = 0;
  return (address_space_limited(&as) ? size : resident) * static_cast<int64_t>(::sysconf(_SC_PAGE_SIZE));
}

}  // namespace fsdpsim
