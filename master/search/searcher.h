// Hyperparameter search methods (Determined's searchers) and the Searcher
// that drives one for an experiment.
//
// Pure decision code: a search method takes events (a trial was created,
// validated, closed, exited early) and returns the operations the experiment
// must carry out next. It does no I/O, holds no lock and reads randomness only
// through the std::mt19937_64 it is given, so a test can replay any sequence
// of events and get the same operations.
//
//   absl::StatusOr<Searcher> s = Searcher::Create(config, max_length);
//   for (const SearcherOp& op : s->InitialOperations()) { ... }
//   ... s->ValidationCompleted(request_id, metric, length) ...
//
// Supported: single, random, grid, async_halving and adaptive_asha (both
// variants: promotion, and stop_once), tpe (tpe.h; also ASHA's sampler) and
// pbt (pbt.h). asha.h holds the successive-halving layout; preview.h
// simulates a whole search (PreviewSearch).
#ifndef DET_MASTER_SEARCH_SEARCHER_H_
#define DET_MASTER_SEARCH_SEARCHER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/experiment_config.h"
#include "nlohmann/json.hpp"

namespace det {
namespace master {

// The searcher's name for a trial, assigned by the searcher: 1, 2, 3, ...
using RequestId = int64_t;

// A trial's seed: the low 32 bits of one draw of `rng`. Random search draws a
// trial's SampleHParams and then this; ASHA and TPE's random proposals draw
// the same, so that with one experiment seed they propose random search's
// trials in its order.
inline uint32_t DrawTrialSeed(std::mt19937_64& rng) { return static_cast<uint32_t>(rng() & 0xffffffffu); }

// Create a trial with these hparams and this seed.
// `parent` (pbt): a trial of this search whose latest checkpoint the new
// trial starts from, with its whole state (model, optimizer, batch counters;
// the optimizer's options come from the new hparams); 0: from scratch.
struct CreateTrialOp {
  RequestId request_id = 0;
  nlohmann::json hparams;
  uint32_t trial_seed = 0;
  RequestId parent = 0;
};
// Train the trial until `length` in the searcher's unit (SearcherLength in
// common/batch_lengths.h: batches, records, epochs or a training metric such
// as tokens; the master converts it per trial with the trial's own
// global_batch_size), then validate and report the searcher metric
// (ValidationCompleted).
struct ValidateAfterOp {
  RequestId request_id = 0;
  int64_t length = 0;
};
// The trial is done: checkpoint and exit (then report TrialClosed).
struct CloseTrialOp {
  RequestId request_id = 0;
};
// The experiment's search is over. `failure`: every trial errored.
struct ShutdownOp {
  bool failure = false;
};
using SearcherOp = std::variant<CreateTrialOp, ValidateAfterOp, CloseTrialOp, ShutdownOp>;

bool operator==(const CreateTrialOp& a, const CreateTrialOp& b);
bool operator==(const ValidateAfterOp& a, const ValidateAfterOp& b);
bool operator==(const CloseTrialOp& a, const CloseTrialOp& b);
bool operator==(const ShutdownOp& a, const ShutdownOp& b);

// "Create(1, seed=..., {...})", "ValidateAfter(1, 100)", "Close(1)",
// "Shutdown" / "Shutdown(failure)": for logs and test messages.
std::string ToString(const SearcherOp& op);

enum class ExitedReason { kErrored, kUserCanceled, kInvalidHp };

// One search method's state. Not thread-safe; events must be delivered in the
// order they happened. Every method returns the operations to carry out next,
// in order.
//
// Event contract: TrialCreated / ValidationCompleted / TrialClosed /
// TrialExitedEarly take a request id from an earlier CreateTrialOp. A trial
// ends with TrialClosed or TrialExitedEarly; an event for an unknown or ended
// trial returns no operations and changes nothing (so TrialClosed after
// TrialExitedEarly is harmless).
class SearchMethod {
 public:
  virtual ~SearchMethod() = default;
  // The first operations; call once, before any other event.
  virtual std::vector<SearcherOp> InitialOperations(std::mt19937_64& rng) = 0;
  // The trial of a CreateTrialOp exists.
  virtual std::vector<SearcherOp> TrialCreated(RequestId id, std::mt19937_64& rng) = 0;
  // The validation of a ValidateAfterOp finished at `length` (searcher units).
  virtual std::vector<SearcherOp> ValidationCompleted(RequestId id, double metric, int64_t length,
                                                      std::mt19937_64& rng) = 0;
  // The trial exited after a CloseTrialOp.
  virtual std::vector<SearcherOp> TrialClosed(RequestId id, std::mt19937_64& rng) = 0;
  // The trial ended without being closed by the searcher.
  virtual std::vector<SearcherOp> TrialExitedEarly(RequestId id, ExitedReason reason, std::mt19937_64& rng) = 0;
  // The fraction of the search done, 0..1. single/random/grid: ended trials /
  // trials to run. async_halving/adaptive_asha: units credited / units
  // planned (see NewSearchMethod); 1 once Shutdown was returned.
  virtual double Progress() const = 0;
  // Progress() counting also the units each trial trained so far toward the
  // ValidateAfter it is working on (`trained`: request id -> units in the
  // searcher's unit, from where the trial's training started, e.g. its batches
  // so far): planned units trained / planned units. The default ignores
  // `trained`.
  virtual double ProgressWithTraining(const std::map<RequestId, double>& trained) const { return Progress(); }
  // The bracket of a trial: adaptive_asha's bracket index (0 = most rungs);
  // 0 for every other method and for unknown trials.
  virtual int64_t TrialBracket(RequestId id) const { return 0; }
  // The full state, so a restarted master resumes the search.
  virtual nlohmann::json Snapshot() const = 0;
  // Replaces the state with a Snapshot() of a method made by NewSearchMethod
  // from the same config. InvalidArgument for a malformed snapshot or one of
  // another search method; the state is unchanged then.
  virtual absl::Status Restore(const nlohmann::json& snapshot) = 0;
};

// The search method of `config.searcher`. `max_length`: the searcher's full
// length in its own unit (SearcherLengthOf(config.searcher).max: max_length's
// value in its unit, or max_time in time_metric's), >= 1. Every length below
// (ValidateAfter, rungs, Progress) is in that unit.
// Semantics (Determined's):
//  - single: one trial; ValidateAfter(max_length); Close after that
//    validation; Shutdown after the close.
//  - random: max_trials trials, at most max_concurrent_trials (0: no limit)
//    open at once; each trial is Create + ValidateAfter(max_length), closed
//    once validated at >= max_length; an ended trial makes room for the next;
//    Shutdown once max_trials trials have ended. A trial that exits early with
//    kInvalidHp does not count and is replaced by a fresh sample.
//  - grid: as random over GridHParams(hyperparameters); the number of trials
//    is the grid size (max_trials, when > 0, caps it); an invalid-hp point is
//    counted as ended, not replaced (it would fail again).
//  - async_halving: one bracket; adaptive_asha: several brackets run side by
//    side, each an async_halving search with its own trials and concurrency
//    (layout, rung lengths, trial and concurrency split: AshaLayoutFor in
//    asha.h). Initial operations create trials round robin over the brackets
//    (one each in turn while a bracket has trials left and room under its
//    concurrency); afterwards a bracket creates a trial whenever it has
//    trials left and fewer than its concurrency are training ("training":
//    created or resumed and not yet validated at its rung; a trial waiting
//    for promotion does not count). A new trial is Create +
//    ValidateAfter(rung 0 length). Metrics are compared as given when
//    smaller_is_better, negated otherwise; a non-finite metric ranks as the
//    worst result. A validation counts only for a training trial at >= its
//    rung's length (others are ignored).
//    Promotion variant (stop_once false): the validation is recorded in the
//    trial's rung k (sorted; ties rank the earlier result first). Top rung:
//    the trial is closed. Otherwise the rung promotes every trial among its
//    best floor(n_k / divisor) results that is not promoted yet (at most one
//    per validation: the reporting trial, or the waiting trial that the
//    larger n_k lets in); a promoted trial gets ValidateAfter(rung k+1
//    length), the others wait (no op; the master may pause them and resume
//    them from their checkpoint when promoted). Once every trial of the
//    bracket is created and has a rung-0 result, each rung from the bottom
//    up that has no trial training toward it closes its waiting trials
//    (they can no longer be promoted); it stops at the first rung with one.
//    stop_once variant: the result is inserted into rung k (ties rank the new
//    result first, at index i = the number of strictly better results); the
//    trial continues (ValidateAfter(next rung length); a validation long
//    enough for several rungs is judged at each in turn) iff k is not the top
//    rung and i < max(1, floor(n_k / divisor)) with n_k counting it;
//    otherwise it is closed at once. A stopped trial never resumes.
//    Exits: kInvalidHp: the trial's results are removed from every rung, it
//    does not count, and a fresh trial replaces it (promotion variant: the
//    rungs it left re-check their best floor(n/divisor)). kErrored /
//    kUserCanceled (and TrialClosed of a trial not asked to close): the
//    trial counts as ended; if it was training, its rung records the worst
//    result for it, so promotions are not blocked; a waiting trial keeps its
//    result, and if promoted later it is recorded as the worst result at the
//    next rung (recursively) instead of training. Shutdown once every
//    bracket created all its trials and every trial ended; failure when all
//    counted trials errored.
//    Progress: units credited / units planned, where a rung-k result
//    (real or worst) credits len_k - len_(k-1) and the plan is, per bracket,
//    sum_k c_k (len_k - len_(k-1)) with c_0 = max_trials, c_(k+1) =
//    floor(c_k / divisor); clamped to 1, and 1 after Shutdown.
//  - tpe: as random, but each trial's hparams are TpeSampler proposals
//    (tpe.h) from the validations so far; max_concurrent_trials 0 means 4
//    (proposals need results to learn from). async_halving/adaptive_asha
//    with `sampler: tpe` draw their trials' hparams from a TpeSampler that
//    ranks results by the rung reached, then the metric; with `rung_metric:
//    best` ASHA records at a rung the trial's best validation so far
//    (normalized), not its latest.
//  - pbt: see pbt.h.
// Each trial draws its hparams (SampleHParams; grid: none) and then a uint32
// trial seed from the rng.
// Errors: InvalidArgument (max_length < 1, max_trials < 1 for random,
// async_halving and adaptive_asha, negative max_concurrent_trials, a space
// that is not a grid for grid; see AshaLayoutFor).
absl::StatusOr<std::unique_ptr<SearchMethod>> NewSearchMethod(const ExperimentConfig& config,
                                                              int64_t max_length);

// Owns a SearchMethod and its rng (seeded with the experiment seed) and keeps
// track of the trials. Methods mirror SearchMethod. Not thread-safe; movable.
class Searcher {
 public:
  enum class TrialState { kCreating, kRunning, kClosing, kEnded };

