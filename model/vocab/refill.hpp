// Writing a list of vocabulary values in place. The simulator hands each run
// the Observations of earlier runs back (recycle, sim/core/simulator.hpp): filling a
// list through Refill overwrites the elements already there, so their strings
// and nested lists keep their buffers and a warm run allocates nothing.
#pragma once
#include <cstddef>
#include <vector>

namespace fsdpsim {

// Elements a shorter list dropped, kept with their buffers for the next list of
// that type to grow into (per thread; bounded).
template <typename T>
std::vector<T>& refill_spares() {
  thread_local std::vector<T> spares;
  return spares;
}
constexpr size_t kRefillSpares = 256;

template <typename T>
class Refill {
 public:
  explicit Refill(std::vector<T>& v) : v_(v) {}
  Refill(const Refill&) = delete;
  Refill& operator=(const Refill&) = delete;
  ~Refill() {  // drops what an earlier, longer list left, into the spares
    std::vector<T>& spares = refill_spares<T>();
    while (v_.size() > n_) {
      if (spares.size() < kRefillSpares) spares.push_back(std::move(v_.back()));
      v_.pop_back();
    }
  }
  // The next element, to be overwritten in full by the caller.
  T& next() {
    if (n_ == v_.size()) {
      std::vector<T>& spares = refill_spares<T>();
      if (spares.empty()) {
        v_.emplace_back();
      } else {
        v_.push_back(std::move(spares.back()));
        spares.pop_back();
      }
    }
    return v_[n_++];
  }
  size_t size() const { return n_; }  // elements written so far

 private:
  std::vector<T>& v_;
  size_t n_ = 0;
};

}  // namespace fsdpsim
