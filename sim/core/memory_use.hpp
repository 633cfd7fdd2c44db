// The memory budget, one notion for every command (--memory-budget BYTES):
// the real and upstream backends refuse a sequence whose peak by the cost
// model is over it (sim/core/cost.hpp), and the explorer stops its search when the
// process's own memory reaches it (sim/core/explore.hpp).
#pragma once
#include <cstdint>

namespace fsdpsim {

// --memory-budget's default: half of the machine's physical memory, and never
// more than three quarters of an address-space limit (`ulimit -v`) or of the
// cgroup's memory.max, so the command stops itself before the kernel or the
// allocator stops it.
int64_t default_memory_budget();

// What this process uses now, in the measure its limit applies to: the
// address space when `ulimit -v` is set (what RLIMIT_AS counts), else the
// resident set. 0 when /proc/self/statm cannot be read.
int64_t memory_in_use();

}  // namespace fsdpsim
