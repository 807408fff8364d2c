// The spread of a ratio measured once per round (variant A / variant B, both
// run in the same round): the median of the per-round ratios, their min-max,
// and the range of the middle ones (the sorted ratios less n/5 at each end:
// the middle 3 of 5, 6 of 10), which is the interval the benches judge goals
// by. Header-only, pure code.
#ifndef DET_BENCH_ROUND_RATIOS_H_
#define DET_BENCH_ROUND_RATIOS_H_

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace det::bench {

// The fewest rounds whose spread says anything; with fewer, benches print
// the figures but judge no goal.
inline constexpr int kMinRoundsForClaims = 5;

struct RatioSpread {
  int rounds = 0;
  double median = 0;  // the upper median for an even count
  double min = 0, max = 0;
  int middle = 0;  // how many ratios [low, high] spans
  double low = 0, high = 0;
};

// Requires ratios non-empty.
inline RatioSpread SpreadOf(std::vector<double> ratios) {
  std::sort(ratios.begin(), ratios.end());
  const int n = static_cast<int>(ratios.size());
  const int cut = n / 5;
  RatioSpread s;
  s.rounds = n;
  s.median = ratios[n / 2];
  s.min = ratios.front();
  s.max = ratios.back();
  s.middle = n - 2 * cut;
  s.low = ratios[cut];
  s.high = ratios[n - 1 - cut];
  return s;
}

// "0.993x (per round 0.981-1.004; middle 3 of 5: 0.987-0.999)".
inline std::string Describe(const RatioSpread& s) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%.3fx (per round %.3f-%.3f; middle %d of %d: %.3f-%.3f)", s.median, s.min, s.max,
                s.middle, s.rounds, s.low, s.high);
  return buf;
}

// The per-round ratios a[i] / b[i]. Requires equal, non-empty sizes.
inline std::vector<double> PerRoundRatios(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  return r;
}

}  // namespace det::bench

#endif  // DET_BENCH_ROUND_RATIOS_H_
