// The tree-structured Parzen estimator (Bergstra et al., 2011): proposes
// hyperparameters from the results so far. Used by `searcher.name: tpe` (a
// fixed pool of trials like random search) and by async_halving /
// adaptive_asha with `sampler: tpe` (TPE proposals, ASHA early stopping).
//
// Pure decision code (see searcher.h): no I/O, randomness only through the
// rng it is given, so the same events give the same proposals.
//
//   TpeSampler tpe(config.hyperparameters, config.searcher.options.tpe, smaller_is_better, experiment_seed);
//   TpeProposal p = tpe.Propose(rng);  tpe.Record(id, p.hparams);
//   tpe.Observe(id, metric, /*level=*/batches);
//
// Random proposals (the startup trials and the random_fraction share) draw
// from the searcher's `rng` exactly what random search draws for a trial (the
// hparams, then the trial seed), and model proposals draw only from the
// sampler's own stream: with the same experiment seed, TPE's k-th random
// proposal is random search's k-th trial, so a TPE search (and ASHA with
// sampler: tpe) covers random search's candidates in order, as BOHB's random
// share keeps Hyperband's guarantees.
#ifndef DET_MASTER_SEARCH_TPE_H_
#define DET_MASTER_SEARCH_TPE_H_

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/hparams.h"
#include "common/search_options.h"
#include "master/search/searcher.h"
#include "nlohmann/json.hpp"

namespace det {
namespace master {

// The most trials a proposal models (the best-ranked ones), so that a
// proposal costs at most kMaxEiCandidates x hparams x this many kernels.
inline constexpr size_t kMaxTpeModelTrials = 256;

// One proposal: the hparams and the trial's seed.
struct TpeProposal {
  nlohmann::json hparams;
  uint32_t trial_seed = 0;
  bool from_model = false;  // false: a random proposal, drawn from `rng`
};

// Not thread-safe.
class TpeSampler {
 public:
  // `model_seed` (the experiment seed) seeds the sampler's own stream.
  TpeSampler(HyperparameterSpace space, TpeOptions options, bool smaller_is_better, uint64_t model_seed = 0);

  // A point of the space and a trial seed. While fewer than n_startup_trials
  // trials have a result, and afterwards with probability random_fraction
  // (unset: 0; one draw of the sampler's stream, made only when it is > 0):
  // a random proposal, SampleHParams(rng) then DrawTrialSeed(rng), the
  // draws random search makes for a trial; nothing else touches `rng`. Otherwise
  // the results are ranked (a higher `level` first, then the better metric;
  // non-finite metrics last); as in BOHB only the trials at or above the
  // highest level that at least max(2, n_startup_trials) trials reached are
  // kept; of those n (at most kMaxTpeModelTrials, the best-ranked) the best
  // max(1, ceil(gamma * n)) form l(x) and the rest g(x), each a Parzen
  // estimator per search hparam (int, double and log (in the exponent) as
  // truncated Gaussian mixtures with a wide prior component; categorical as
  // smoothed frequencies; const and nested structure kept), or with
  // options.multivariate (unset: false) one joint estimator over them all
  // (tpe.cc's JointParzen); n_ei_candidates points are drawn from l and the
  // one with the largest log l(x) - log g(x) is returned (const hparams and
  // nested choices, and the trial seed, drawn from the sampler's stream).
  TpeProposal Propose(std::mt19937_64& rng);
  // How much better than the rest the model of the results above `level`
  // (levels > level only; ranked and cut as Propose does) finds each of
  // `points`: log l(x) - log g(x) of the per-hparam estimators (hparams a
  // point lacks count 0), > 0 where x looks like the best results. Empty
  // while fewer than max(2, n_startup_trials) trials have a result above
  // `level`. Costs points x hparams x min(results, kMaxTpeModelTrials) kernels.
  std::vector<double> ScoreAbove(int64_t level, const std::vector<const nlohmann::json*>& points) const;
  // Propose, then Record under create->request_id: sets create's hparams
  // and trial_seed.
  void ProposeFor(CreateTrialOp* create, std::mt19937_64& rng);
  // Remembers the hparams of trial `id` (replacing earlier ones).
  void Record(RequestId id, const nlohmann::json& hparams);
  // Trial `id`'s result at `level` (0 for a full-length search; for ASHA the
  // batches behind it, its rung's length, which compares across brackets); a
  // result at a higher level replaces a lower one, at the same level the
  // latest counts. Unknown ids are ignored.
  void Observe(RequestId id, double metric, int64_t level);
  // Drops trial `id` (invalid hparams).
  void Forget(RequestId id);
  // The hparams recorded for trial `id`, or null.
  const nlohmann::json* HParams(RequestId id) const;
  // The number of trials with a result.
  int64_t observed() const;

  // The results and the sampler's stream. Restore also takes the plain list
  // of results that snapshots before the sampler's own stream held (the
  // stream then stays as constructed).
  nlohmann::json Snapshot() const;
  // InvalidArgument for a malformed snapshot (state unchanged then).
  absl::Status Restore(const nlohmann::json& snapshot);

 private:
  struct Obs {
    nlohmann::json hparams;
    bool scored = false;
    double value = 0;  // smaller is better; +inf for non-finite
    int64_t level = 0;
  };
  HyperparameterSpace space_;
  TpeOptions options_;
  bool smaller_is_better_;
  std::map<RequestId, Obs> obs_;
  std::mt19937_64 model_rng_;  // model proposals and the random_fraction draw
};

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_SEARCH_TPE_H_