  // NewSearchMethod(config, max_length) with an rng seeded by
  // config.reproducibility.experiment_seed (0 when unset).
  static absl::StatusOr<Searcher> Create(const ExperimentConfig& config, int64_t max_length);

  // A searcher from Snapshot(), resuming exactly where it was: the same events
  // afterwards yield the same operations. `config` and `max_length`
  // must be those the snapshotted searcher was created with. InvalidArgument
  // for a malformed snapshot; errors of Create.
  static absl::StatusOr<Searcher> Restore(const ExperimentConfig& config, int64_t max_length,
                                          const nlohmann::json& snapshot);

  Searcher(Searcher&&) = default;
  Searcher& operator=(Searcher&&) = default;

  // The first operations; later calls return nothing.
  std::vector<SearcherOp> InitialOperations();
  // The events; see SearchMethod. Unknown or ended trials: no operations.
  std::vector<SearcherOp> TrialCreated(RequestId id);
  std::vector<SearcherOp> ValidationCompleted(RequestId id, double metric, int64_t length);
  std::vector<SearcherOp> TrialClosed(RequestId id);
  std::vector<SearcherOp> TrialExitedEarly(RequestId id, ExitedReason reason);

  double Progress() const;
  // SearchMethod::ProgressWithTraining.
  double ProgressWithTraining(const std::map<RequestId, double>& trained) const;
  // SearchMethod::TrialBracket.
  int64_t TrialBracket(RequestId id) const;
  // Whether a ShutdownOp has been returned.
  bool shutdown() const { return shutdown_; }
  // Every trial of a CreateTrialOp so far, and its state.
  const std::map<RequestId, TrialState>& trials() const { return trials_; }
  // The number of trials ended (closed or exited early).
  int64_t ended_trials() const;

  // {"rng": "<mt19937_64 state>", "method": {...}, "trials": [[id, state],
  // ...], "initialized": bool, "shutdown": bool}.
  nlohmann::json Snapshot() const;

 private:
  explicit Searcher(std::unique_ptr<SearchMethod> method, uint64_t seed);
  // Records the effects of `ops` on trials_/shutdown_; returns `ops`.
  std::vector<SearcherOp> Track(std::vector<SearcherOp> ops);
  bool Live(RequestId id) const;

  std::unique_ptr<SearchMethod> method_;
  std::mt19937_64 rng_;
  std::map<RequestId, TrialState> trials_;
  bool initialized_ = false;
  bool shutdown_ = false;
};

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_SEARCH_SEARCHER_H_
