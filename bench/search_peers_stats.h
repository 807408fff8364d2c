// The figures of bench/search_peers, from each search's validation events:
// time to a fixed target, the anytime curve's best, and medians and means
// over seeds with percentile-bootstrap intervals. Pure functions; thread-safe.
#ifndef DET_BENCH_SEARCH_PEERS_STATS_H_
#define DET_BENCH_SEARCH_PEERS_STATS_H_

#include <cstdint>
#include <vector>

namespace det {
namespace bench {

// One validation of a search: the batches the whole search had trained when
// it happened, and its value (larger is better). A search's events are in
// time order (batches non-decreasing).
struct ValidationEvent {
  int64_t batches = 0;
  double value = 0;
};

// What one search (one searcher, one seed) achieved.
struct SeedOutcome {
  // Batches until the first validation >= target; `budget` when never
  // (reached false).
  int64_t time_to_target = 0;
  bool reached = false;
  int64_t total = 0;  // batches the search trained
  // The best validation among events at <= budget/4, budget/2, budget
  // batches; -infinity when there was none.
  double best_at[3] = {0, 0, 0};
};

// Requires budget >= 4.
SeedOutcome Summarize(const std::vector<ValidationEvent>& events, int64_t total, double target, int64_t budget);

// The best value among events with batches <= `batches`; -infinity when none.
double BestUpTo(const std::vector<ValidationEvent>& events, int64_t batches);

// Median (the mean of the two middle values for an even count) and mean of a
// non-empty sample.
double Median(std::vector<double> x);
double Mean(const std::vector<double>& x);

// A percentile-bootstrap 90% interval of stat(x): `resamples` samples of
// x.size() values drawn with replacement (std::mt19937_64 seeded by `seed`,
// indexes from 53-bit uniforms, so the same everywhere), lo = the
// floor(0.05 R)-th smallest statistic (0-based), hi = the (ceil(0.95 R)-1)-th.
// Requires a non-empty x and resamples >= 1.
struct Interval {
  double lo = 0;
  double hi = 0;
};
Interval BootstrapInterval(const std::vector<double>& x, double (*stat)(std::vector<double>), int resamples = 2000,
                           uint64_t seed = 51);
// A percentile-bootstrap 90% interval of stat(b) - stat(a), a and b
// resampled independently (same RNG and percentiles as BootstrapInterval):
// whether two seed sets agree (0 inside) at the 90% level. Requires non-empty
// a and b.
Interval BootstrapDifference(const std::vector<double>& a, const std::vector<double>& b,
                             double (*stat)(std::vector<double>), int resamples = 2000, uint64_t seed = 51);
double MedianOf(std::vector<double> x);  // Median, in the form BootstrapInterval takes
double MeanOf(std::vector<double> x);    // Mean, likewise

}  // namespace bench
}  // namespace det

#endif  // DET_BENCH_SEARCH_PEERS_STATS_H_
