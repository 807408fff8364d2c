// The training loop of one trial process: trains, validates and checkpoints
// as a plan says, reporting through a Reporter and stopping early when a
// PreemptionSource asks. Used by local mode (plan from the config) and by
// managed mode (operations from the master).
#ifndef DET_TRIAL_RUNTIME_RUNTIME_TRIAL_CONTROLLER_H_
#define DET_TRIAL_RUNTIME_RUNTIME_TRIAL_CONTROLLER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "common/experiment_config.h"
#include "common/length.h"
#include "trial_runtime/runtime/checkpoint.h"
#include "trial_runtime/runtime/profiler.h"
#include "trial_runtime/runtime/trial_loader.h"

namespace det::runtime {

class Distributed;

// Where a trial's results go. Calls come from the training thread only, and
// in a distributed trial from the chief (rank 0) only.
class Reporter {
 public:
  virtual ~Reporter() = default;
  virtual absl::Status ReportTrainingMetrics(int64_t total_batches, double epochs, const MetricsMap& metrics) = 0;
  virtual absl::Status ReportValidationMetrics(int64_t total_batches, double epochs, const MetricsMap& metrics) = 0;
  virtual absl::Status ReportCheckpoint(const SavedCheckpoint& checkpoint, int64_t total_batches) = 0;
  // After every batch; cheap.
  virtual void ReportProgress(int64_t total_batches, int64_t target_batches) {}
  // Metrics of another group (TrialContext::report_metrics).
  virtual absl::Status ReportMetrics(const std::string& group, int64_t total_batches, double epochs,
                                     const MetricsMap& metrics) {
    return absl::OkStatus();
  }
};

// Asked after every batch whether to stop. Must be cheap and thread-safe.
class PreemptionSource {
 public:
  virtual ~PreemptionSource() = default;
  virtual bool ShouldPreempt() = 0;
  // Why, once ShouldPreempt() is true, in words for the trial's log (e.g.
  // "EXIT_REASON_PAUSED" as the master said); "" when unknown.
  virtual std::string Why() const { return ""; }
};

struct TrainingPlan {
  Length max_length{Length::Unit::kBatches, 0};
  // A searcher time_metric that is a training metric (e.g. "tokens"):
  // training reports carry its last value (it is cumulative), not the mean;
  // local mode (Run) trains until it reaches max_time (max_length is then
  // unused). Empty: train max_length.
  std::string time_metric;
  int64_t max_time = 0;
  std::optional<Length> min_validation_period;
  std::optional<Length> min_checkpoint_period;
  int64_t records_per_epoch = 0;  // 0: an epoch is one pass of the training loader
  int64_t scheduling_unit = 100;  // training metrics are averaged over this many batches
  bool perform_initial_validation = false;
  // Run() checkpoints after a validation this policy asks for
  // (common/validation_policy.h); managed mode leaves it kNone: the master decides.
  CheckpointPolicy checkpoint_policy = CheckpointPolicy::kNone;
  bool smaller_is_better = true;
  std::string searcher_metric;  // must appear in validation metrics when set
  std::string checkpoint_dir;
  // Set for a checkpoint_storage of type s3 (managed mode): the chief calls
  // it with each checkpoint written under checkpoint_dir (then a private
  // staging directory) before anything is reported; it uploads and returns
  // the checkpoint as reported (path: its s3:// URL). An error fails the
  // checkpoint: it is not reported.
  std::function<absl::StatusOr<SavedCheckpoint>(const SavedCheckpoint&)> publish_checkpoint;
  nlohmann::json checkpoint_metadata = nlohmann::json::object();  // merged into metadata.json
  // The config's profiling section: the chief (rank 0) profiles when enabled.
  ProfilingConfig profiling;
};

enum class TrialOutcome { kCompleted, kPaused };

// TrainToMetric fails when a time_metric was never reported after this many
// scheduling units.
inline constexpr int64_t kTimeMetricProbeUnits = 10;

// In a distributed trial (`dist` given, size > 1) every rank runs its own
// controller through the same sequence of calls, and the controller keeps
// the ranks in step: each rank trains on its shard of every global batch;
// training metrics are averaged over ranks and batches; validation metrics
// are reduced over all ranks' batches with the trial's evaluation_reducer
// (kAvg weighs each batch by its sample count, so it is the per-sample mean)
// (evaluate_full_dataset runs on the chief alone, over the whole validation
// set); every rank stops at the same batch when any rank's preemption source
// fires; only the chief reports and writes checkpoints (holding every rank's
// random state), the others learn the result. A rank whose peer failed gets
// an Unavailable error from the next collective call.
class TrialController {
 public:
  // Builds the data loaders and callbacks and converts the plan's lengths to
  // batches. Requires handle/context/reporter/preemption (and dist, when
  // given) to outlive it; context's distributed() must match dist.
  static absl::StatusOr<std::unique_ptr<TrialController>> Create(TrialHandle* handle, TrialContext* context,
                                                                 Reporter* reporter, PreemptionSource* preemption,
                                                                 TrainingPlan plan, Distributed* dist = nullptr);

