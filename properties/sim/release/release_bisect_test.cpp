// The release bisection (sim/release/release_bisect.hpp) against every appear-then-fixed
// pattern of up to 40 releases, with and without a prefix of releases that
// cannot run: the answer a linear scan gives, in at most 2 + ceil(log2 n)
// probes when an end reproduces (plus one per release that cannot run), and a
// logarithmic number more when the range lies strictly inside.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/release/release_bisect.hpp"

using namespace fsdpsim;

namespace {

using V = ProbeVerdict;
constexpr size_t kNone = BisectAnswer::kNone;

// What a scan of every release says (the truth is monotone among the runnable ones).
BisectAnswer linear_answer(const std::vector<V>& truth) {
  BisectAnswer a;
  long n = static_cast<long>(truth.size()), f = -1, l = -1;
  for (long i = 0; i < n; ++i) {
    if (truth[i] == V::Reproduces) {
      if (f < 0) f = i;
      l = i;
    }
  }
  if (f < 0) return a;
  a.found = true;
  a.first_reproducing = static_cast<size_t>(f);
  a.last_reproducing = static_cast<size_t>(l);
  long b = f - 1;
  while (b >= 0 && truth[b] == V::CannotRun) --b;
  a.clean_before = b < 0 ? kNone : static_cast<size_t>(b);
  for (long i = b + 1; i < f; ++i) a.unknown_before.push_back(static_cast<size_t>(i));
  long e = l + 1;
  while (e < n && truth[e] == V::CannotRun) ++e;
  a.fixed_in = e >= n ? kNone : static_cast<size_t>(e);
  for (long i = l + 1; i < e; ++i) a.unknown_after.push_back(static_cast<size_t>(i));
  return a;
}

// `inside`: neither end reproduces (the sweep's case).
void expect_bisects(const std::vector<V>& truth, size_t extra_probes, bool inside, size_t width, const std::string& what) {
  std::vector<int> times(truth.size(), 0);
  BisectAnswer got = bisect_releases(truth.size(), [&](size_t i) {
    ++times[i];
    return truth[i];
  });
  BisectAnswer want = linear_answer(truth);
  const size_t n = truth.size();
  const size_t lg = static_cast<size_t>(std::ceil(std::log2(static_cast<double>(n))));
  const size_t sweep = 2 * static_cast<size_t>(std::ceil(std::log2(static_cast<double>(n + 1))));
  // An end reproduces: one narrowing. Inside: the sweep, then both narrowings.
  const size_t bound = inside ? 2 + sweep + 2 * lg + extra_probes : 2 + lg + extra_probes;
  EXPECT_LE(got.probed.size(), bound) << what;
  for (size_t i = 0; i < n; ++i) EXPECT_LE(times[i], 1) << what << ": release " << i << " probed twice";
  // Found whenever an end reproduces, or a range inside spans a quarter of the list (the sweep's third probe at the latest).
  if (!inside || (n >= 4 && width >= n / 4 + 2)) {
    EXPECT_EQ(got.found, want.found) << what;
  }
  if (!got.found) return;
  EXPECT_TRUE(want.found) << what;
  EXPECT_EQ(got.first_reproducing, want.first_reproducing) << what;
  EXPECT_EQ(got.clean_before, want.clean_before) << what;
  EXPECT_EQ(got.last_reproducing, want.last_reproducing) << what;
  EXPECT_EQ(got.fixed_in, want.fixed_in) << what;
  EXPECT_EQ(got.unknown_before, want.unknown_before) << what;
  EXPECT_EQ(got.unknown_after, want.unknown_after) << what;
}

std::string name(size_t n, size_t k, size_t a, size_t b) {
  return "n=" + std::to_string(n) + " cannot-run prefix " + std::to_string(k) + " reproduces [" + std::to_string(a) + "," +
         std::to_string(b) + ")";
}

}  // namespace

TEST(ReleaseBisect, EveryAppearThenFixedPatternInLogarithmicProbes) {
  for (size_t n = 1; n <= 40; ++n)
    for (size_t k = 0; k < n; ++k)
      for (size_t a = k; a <= n; ++a)
        for (size_t b = a; b <= n; ++b) {
          std::vector<V> truth(n, V::DoesNotReproduce);
          for (size_t i = 0; i < k; ++i) truth[i] = V::CannotRun;
          for (size_t i = a; i < b; ++i) truth[i] = V::Reproduces;
          // neither the oldest runnable (k) nor the newest reproduces
          const bool inside = a == b || (a > k && b < n);
          expect_bisects(truth, k, inside, b - a, name(n, k, a, b));
          if (::testing::Test::HasFailure()) return;  // one pattern's messages, not thousands
        }
}

TEST(ReleaseBisect, FourteenReleasesReproducingFromTheFifthTakeFiveProbes) {
  // The shape of `versions --bisect` over PEFT 0.13.0..0.21.2: the newest reproduces.
  std::vector<V> truth(14, V::Reproduces);
  for (size_t i = 0; i < 4; ++i) truth[i] = V::DoesNotReproduce;
  BisectAnswer got = bisect_releases(truth.size(), [&](size_t i) { return truth[i]; });
  EXPECT_EQ(got.first_reproducing, 4u);
  EXPECT_EQ(got.clean_before, 3u);
  EXPECT_EQ(got.fixed_in, kNone);
  EXPECT_EQ(got.probed.size(), 5u);  // the newest, then 13 candidates halved: 4 probes
}

TEST(ReleaseBisect, AReleaseThatCannotRunInsideTheRangeIsSkippedOutward) {
  std::vector<V> truth = {V::DoesNotReproduce, V::DoesNotReproduce, V::DoesNotReproduce, V::CannotRun,
                          V::Reproduces,       V::Reproduces,       V::Reproduces};
  BisectAnswer got = bisect_releases(truth.size(), [&](size_t i) { return truth[i]; });
  EXPECT_EQ(got.first_reproducing, 4u);
  EXPECT_EQ(got.clean_before, 2u);
  EXPECT_EQ(got.unknown_before, std::vector<size_t>{3});
}

TEST(ReleaseBisect, ANarrowRangeStrictlyInsideCanBeMissedWithinTheSweepsBudget) {
  std::vector<V> truth(64, V::DoesNotReproduce);
  truth[37] = V::Reproduces;  // not a midpoint of the first 14 halves
  BisectAnswer got = bisect_releases(truth.size(), [&](size_t i) { return truth[i]; });
  EXPECT_FALSE(got.found);
  EXPECT_EQ(got.probed.size(), 2u + 14u);  // both ends, then 2 * ceil(log2 65) midpoints
}

TEST(ReleaseBisect, VersionsOrderNumericallyWithPreReleasesFirst) {
  EXPECT_LT(compare_release_versions("0.9.0", "0.10.0"), 0);
  EXPECT_LT(compare_release_versions("0.18.0rc1", "0.18.0"), 0);
  EXPECT_EQ(compare_release_versions("0.15", "0.15.0"), 0);
  EXPECT_GT(compare_release_versions("0.21.2", "0.21.1"), 0);
}
