// The bisection of sim/release/release_bisect.hpp.
#include "sim/release/release_bisect.hpp"

#include <algorithm>
#include <cctype>
#include <deque>
#include <map>

namespace fsdpsim {

namespace {

// "0.18.0rc1" -> numbers {0, 18, 0} and the tail "rc1" (a tail sorts before no tail).
void split_version(const std::string& v, std::vector<long>* nums, std::string* tail) {
  size_t i = 0;
  while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) {
    long n = 0;
    while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) n = n * 10 + (v[i++] - '0');
    nums->push_back(n);
    if (i < v.size() && v[i] == '.' && i + 1 < v.size() && std::isdigit(static_cast<unsigned char>(v[i + 1]))) ++i;
    else break;
  }
  *tail = v.substr(i);
}

// Probes each release once and keeps the verdicts in probe order.
struct Prober {
  const std::function<ProbeVerdict(size_t)>& probe;
  BisectAnswer& out;
  std::map<size_t, ProbeVerdict> seen;
  ProbeVerdict at(size_t i) {
    auto it = seen.find(i);
    if (it != seen.end()) return it->second;
    const ProbeVerdict v = probe(i);
    seen[i] = v;
    out.probed.push_back(i);
    out.verdicts.push_back(v);
    return v;
  }
};

// Narrows (lo, hi) - lo on the old side of the boundary, hi on the new side,
// either possibly outside the list (-1, count) - until every release strictly
// between them has been probed and could not run. `new_side` says which side
// a runnable release is on. A probe that cannot run moves to the unprobed
// release nearest the middle, alternating outward (mid, mid+1, mid-1, ...).
void narrow(Prober& p, long* lo, long* hi, const std::function<bool(ProbeVerdict)>& new_side) {
  while (true) {
    const long mid = *lo + (*hi - *lo) / 2;
    long pick = -2;
    for (long d = 0; pick == -2 && (mid + d < *hi || mid - d > *lo); ++d) {
      for (long c : {mid + d, mid - d})
        if (c > *lo && c < *hi && !p.seen.count(static_cast<size_t>(c))) {
          pick = c;
          break;
        }
    }
    if (pick == -2) return;
    const ProbeVerdict v = p.at(static_cast<size_t>(pick));
    if (v == ProbeVerdict::CannotRun) continue;
    (new_side(v) ? *hi : *lo) = pick;
  }
}

// Neither end reproduces: the range may lie strictly inside. Midpoints of ever
// finer halves (breadth first) are probed until one reproduces, at most
// 2 * ceil(log2(n + 1)) of them, so the whole search stays logarithmic; a range
// strictly inside that none of those midpoints falls in is missed (the caller says so).
long sweep(Prober& p, long oldest, long newest, long n, const std::function<bool(ProbeVerdict)>& hit) {
  long budget = 0;
  while ((1L << budget) < n + 1) ++budget;
  budget *= 2;
  std::deque<std::pair<long, long>> halves = {{oldest, newest}};
  while (!halves.empty() && budget > 0) {
    const auto [lo, hi] = halves.front();
    halves.pop_front();
    if (hi - lo < 2) continue;
    const long mid = lo + (hi - lo) / 2;
    if (!p.seen.count(static_cast<size_t>(mid))) {
      --budget;
      if (hit(p.at(static_cast<size_t>(mid)))) return mid;
    }
    halves.push_back({lo, mid});
    halves.push_back({mid, hi});
  }
  return -1;
}

std::vector<size_t> unknown_between(long lo, long hi) {
  std::vector<size_t> out;
  for (long i = lo + 1; i < hi; ++i) out.push_back(static_cast<size_t>(i));  // every one probed: cannot run
  return out;
}

}  // namespace

int compare_release_versions(const std::string& a, const std::string& b) {
  std::vector<long> na, nb;
  std::string ta, tb;
  split_version(a, &na, &ta);
  split_version(b, &nb, &tb);
  while (na.size() < nb.size()) na.push_back(0);
  while (nb.size() < na.size()) nb.push_back(0);
  if (na != nb) return na < nb ? -1 : 1;
  if (ta == tb) return 0;
  if (ta.empty() || tb.empty()) return ta.empty() ? 1 : -1;  // 0.18.0rc1 before 0.18.0
  return ta < tb ? -1 : 1;
}

BisectAnswer bisect_releases(size_t count, const std::function<ProbeVerdict(size_t)>& probe) {
  BisectAnswer out;
  if (count == 0) return out;
  Prober p{probe, out, {}};
  const long n = static_cast<long>(count);
  auto reproduces = [](ProbeVerdict v) { return v == ProbeVerdict::Reproduces; };
  auto gone = [](ProbeVerdict v) { return v == ProbeVerdict::DoesNotReproduce; };
  // The newest runnable release first: the harness calls the newest API, so
  // releases that cannot run are the old ones, and the newest anchors the search.
  long newest = n - 1;
  while (newest >= 0 && p.at(static_cast<size_t>(newest)) == ProbeVerdict::CannotRun) --newest;
  if (newest < 0) return out;
  long anchor = -1;  // a release known to reproduce
  if (reproduces(p.at(static_cast<size_t>(newest)))) {
    anchor = newest;
  } else {
    // Gone in the newest: it may have reproduced in the oldest (fixed in between).
    long oldest = 0;
    while (oldest < newest && p.at(static_cast<size_t>(oldest)) == ProbeVerdict::CannotRun) ++oldest;
    if (oldest < newest && reproduces(p.at(static_cast<size_t>(oldest)))) anchor = oldest;
    else anchor = sweep(p, oldest, newest, n, reproduces);
  }
  if (anchor < 0) return out;
  out.found = true;
  // The appearance: from the newest older release seen not to reproduce.
  long lo = -1, hi = anchor;
  for (const auto& [i, v] : p.seen)
    if (static_cast<long>(i) < anchor && gone(v)) lo = std::max(lo, static_cast<long>(i));
  narrow(p, &lo, &hi, reproduces);
  out.first_reproducing = static_cast<size_t>(hi);
  out.clean_before = lo < 0 ? BisectAnswer::kNone : static_cast<size_t>(lo);
  out.unknown_before = unknown_between(lo, hi);
  // The fix: up to the oldest newer release seen not to reproduce; none in
  // range when the newest runnable one reproduces (any after it could not run).
  long lo2 = anchor, hi2 = n;
  for (const auto& [i, v] : p.seen)
    if (static_cast<long>(i) > anchor && gone(v)) hi2 = std::min(hi2, static_cast<long>(i));
  narrow(p, &lo2, &hi2, gone);
  out.last_reproducing = static_cast<size_t>(lo2);
  out.fixed_in = hi2 >= n ? BisectAnswer::kNone : static_cast<size_t>(hi2);
  out.unknown_after = unknown_between(lo2, hi2);
  return out;
}

}  // namespace fsdpsim
