// bench/search_efficiency's measurements: one search's outcome (batches
// trained until each improvement of its best validation), the results file
// that keeps them across runs (JSON lines), and the summary over seeds.
//
// A real run of every searcher over 8+ seeds takes hours on a small machine,
// so the bench appends each search's outcome to a results file as soon as it
// ends, and a later run with the same file measures only the (task, seed,
// searcher) it does not hold yet; `--report` prints the summary of a file
// without training anything.
#ifndef DET_BENCH_SEARCH_EFFICIENCY_RESULTS_H_
#define DET_BENCH_SEARCH_EFFICIENCY_RESULTS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace det::bench {

// One search's outcome. Scores are "higher is better" (a metric where
// smaller is better is negated); `points` holds only the validations that
// improved the search's best score, with the batches trained over all its
// trials (in the order things happened) by then.
struct Outcome {
  double best = 0;  // best score
  int64_t total_batches = 0;
  double seconds = 0;
  bool stopped_early = false;  // killed once it reached random search's best
  struct Point {
    int64_t batches;
    double score;
  };
  std::vector<Point> points;

  // Adds a validation (in order); keeps it if it improves the best score.
  void AddValidation(int64_t batches, double score);
  // Batches trained until the score first reached `target`; -1 if never.
  int64_t BatchesToReach(double target) const;
};

// A results file: JSON lines {"key", "seed", "searcher", outcome}. `key`
// names the task and every option that changes what a search does (so that
// results of other budgets are never mixed); a line that does not parse is
// reported and skipped, never fatal.
class ResultsFile {
 public:
  // An empty path keeps results in memory only.
  explicit ResultsFile(std::string path);
  const std::string& path() const { return path_; }
  std::optional<Outcome> Find(const std::string& key, int64_t seed, const std::string& searcher) const;
  // Records an outcome and appends it to the file (flushed at once).
  void Add(const std::string& key, int64_t seed, const std::string& searcher, const Outcome& outcome);

 private:
  std::string path_;
  std::map<std::tuple<std::string, int64_t, std::string>, Outcome> outcomes_;
};

// One searcher's summary line: the summed-batches ratio `searched / random`
// and the spread of the per-seed `ratios` (min, median, max, sd), the seeds
// where it never reached random's best and, when `missing` > 0, how many were
// not measured. `mark_lower_bound`: write ">=" before the ratio when some
// seed never reached it (its whole budget was counted).
void PrintSpreadLine(const std::string& name, int64_t searched, int64_t random, std::vector<double> ratios,
                     int nevers, int missing, bool mark_lower_bound);

// Wall time per batch trained (issue 50): each measured search's seconds /
// total_batches, and the median over the seeds measured (0 when none). A
// search stopped early (at random's best) counts the part it ran.
struct WallPerBatch {
  double median_ms = 0;
  int seeds = 0;          // outcomes measured
  int stopped_early = 0;  // of them, killed at random's best
};
WallPerBatch MedianWallPerBatch(const std::vector<std::optional<Outcome>>& outcomes);

// Prints each searcher's median wall time per batch next to random
// search's and their ratio, with the goal (issue 50: ASHA's at most random's
// on 2 slots, ratio <= 1).
void PrintWallPerBatch(const std::vector<std::optional<Outcome>>& random,
                       const std::vector<std::pair<std::string, std::vector<std::optional<Outcome>>>>& searches);

// Prints, for each searcher, every seed's batches to reach random's best
// (minus tolerance) and its ratio to random's, then the summed-batches
// ratio with the per-seed spread (min, median, max, sd) and the seeds where
// the search never reached it (its whole budget counted, a lower bound).
// `random` and `searches[name]` are indexed like `seeds`; a missing outcome
// (std::nullopt) is left out of that searcher's sums and counted as missing.
// With `full` (searches run to their end) it also prints each search's final
// best next to random's and on how many seeds it beat random's best.
void PrintSummary(const std::string& metric, bool smaller_is_better, double tolerance, bool full,
                  const std::vector<int64_t>& seeds, const std::vector<std::optional<Outcome>>& random,
                  const std::vector<std::pair<std::string, std::vector<std::optional<Outcome>>>>& searches);

}  // namespace det::bench

#endif  // DET_BENCH_SEARCH_EFFICIENCY_RESULTS_H_
