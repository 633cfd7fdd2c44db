#include "real_backend/rank_progress.hpp"

#include <sys/mman.h>
#include <time.h>

#include <cstring>
#include <new>
#include <stdexcept>

namespace fsdpsim::real {

int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // one clock for every process on the machine
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

RankProgress::RankProgress(int world) : world_(world) {
  void* p = ::mmap(nullptr, sizeof(RankSlot) * static_cast<size_t>(world), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap of the rank progress table: ") + std::strerror(errno));
  slots_ = static_cast<RankSlot*>(p);
  for (int r = 0; r < world; ++r) new (&slots_[r]) RankSlot();
}

RankProgress::~RankProgress() { ::munmap(slots_, sizeof(RankSlot) * static_cast<size_t>(world_)); }

void RankProgress::set(int rank, RankPhase phase, const std::string& what) {
  RankSlot& s = slots_[rank];
  s.seq.fetch_add(1);  // odd: being written
  s.phase.store(static_cast<int32_t>(phase));
  if (phase == RankPhase::InCollective) {
    s.collectives.fetch_add(1);
    s.in_sequence.fetch_add(1);
  }
  s.since_ns.store(monotonic_ns());
  size_t n = std::min(what.size(), sizeof s.what - 1);
  std::memcpy(s.what, what.data(), n);
  s.what[n] = 0;
  s.changes.fetch_add(1);
  s.seq.fetch_add(1);
}

void RankProgress::begin_sequence(int rank, int64_t sequence) {
  RankSlot& s = slots_[rank];
  s.seq.fetch_add(1);
  s.sequence.store(sequence);
  s.in_sequence.store(0);
  s.seq.fetch_add(1);
}

RankSnapshot RankProgress::get(int rank) const {
  const RankSlot& s = slots_[rank];
  RankSnapshot out;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    uint32_t a = s.seq.load();
    if (a & 1) continue;
    char what[sizeof s.what];
    std::memcpy(what, s.what, sizeof what);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    out.phase = static_cast<RankPhase>(s.phase.load());
    int64_t since = s.since_ns.load();
    out.changes = s.changes.load();
    out.collectives = s.collectives.load();
    out.sequence = s.sequence.load();
    out.in_sequence = s.in_sequence.load();
    if (s.seq.load() != a) continue;
    what[sizeof what - 1] = 0;
    out.what = what;
    out.seconds = since ? static_cast<double>(monotonic_ns() - since) / 1e9 : 0;
    break;
  }
  return out;
}

int64_t RankProgress::total_changes() const {
  int64_t n = 0;
  for (int r = 0; r < world_; ++r) n += slots_[r].changes.load();
  return n;
}

}  // namespace fsdpsim::real