  // Restores state from a checkpoint directory; call before Run().
  absl::Status Restore(const std::string& checkpoint_dir);

  // Trains to the plan's max length with periodic validation/checkpoints,
  // then validates and checkpoints. kPaused when preempted (a checkpoint is
  // written first). Errors name the failing trial method.
  absl::StatusOr<TrialOutcome> Run();

  // Building blocks for managed mode.
  // Trains until batches_trained() == target or preemption; reports training
  // metrics every scheduling_unit batches.
  absl::Status TrainTo(int64_t target, bool* preempted);
  // Trains scheduling_unit batches at a time until the last value of the
  // training metric `metric` (reported cumulatively by train_batch) is >=
  // `target`, until batches_trained() == `cap` when cap > 0, or preemption.
  // Checked at every multiple of scheduling_unit, so training stops within
  // one scheduling unit of the target. InvalidArgument naming the metric when
  // no batch of this process has reported it after kTimeMetricProbeUnits
  // scheduling units. Distributed: every rank stops when any rank reached it.
  absl::Status TrainToMetric(const std::string& metric, double target, int64_t cap, bool* preempted);
  // The last per-batch value of training metric `name` (from this process or
  // the restored checkpoint), if it was ever reported.
  std::optional<double> last_training_value(const std::string& name) const;
  // The value a searcher length counted by the runtime has reached:
  // last_training_value(name), except that "epochs" the trial does not
  // report itself is epochs() of its training data loader.
  std::optional<double> time_metric_value(const std::string& name) const;
  absl::StatusOr<MetricsMap> Validate();
  absl::StatusOr<SavedCheckpoint> Checkpoint();
  // The end of the trial's profiling: the last `profiling` and `system`
  // rows (profiler.h). Run() calls it; managed mode before it exits.
  void FinishProfiling();
  // Detaches the context's report_metrics from this controller.
  ~TrialController();

