// The task oracle of the search benches (bench/search_peers, bench/search_seeds):
// one C++ implementation of each task, so that det-cpp's searchers and
// Optuna's (bench/search_peers_optuna.py, which only proposes hparams and
// decides on pruning) train and validate the same trials.
//
//   absl::StatusOr<std::unique_ptr<SearchTask>> t = MakeSearchTask("lr", "");
//   TrialState s = (*t)->Start(hparams, trial_seed);
//   (*t)->Train(s, 16);
//   absl::StatusOr<double> v = (*t)->Validate(s);
//
// Tasks:
//  - lr, rare: simulated learning curves (see DynamicsOf). A trial's model is
//    a quality q (0 at the start); each batch moves it toward the plateau
//    a(hparams) + luck by 1/tau(hparams); luck ~ N(0, seed_noise) is drawn
//    from the trial seed. A validation at length L reads q + the noise
//    (0.003 + 0.03 exp(-L/64)) N(0, 1), drawn from (trial seed, hparams, L):
//    the same trial gives the same values in every search.
//  - fmnist (or any tabular task): recorded learning curves read from a JSON
//    table (LoadTableTask); a trial is (grid point, trial_seed % seeds).
// Every SearchTask is immutable after creation; its const methods are
// thread-safe.
#ifndef DET_BENCH_SEARCH_TASKS_H_
#define DET_BENCH_SEARCH_TASKS_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/experiment_config.h"
#include "nlohmann/json.hpp"

namespace det {
namespace bench {

// The longest trial of every search task, in batches.
inline constexpr int64_t kTaskMaxLength = 256;
// The seed noise (sd of a trial's luck) of the simulated tasks in search_peers.
inline constexpr double kTaskSeedNoise = 0.01;

// 53 random bits as a double in [0, 1); a standard normal (Box-Muller). The
// same on every platform (no std:: distributions).
double Uniform(std::mt19937_64& rng);
double Normal(std::mt19937_64& rng);

// The simulated dynamics of a trial of task lr, rare or schedule (see
// bench/search_seeds.cc for what each models). `hp` holds "lr" (and for
// rare "wd", "width"); a missing or non-numeric field throws
// nlohmann::json::exception (the driver only passes hparams of the task's
// own space).
struct Dynamics {
  double a = 0;    // plateau
  double tau = 1;  // batches per 1/e of the way
};
Dynamics DynamicsOf(const std::string& task, const nlohmann::json& hp);

// A trial's luck: an offset of its plateau with sd `seed_noise`, a pure
// function of its trial seed.
double TrialLuck(uint64_t trial_seed, double seed_noise);
// The key of a trial's validation noise: a function of its hparams and seed.
uint64_t NoiseKey(const nlohmann::json& hparams, uint64_t trial_seed);
// The sd of a validation's noise at `length` batches.
double ValidationNoiseSd(int64_t length);
// The validation noise of the trial with `key` at `length`: deterministic.
double ValidationNoise(uint64_t key, int64_t length);

// One dimension of a task's search space, as both sides sample it.
struct Dimension {
  enum class Kind { kLog, kInt, kDouble, kIndex };
  std::string name;
  Kind kind = Kind::kDouble;
  // kLog: the values themselves (1e-4 .. 1), not exponents; kInt, kIndex:
  // inclusive integer bounds (kIndex: 0 .. n-1, an index into a table axis).
  double low = 0;
  double high = 0;
};
using SearchSpace = std::vector<Dimension>;
const char* KindName(Dimension::Kind kind);  // "log", "int", "double", "index"

// The state of one trial of one task (fields used by the task that made it).
struct TrialState {
  int64_t trained = 0;  // batches
  // Simulated tasks.
  Dynamics d;
  double q = 0;
  uint64_t key = 0;
  // Tabular tasks.
  int64_t point = 0;  // the flattened grid point
  int64_t seed = 0;   // the recorded trial seed index
};

class SearchTask {
 public:
  virtual ~SearchTask() = default;
  virtual const std::string& name() const = 0;
  virtual const SearchSpace& space() const = 0;
  // det-cpp's hyperparameters for space(), with the searcher's metric
  // ("accuracy", larger is better) and max_length kTaskMaxLength batches.
  virtual ExperimentConfig BaseConfig() const = 0;
  // A new trial of `hparams` (a value for each dimension of space()).
  // InvalidArgument naming the field when one is missing or out of range.
  virtual absl::StatusOr<TrialState> Start(const nlohmann::json& hparams, uint64_t trial_seed) const = 0;
  // Trains `s` to `to_length` batches (no-op when it is there already).
  virtual void Train(TrialState& s, int64_t to_length) const = 0;
  // The validation metric of `s` now (larger is better). Tabular tasks:
  // FailedPrecondition when `s` has trained less than the first recorded length.
  virtual absl::StatusOr<double> Validate(const TrialState& s) const = 0;
  // A PBT child of `parent` (at its checkpoint) with the child's hparams and
  // seed. Simulated: it keeps the parent's quality and continues with the
  // child's dynamics. Tabular: it replays the child's own grid point's curve
  // from the parent's length on (a table cannot change hparams mid-run).
  virtual absl::StatusOr<TrialState> Fork(const TrialState& parent, const nlohmann::json& hparams,
                                          uint64_t child_seed) const = 0;
  // The task's fixed target and how it was computed (one line for the output).
  virtual double Target() const = 0;
  virtual std::string TargetHow() const = 0;
};

// The simulated task `name` ("lr" or "rare") with kTaskSeedNoise.
// InvalidArgument for any other name.
absl::StatusOr<std::unique_ptr<SearchTask>> MakeSimulatedTask(const std::string& name);

// Bounds of a table file.
inline constexpr int64_t kMaxTableBytes = 8 << 20;
inline constexpr int64_t kMaxTableRows = 10000;
inline constexpr int64_t kMaxTableAxes = 8;
inline constexpr int64_t kMaxAxisValues = 64;
inline constexpr int64_t kMaxTableSeeds = 16;

// A tabular task from the JSON table at `path` (format: bench/README.md,
// "search_peers"). Validates everything: size <= kMaxTableBytes; rows <=
// kMaxTableRows; 1..kMaxTableAxes axes of 1..kMaxAxisValues values each;
// 1..kMaxTableSeeds seeds; lengths strictly increasing multiples of 16 ending
// at kTaskMaxLength; every (point, seed) present exactly once with one finite
// value per length; smaller_is_better false. Errors are InvalidArgument (or
// NotFound) naming the file and the field.
absl::StatusOr<std::unique_ptr<SearchTask>> LoadTableTask(const std::string& path);

// The nearest-rank p-quantile (0 < p <= 1) of `values` (non-empty):
// the ceil(p n)-th smallest.
double NearestRankQuantile(std::vector<double> values, double p);

}  // namespace bench
}  // namespace det

#endif  // DET_BENCH_SEARCH_TASKS_H_
