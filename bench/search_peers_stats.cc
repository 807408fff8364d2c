#include "bench/search_peers_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace det {
namespace bench {

double BestUpTo(const std::vector<ValidationEvent>& events, int64_t batches) {
  double best = -std::numeric_limits<double>::infinity();
  for (const ValidationEvent& e : events) {
    if (e.batches > batches) break;
    best = std::max(best, e.value);
  }
  return best;
}

SeedOutcome Summarize(const std::vector<ValidationEvent>& events, int64_t total, double target, int64_t budget) {
  SeedOutcome o;
  o.total = total;
  o.time_to_target = budget;
  for (const ValidationEvent& e : events) {
    if (e.value >= target && e.batches <= budget) {
      o.time_to_target = e.batches;
      o.reached = true;
      break;
    }
  }
  o.best_at[0] = BestUpTo(events, budget / 4);
  o.best_at[1] = BestUpTo(events, budget / 2);
  o.best_at[2] = BestUpTo(events, budget);
  return o;
}

double Median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  size_t n = x.size();
  return n % 2 == 1 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

double Mean(const std::vector<double>& x) {
  double sum = 0;
  for (double v : x) sum += v;
  return sum / static_cast<double>(x.size());
}

double MedianOf(std::vector<double> x) { return Median(std::move(x)); }
double MeanOf(std::vector<double> x) { return Mean(x); }

namespace {

// x resampled with replacement (53-bit uniform indexes).
void Resample(const std::vector<double>& x, std::mt19937_64& rng, std::vector<double>& sample) {
  sample.resize(x.size());
  for (double& v : sample) {
    double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    v = x[std::min(x.size() - 1, static_cast<size_t>(u * static_cast<double>(x.size())))];
  }
}

// The percentile interval of sorted bootstrap statistics.
Interval Percentiles(std::vector<double> stats, int resamples) {
  std::sort(stats.begin(), stats.end());
  Interval in;
  in.lo = stats[static_cast<size_t>(std::floor(0.05 * resamples))];
  in.hi = stats[static_cast<size_t>(std::max(1.0, std::ceil(0.95 * resamples))) - 1];
  return in;
}

}  // namespace

Interval BootstrapInterval(const std::vector<double>& x, double (*stat)(std::vector<double>), int resamples,
                           uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> stats;
  std::vector<double> sample;
  for (int r = 0; r < resamples; ++r) {
    Resample(x, rng, sample);
    stats.push_back(stat(sample));
  }
  return Percentiles(std::move(stats), resamples);
}

Interval BootstrapDifference(const std::vector<double>& a, const std::vector<double>& b,
                             double (*stat)(std::vector<double>), int resamples, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> stats;
  std::vector<double> sa, sb;
  for (int r = 0; r < resamples; ++r) {
    Resample(a, rng, sa);
    Resample(b, rng, sb);
    stats.push_back(stat(sb) - stat(sa));
  }
  return Percentiles(std::move(stats), resamples);
}

}  // namespace bench
}  // namespace det