  int64_t batches_trained() const { return batches_trained_; }
  int64_t max_batches() const { return max_batches_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // Seconds spent in the training step loop (loading, train_batch,
  // reporting), excluding validation and checkpoints.
  double training_seconds() const { return training_seconds_; }
  int64_t batches_this_run() const { return batches_this_run_; }
  const std::optional<SavedCheckpoint>& latest_checkpoint() const { return latest_checkpoint_; }

 private:
  TrialController(TrialHandle* handle, TrialContext* context, Reporter* reporter, PreemptionSource* preemption,
                  TrainingPlan plan, Distributed* dist)
      : handle_(handle),
        context_(context),
        reporter_(reporter),
        preemption_(preemption),
        plan_(std::move(plan)),
        dist_(dist) {}
  absl::Status ReportTraining();
  // The harness's work after training batch `epoch_idx`'s train_batch
  // returned `metrics` (the profiler's runtime_s): bookkeeping, LR
  // schedulers, epoch-end callbacks, reports, progress and, before `target`,
  // the stop vote (*stop: a preemption).
  absl::Status AfterTrainBatch(const MetricsMap& metrics, int64_t epoch_idx, int64_t target, bool* stop);
  // Validate and Checkpoint, each timed as its profiling phase.
  absl::StatusOr<MetricsMap> ValidateUnprofiled();
  absl::StatusOr<SavedCheckpoint> CheckpointUnprofiled();
  // A profiler row through reporter_ (a refusal is said once on stderr).
  void ReportProfile(const std::string& group, int64_t total_batches, const MetricsMap& row);
  // TrialContext::report_metrics through reporter_ (the chief only).
  std::string ReportOtherMetrics(const std::string& group, const MetricsMap& metrics);
  double epochs() const;
  nlohmann::json RuntimeState() const;
  bool distributed() const;
  // Whether this rank reports (1 rank, or the chief).
  bool reports() const;
  // Whether any rank's preemption source fires (a collective when distributed).
  absl::StatusOr<bool> ShouldStop();
  // Replaces pending_ by its per-batch mean over the ranks (collective).
  absl::Status AverageMetricsAcrossRanks();
  // Reduces every validation metric's per-batch values (with each batch's
  // sample count, 0 when unknown) with the trial's evaluation_reducer; warns
  // once per metric when kAvg had to fall back to the per-batch mean.
  absl::StatusOr<MetricsMap> ReduceValidation(const std::map<std::string, std::vector<double>>& values,
                                              const std::map<std::string, std::vector<int64_t>>& counts);
  // The chief runs evaluate_full_dataset over the whole validation set and
  // hands the result (or "not overridden") to the others.
  absl::StatusOr<std::optional<MetricsMap>> EvaluateFullDatasetOnChief();
  // A periodic validation in Run(), then the checkpoint checkpoint_policy
  // asks for after it.
  absl::Status ValidateThenMaybeCheckpoint();
  absl::StatusOr<SavedCheckpoint> SaveOnChief(const nlohmann::json& meta, const std::vector<RngState>& rank_rng);

  TrialHandle* handle_;
  TrialContext* context_;
  Reporter* reporter_;
  PreemptionSource* preemption_;
  TrainingPlan plan_;
  Distributed* dist_;  // null: one rank
  // Whether the trial overrides evaluate_full_dataset (known after the first
  // validation; only asked of the chief in a distributed trial).
  std::optional<bool> full_dataset_;
  std::unique_ptr<DataLoader> train_loader_;
  std::unique_ptr<DataLoader> validation_loader_;
  std::unique_ptr<BatchStream> train_stream_;
  CallbackMap callbacks_;
  std::map<std::string, Reducer> reducers_;
  std::set<std::string> warned_unweighted_;  // metrics warned of a batch without a sample count

  int64_t max_batches_ = 0;
  int64_t batches_per_epoch_ = 0;
  int64_t validation_period_ = 0;
  int64_t checkpoint_period_ = 0;
  int64_t batches_trained_ = 0;
  int64_t last_validation_batch_ = -1;
  int64_t last_checkpoint_batch_ = -1;
  std::optional<double> best_validation_;  // this run's best searcher metric (checkpoint_policy best)
  bool startup_done_ = false;
  // Training metrics of batches not yet reported; checkpointed so that a
  // resumed run reports exactly what an uninterrupted one does.
  std::map<std::string, std::vector<double>> pending_;
  int64_t pending_batches_ = 0;
  // The last value of every training metric (checkpointed): what a
  // time_metric such as tokens compares with its target.
  std::map<std::string, double> last_values_;
  // Batch at which this process first trained toward a time_metric.
  std::optional<int64_t> metric_probe_start_;
  bool metric_reached_ = false;  // the last TrainToMetric reached its target
  double training_seconds_ = 0;
  int64_t batches_this_run_ = 0;
  std::optional<SavedCheckpoint> latest_checkpoint_;
  // The profiler: the chief's, only with profiling.enabled (else null).
  std::unique_ptr<ProfilerClock> profile_clock_;
  std::unique_ptr<SystemSampler> system_sampler_;
  std::unique_ptr<Profiler> profiler_;
  bool profile_refusal_said_ = false;
};

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_TRIAL_CONTROLLER_H_
