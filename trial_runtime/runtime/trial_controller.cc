#include "trial_runtime/runtime/trial_controller.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/batch_lengths.h"
#include "common/status_macros.h"
#include "common/validation_policy.h"
#include "trial_runtime/runtime/distributed.h"
#include "trial_runtime/runtime/system_sampler.h"

namespace det::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Calls fn on every callback, turning an exception into a status naming the
// callback and the hook.
template <typename F>
absl::Status ForEachCallback(const CallbackMap& callbacks, const char* hook, F&& fn) {
  for (const auto& [name, cb] : callbacks) {
    try {
      fn(*cb);
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("callback '", name, "' failed in ", hook, ": ",
                                              e.what_without_backtrace()));
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("callback '", name, "' failed in ", hook, ": ", e.what()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Batch>> NextBatch(BatchStream& stream, const char* which) {
  int64_t k = stream.position();
  try {
    return stream.Next();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(which, " data loader failed at batch ", k, ": ",
                                            e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(which, " data loader failed at batch ", k, ": ", e.what()));
  }
}

std::string Pack(const nlohmann::json& j) {
  std::vector<uint8_t> v = nlohmann::json::to_msgpack(j);
  return std::string(v.begin(), v.end());
}

absl::StatusOr<nlohmann::json> Unpack(const std::string& bytes, const char* what) {
  nlohmann::json j = nlohmann::json::from_msgpack(bytes, /*strict=*/true, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InternalError(absl::StrCat("malformed ", what, " from another rank"));
  return j;
}

using ValueLists = std::map<std::string, std::vector<double>>;

absl::StatusOr<ValueLists> ToValueLists(const nlohmann::json& j, const char* what) {
  try {
    return j.get<ValueLists>();
  } catch (const nlohmann::json::exception& e) {
    return absl::InternalError(absl::StrCat("malformed ", what, " from another rank: ", e.what()));
  }
}

using CountLists = std::map<std::string, std::vector<int64_t>>;

// Samples in a validation batch: dim 0 of its first tensor (Batch::size());
// 0 when the batch holds no tensor with a first dimension.
int64_t SampleCount(const Batch& batch) {
  try {
    return std::max<int64_t>(batch.size(), 0);
  } catch (const std::exception&) {
    return 0;
  }
}

// Appends one rank's {"values": ValueLists, "counts": CountLists} to *values
// and *counts, each value with its count.
absl::Status AppendRankValues(const nlohmann::json& j, ValueLists* values, CountLists* counts) {
  try {
    auto v = j.at("values").get<ValueLists>();
    auto n = j.at("counts").get<CountLists>();
    for (auto& [name, list] : v) {
      const std::vector<int64_t>& c = n.at(name);
      if (c.size() != list.size()) throw std::out_of_range("counts and values differ in length");
      (*values)[name].insert((*values)[name].end(), list.begin(), list.end());
      (*counts)[name].insert((*counts)[name].end(), c.begin(), c.end());
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("malformed validation metrics from another rank: ", e.what()));
  }
  return absl::OkStatus();
}

// The per-batch mean over ranks of every rank's training metrics (index =
// rank); the ranks must report the same metrics for the same batches.
absl::StatusOr<ValueLists> MeanOverRanks(std::vector<ValueLists> per_rank) {
  ValueLists sum = std::move(per_rank.at(0));
  for (size_t r = 1; r < per_rank.size(); ++r) {
    if (per_rank[r].size() != sum.size()) {
      return absl::InternalError(absl::StrCat("ranks 0 and ", r, " report different training metrics: the trial ",
                                              "must return the same metrics on every rank"));
    }
    for (const auto& [name, values] : per_rank[r]) {
      auto it = sum.find(name);
      if (it == sum.end() || it->second.size() != values.size()) {
        return absl::InternalError(absl::StrCat("ranks 0 and ", r, " disagree on training metric '", name,
                                                "': the trial must return the same metrics on every rank"));
      }
      for (size_t i = 0; i < values.size(); ++i) it->second[i] += values[i];
    }
  }
  const double n = static_cast<double>(per_rank.size());
  for (auto& [name, values] : sum) {
    for (double& v : values) v /= n;
  }
  return sum;
}

}  // namespace

bool TrialController::distributed() const { return dist_ != nullptr && dist_->size() > 1; }

bool TrialController::reports() const { return !distributed() || dist_->is_chief(); }

absl::StatusOr<bool> TrialController::ShouldStop() {
  bool local = preemption_->ShouldPreempt();
  if (!distributed()) return local;
  return dist_->AnyTrue(local);
}

absl::Status TrialController::AverageMetricsAcrossRanks() {
  DET_ASSIGN_OR_RETURN(std::vector<std::string> all, dist_->AllGather(Pack(pending_)));
  std::vector<ValueLists> per_rank;
  for (const std::string& bytes : all) {
    DET_ASSIGN_OR_RETURN(nlohmann::json j, Unpack(bytes, "training metrics"));
    DET_ASSIGN_OR_RETURN(ValueLists lists, ToValueLists(j, "training metrics"));
    per_rank.push_back(std::move(lists));
  }
  DET_ASSIGN_OR_RETURN(pending_, MeanOverRanks(std::move(per_rank)));
  return absl::OkStatus();
}

TrialController::~TrialController() { context_->set_metrics_sink(nullptr); }

std::string TrialController::ReportOtherMetrics(const std::string& group, const MetricsMap& metrics) {
  if (group == "profiling" || group == "system") return "group '" + group + "' is reported by the runtime itself";
  if (!reports()) return "";
  absl::Status st = reporter_->ReportMetrics(group, batches_trained_, epochs(), metrics);
  return st.ok() ? "" : std::string(st.message());
}

absl::StatusOr<std::unique_ptr<TrialController>> TrialController::Create(TrialHandle* handle, TrialContext* context,
                                                                         Reporter* reporter,
                                                                         PreemptionSource* preemption,
                                                                         TrainingPlan plan, Distributed* dist) {
  if (dist != nullptr && (dist->size() != context->distributed().size() ||
                          dist->rank() != context->distributed().rank())) {
    return absl::InternalError("the trial context's rank and size differ from the process group's");
  }
  std::unique_ptr<TrialController> c(
      new TrialController(handle, context, reporter, preemption, std::move(plan), dist));
  TrialController* raw = c.get();
  context->set_metrics_sink([raw](const std::string& group, const MetricsMap& metrics) {
    return raw->ReportOtherMetrics(group, metrics);
  });
  // An earlier run of this trial that died mid-save (a full disk, a kill)
  // left its temporary directory: the chief removes them before it saves.
  if (context->distributed().rank() == 0 && !c->plan_.checkpoint_dir.empty()) {
    if (int n = RemoveStaleCheckpointTemps(c->plan_.checkpoint_dir, context->get_trial_id()); n > 0) {
      std::printf("[det-trial] removed %d unfinished checkpoint director%s of an earlier run of trial %lld (%s%s*)\n",
                  n, n == 1 ? "y" : "ies", static_cast<long long>(context->get_trial_id()),
                  c->plan_.checkpoint_dir.c_str(), ("/" + CheckpointTempPrefix(context->get_trial_id())).c_str());
      std::fflush(stdout);
    }
  }
  DET_ASSIGN_OR_RETURN(c->train_loader_, handle->BuildTrainingDataLoader());
  DET_ASSIGN_OR_RETURN(c->validation_loader_, handle->BuildValidationDataLoader());
  DET_ASSIGN_OR_RETURN(c->callbacks_, handle->BuildCallbacks());
  const auto& ranks = context->distributed();
  try {
    c->train_loader_->Configure(ranks.rank(), ranks.size(), context->get_trial_seed());
    c->validation_loader_->Configure(ranks.rank(), ranks.size(), context->get_trial_seed());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (c->train_loader_->batches_per_epoch() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("the training data loader yields no batch: dataset of ",
                                                   c->train_loader_->dataset_size(), " records, batch size ",
                                                   c->train_loader_->options().batch_size()));
  }
  if (c->validation_loader_->batches_per_epoch() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("the validation data loader yields no batch: dataset of ",
                                                   c->validation_loader_->dataset_size(), " records, batch size ",
                                                   c->validation_loader_->options().batch_size()));
  }
  TrainingLengths plan_lengths;
  plan_lengths.max_length = c->plan_.max_length;
  plan_lengths.min_validation_period = c->plan_.min_validation_period;
  plan_lengths.min_checkpoint_period = c->plan_.min_checkpoint_period;
  plan_lengths.records_per_epoch = c->plan_.records_per_epoch;
  // 0 when the hparams have no global_batch_size: fine for lengths in
  // batches, epochs from the loader's length, or a training metric.
  DET_ASSIGN_OR_RETURN(BatchLengths lengths, ResolveBatchLengths(plan_lengths, context->global_batch_size_or_zero(),
                                                                 c->train_loader_->batches_per_epoch()));
  c->batches_per_epoch_ = lengths.batches_per_epoch;
  c->max_batches_ = lengths.max_length;
  c->validation_period_ = lengths.validation_period;
  c->checkpoint_period_ = lengths.checkpoint_period;
  if (c->plan_.scheduling_unit <= 0) c->plan_.scheduling_unit = 100;
  if (c->plan_.profiling.enabled && context->distributed().rank() == 0) {
    // profiling.sync_timings: on CUDA, every stamp waits for the device's queued work.
    c->profile_clock_ = MakeSteadyProfilerClock(c->plan_.profiling.sync_timings && context->device().is_cuda());
    DET_ASSIGN_OR_RETURN(c->system_sampler_, MakeProcessSystemSampler());
    c->profiler_ = std::make_unique<Profiler>(
        c->plan_.profiling, c->profile_clock_.get(), c->system_sampler_.get(),
        [raw](const std::string& group, int64_t total_batches, const MetricsMap& row) {
          raw->ReportProfile(group, total_batches, row);
        });
  }
  return c;
}

double TrialController::epochs() const {
  return static_cast<double>(batches_trained_) / static_cast<double>(batches_per_epoch_);
}

nlohmann::json TrialController::RuntimeState() const {
  return {
      {"batches_trained", batches_trained_},
      {"last_validation_batch", last_validation_batch_},
      {"last_checkpoint_batch", last_checkpoint_batch_},
      {"pending_training_metrics", pending_},
      {"pending_training_batches", pending_batches_},
      {"last_training_values", last_values_},
  };
}

absl::Status TrialController::Restore(const std::string& checkpoint_dir) {
  DET_ASSIGN_OR_RETURN(nlohmann::json meta, LoadCheckpoint(checkpoint_dir, *context_, callbacks_));
  try {
    const nlohmann::json& rs = meta.at("runtime_state");
    batches_trained_ = rs.at("batches_trained").get<int64_t>();
    last_validation_batch_ = rs.at("last_validation_batch").get<int64_t>();
    last_checkpoint_batch_ = rs.at("last_checkpoint_batch").get<int64_t>();
    pending_ = rs.at("pending_training_metrics").get<std::map<std::string, std::vector<double>>>();
    pending_batches_ = rs.at("pending_training_batches").get<int64_t>();
    // Absent in checkpoints of older runtimes.
    last_values_ = rs.value("last_training_values", std::map<std::string, double>());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", checkpoint_dir, "' has no valid runtime_state: ", e.what()));
  }
  SavedCheckpoint ck;
  ck.uuid = meta.value("uuid", std::string());
  ck.path = checkpoint_dir;
  latest_checkpoint_ = ck;
  train_stream_.reset();
  return absl::OkStatus();
}

absl::Status TrialController::ReportTraining() {
  if (pending_batches_ == 0) return absl::OkStatus();
  if (distributed()) DET_RETURN_IF_ERROR(AverageMetricsAcrossRanks());
  MetricsMap avg;
  for (const auto& [name, values] : pending_) {
    // A time_metric is cumulative: its last value, not the unit's mean.
    avg[name] = name == plan_.time_metric && !values.empty() ? values.back() : Reduce(Reducer::kAvg, values);
  }
  pending_.clear();
  pending_batches_ = 0;
  if (!reports()) return absl::OkStatus();
  return reporter_->ReportTrainingMetrics(batches_trained_, epochs(), avg);
}

absl::Status TrialController::AfterTrainBatch(const MetricsMap& metrics, int64_t epoch_idx, int64_t target,
                                              bool* stop) {
  if (GradScaler* scaler = context_->grad_scaler()) scaler->update();
  for (const auto& [name, value] : metrics) {
    pending_[name].push_back(value);
    last_values_[name] = value;
  }
  ++pending_batches_;
  ++batches_trained_;
  ++batches_this_run_;
  for (const auto& s : context_->lr_schedulers()) {
    if (s.mode == LRSchedulerStepMode::kStepEveryBatch) s.scheduler->step();
  }
  if (batches_trained_ % batches_per_epoch_ == 0) {
    DET_RETURN_IF_ERROR(ForEachCallback(callbacks_, "on_training_epoch_end",
                                        [&](Callback& cb) { cb.on_training_epoch_end(epoch_idx); }));
    for (const auto& s : context_->lr_schedulers()) {
      if (s.mode == LRSchedulerStepMode::kStepEveryEpoch) s.scheduler->step();
    }
  }
  if (batches_trained_ % plan_.scheduling_unit == 0 || batches_trained_ == max_batches_) {
    DET_RETURN_IF_ERROR(ReportTraining());
  }
  if (reports()) reporter_->ReportProgress(batches_trained_, max_batches_);
  if (batches_trained_ < target) {
    DET_ASSIGN_OR_RETURN(*stop, ShouldStop());
  }
  return absl::OkStatus();
}

absl::Status TrialController::TrainTo(int64_t target, bool* preempted) {
  *preempted = false;
  for (const auto& m : context_->models()) m->train();
  if (!train_stream_ || train_stream_->position() != batches_trained_) {
    train_stream_.reset();
    train_stream_ = train_loader_->Stream(batches_trained_);
  }
  const torch::Device device = context_->device();
  auto start = Clock::now();
  absl::Status status;
  Profiler* prof = profiler_.get();  // null: profiling off (or not the chief)
  while (batches_trained_ < target) {
    if (prof != nullptr) prof->BeforeBatch(batches_trained_);
    const int64_t epoch_idx = batches_trained_ / batches_per_epoch_;
    if (batches_trained_ % batches_per_epoch_ == 0) {
      ProfileScope timed(prof, ProfilePhase::kRuntime);
      status = ForEachCallback(callbacks_, "on_training_epoch_start",
                               [&](Callback& cb) { cb.on_training_epoch_start(epoch_idx); });
      if (!status.ok()) break;
    }
    std::optional<Batch> batch;
    {
      ProfileScope timed(prof, ProfilePhase::kDataLoader);
      auto next = NextBatch(*train_stream_, "training");
      if (!next.ok()) {
        status = next.status();
        break;
      }
      batch = device.is_cpu() ? std::move(**next) : (*next)->to(device);
    }
    // Samples of the global batch (every rank's shard is as large), for the profiler.
    const int64_t samples =
        prof != nullptr && prof->active() ? SampleCount(*batch) * context_->distributed().size() : 0;
    absl::StatusOr<MetricsMap> metrics;
    {
      ProfileScope timed(prof, ProfilePhase::kForward);
      AutocastGuard autocast(*context_);  // a no-op without mixed precision
      metrics = handle_->TrainBatch(*batch, epoch_idx, batches_trained_);
    }
    if (!metrics.ok()) {
      status = metrics.status();
      break;
    }
    bool stop = false;
    {
      ProfileScope timed(prof, ProfilePhase::kRuntime);
      status = AfterTrainBatch(*metrics, epoch_idx, target, &stop);
    }
    if (!status.ok()) break;
    if (prof != nullptr) prof->AfterBatch(samples);
    if (stop) {
      *preempted = true;
      break;
    }
  }
  if (prof != nullptr) prof->EndOperation(batches_trained_);
  training_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  return status;
}

std::optional<double> TrialController::last_training_value(const std::string& name) const {
  auto it = last_values_.find(name);
  if (it == last_values_.end()) return std::nullopt;
  return it->second;
}

std::optional<double> TrialController::time_metric_value(const std::string& name) const {
  std::optional<double> value = last_training_value(name);
  if (!value && name == "epochs") value = epochs();
  return value;
}

absl::Status TrialController::TrainToMetric(const std::string& metric, double target, int64_t cap, bool* preempted) {
  *preempted = false;
  const int64_t unit = plan_.scheduling_unit;
  if (!metric_probe_start_) metric_probe_start_ = batches_trained_;
  // Epochs of the data loader end exactly at an epoch's last batch.
  if (metric == "epochs" && !last_training_value(metric) && std::isfinite(target)) {
    const auto epoch_end = static_cast<int64_t>(std::ceil(target * static_cast<double>(batches_per_epoch_)));
    if (epoch_end > batches_trained_) cap = cap > 0 ? std::min(cap, epoch_end) : epoch_end;
  }
  while (true) {
    const std::optional<double> value = time_metric_value(metric);
    bool reached = value.has_value() && *value >= target;  // NaN never reaches
    if (distributed()) {
      DET_ASSIGN_OR_RETURN(reached, dist_->AnyTrue(reached));
    }
    metric_reached_ = reached;
    if (reached || (cap > 0 && batches_trained_ >= cap)) return absl::OkStatus();
    if (!value && batches_trained_ - *metric_probe_start_ >= kTimeMetricProbeUnits * unit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "searcher.time_metric '", metric, "': the trial reported no training metric '", metric, "' in ",
          batches_trained_ - *metric_probe_start_, " batches (", kTimeMetricProbeUnits,
          " scheduling units); train_batch must return it (cumulative, e.g. tokens seen so far)"));
    }
    int64_t next = (batches_trained_ / unit + 1) * unit;
    if (cap > 0) next = std::min(next, cap);
    DET_RETURN_IF_ERROR(TrainTo(next, preempted));
    if (*preempted) return absl::OkStatus();
  }
}

absl::StatusOr<MetricsMap> TrialController::Validate() {
  absl::StatusOr<MetricsMap> result;
  {
    ProfileScope timed(profiler_.get(), ProfilePhase::kValidation);
    result = ValidateUnprofiled();
  }
  if (profiler_) profiler_->EndOperation(batches_trained_);
  return result;
}

absl::StatusOr<MetricsMap> TrialController::ValidateUnprofiled() {
  DET_RETURN_IF_ERROR(ForEachCallback(callbacks_, "on_validation_start", [](Callback& cb) { cb.on_validation_start(); }));
  for (const auto& m : context_->models()) m->eval();
  MetricsMap result;
  {
    torch::NoGradGuard no_grad;
    std::optional<MetricsMap> full;
    if (!distributed()) {
      DET_ASSIGN_OR_RETURN(full, handle_->EvaluateFullDataset(*validation_loader_));
    } else if (full_dataset_.value_or(true)) {
      DET_ASSIGN_OR_RETURN(full, EvaluateFullDatasetOnChief());
    }
    if (full) {
      result = std::move(*full);
    } else {
      ValueLists values;
      CountLists counts;  // each value's batch sample count (0: unknown)
      const torch::Device device = context_->device();
      auto stream = validation_loader_->Stream(0, validation_loader_->batches_per_epoch());
      for (int64_t idx = 0;; ++idx) {
        DET_ASSIGN_OR_RETURN(std::optional<Batch> next, NextBatch(*stream, "validation"));
        if (!next) break;
        Batch batch = device.is_cpu() ? std::move(*next) : next->to(device);
        const int64_t samples = SampleCount(batch);  // before the trial sees (and may change) it
        absl::StatusOr<MetricsMap> evaluated;
        {
          AutocastGuard autocast(*context_);
          evaluated = handle_->EvaluateBatch(batch, idx);
        }
        DET_ASSIGN_OR_RETURN(MetricsMap m, std::move(evaluated));
        for (const auto& [name, v] : m) {
          values[name].push_back(v);
          counts[name].push_back(samples);
        }
      }
      if (distributed()) {
        // Every rank's batch values and sample counts, in rank order: reducing
        // them all at once weighs each batch of each rank as one rank would.
        DET_ASSIGN_OR_RETURN(std::vector<std::string> all,
                             dist_->AllGather(Pack(nlohmann::json{{"values", values}, {"counts", counts}})));
        values.clear();
        counts.clear();
        for (const std::string& bytes : all) {
          DET_ASSIGN_OR_RETURN(nlohmann::json j, Unpack(bytes, "validation metrics"));
          DET_RETURN_IF_ERROR(AppendRankValues(j, &values, &counts));
        }
      }
      DET_ASSIGN_OR_RETURN(result, ReduceValidation(values, counts));
    }
  }
  for (const auto& m : context_->models()) m->train();
  if (!plan_.searcher_metric.empty() && result.count(plan_.searcher_metric) == 0) {
    std::vector<std::string> names;
    for (const auto& [name, v] : result) names.push_back(name);
    return absl::InvalidArgumentError(absl::StrCat("validation metrics lack the searcher metric '",
                                                   plan_.searcher_metric, "' (searcher.metric); the trial reported: ",
                                                   names.empty() ? "nothing" : absl::StrJoin(names, ", ")));
  }
  last_validation_batch_ = batches_trained_;
  if (reports()) DET_RETURN_IF_ERROR(reporter_->ReportValidationMetrics(batches_trained_, epochs(), result));
  DET_RETURN_IF_ERROR(
      ForEachCallback(callbacks_, "on_validation_end", [&](Callback& cb) { cb.on_validation_end(result); }));
  return result;
}

absl::StatusOr<MetricsMap> TrialController::ReduceValidation(
    const std::map<std::string, std::vector<double>>& values,
    const std::map<std::string, std::vector<int64_t>>& counts) {
  MetricsMap result;
  for (const auto& [name, v] : values) {
    auto it = reducers_.find(name);
    if (it == reducers_.end()) {
      DET_ASSIGN_OR_RETURN(Reducer r, handle_->EvaluationReducer(name));
      it = reducers_.emplace(name, r).first;
    }
    auto c = counts.find(name);
    bool unweighted = false;
    result[name] = Reduce(it->second, v, c == counts.end() ? std::vector<int64_t>() : c->second, &unweighted);
    if (unweighted && warned_unweighted_.insert(name).second && reports()) {
      std::fprintf(stderr,
                   "det-trial: warning: validation metric '%s': a validation batch holds no tensor with a first "
                   "dimension, so its sample count is unknown and the default kAvg reducer averages the per-batch "
                   "values (each batch counts once); yield tensor batches for a per-sample mean, or return "
                   "det::Reducer::kAvgPerBatch from evaluation_reducer to say so\n",
                   name.c_str());
    }
  }
  return result;
}

absl::StatusOr<std::optional<MetricsMap>> TrialController::EvaluateFullDatasetOnChief() {
  std::optional<MetricsMap> full;
  if (dist_->is_chief()) {
    DataLoader whole = *validation_loader_;
    whole.Configure(0, 1, context_->get_trial_seed());
    // An error ends the chief, which ends the others' wait.
    DET_ASSIGN_OR_RETURN(full, handle_->EvaluateFullDataset(whole));
    nlohmann::json msg = {{"full", full.has_value()}, {"metrics", full ? nlohmann::json(*full) : nlohmann::json()}};
    DET_RETURN_IF_ERROR(dist_->Publish(Pack(msg)));
  } else {
    DET_ASSIGN_OR_RETURN(std::string bytes, dist_->Receive());
    DET_ASSIGN_OR_RETURN(nlohmann::json msg, Unpack(bytes, "full-dataset validation result"));
    try {
      if (msg.at("full").get<bool>()) full = msg.at("metrics").get<MetricsMap>();
    } catch (const nlohmann::json::exception& e) {
      return absl::InternalError(absl::StrCat("malformed full-dataset validation result from the chief: ", e.what()));
    }
  }
  full_dataset_ = full.has_value();
  return full;
}

absl::StatusOr<SavedCheckpoint> TrialController::SaveOnChief(const nlohmann::json& meta,
                                                            const std::vector<RngState>& rank_rng) {
  if (!distributed() || dist_->is_chief()) {
    auto saved = SaveCheckpoint(plan_.checkpoint_dir, *context_, callbacks_, meta, rank_rng);
    if (saved.ok() && plan_.publish_checkpoint) saved = plan_.publish_checkpoint(*saved);
    if (distributed()) {
      nlohmann::json msg = saved.ok() ? nlohmann::json{{"ok", true},
                                                       {"uuid", saved->uuid},
                                                       {"path", saved->path},
                                                       {"resources", saved->resources}}
                                      : nlohmann::json{{"ok", false}, {"error", std::string(saved.status().message())}};
      DET_RETURN_IF_ERROR(dist_->Publish(Pack(msg)));
    }
    return saved;
  }
  DET_ASSIGN_OR_RETURN(std::string bytes, dist_->Receive());
  DET_ASSIGN_OR_RETURN(nlohmann::json msg, Unpack(bytes, "checkpoint result"));
  try {
    if (!msg.at("ok").get<bool>()) {
      return absl::InternalError(
          absl::StrCat("the chief failed to write the checkpoint: ", msg.at("error").get<std::string>()));
    }
    SavedCheckpoint ck;
    ck.uuid = msg.at("uuid").get<std::string>();
    ck.path = msg.at("path").get<std::string>();
    ck.resources = msg.at("resources").get<std::map<std::string, int64_t>>();
    return ck;
  } catch (const nlohmann::json::exception& e) {
    return absl::InternalError(absl::StrCat("malformed checkpoint result from the chief: ", e.what()));
  }
}

absl::StatusOr<SavedCheckpoint> TrialController::Checkpoint() {
  absl::StatusOr<SavedCheckpoint> saved;
  {
    ProfileScope timed(profiler_.get(), ProfilePhase::kCheckpoint);
    saved = CheckpointUnprofiled();
  }
  if (profiler_) profiler_->EndOperation(batches_trained_);
  return saved;
}

void TrialController::FinishProfiling() {
  if (profiler_) profiler_->Finish(batches_trained_);
}

void TrialController::ReportProfile(const std::string& group, int64_t total_batches, const MetricsMap& row) {
  const double epochs = batches_per_epoch_ > 0 ? static_cast<double>(total_batches) / batches_per_epoch_ : 0;
  absl::Status st = reporter_->ReportMetrics(group, total_batches, epochs, row);
  if (!st.ok() && !profile_refusal_said_) {
    profile_refusal_said_ = true;
    std::fprintf(stderr, "[det-trial] warning: a %s profiler row was not stored (training goes on): %s\n",
                 group.c_str(), std::string(st.message()).c_str());
  }
}

absl::StatusOr<SavedCheckpoint> TrialController::CheckpointUnprofiled() {
  std::vector<RngState> rank_rng;
  if (distributed()) {
    // One exchange: the training metrics not yet reported (averaged over the
    // ranks, so the checkpoint holds what every rank will report) and every
    // rank's random state (the chief saves them all).
    nlohmann::json mine = {{"pending", pending_}, {"rng", RngStateToJson(CaptureRngState(*context_))}};
    DET_ASSIGN_OR_RETURN(std::vector<std::string> all, dist_->AllGather(Pack(mine)));
    std::vector<ValueLists> per_rank;
    for (const std::string& bytes : all) {
      DET_ASSIGN_OR_RETURN(nlohmann::json j, Unpack(bytes, "checkpoint state"));
      if (!j.is_object() || !j.contains("pending") || !j.contains("rng")) {
        return absl::InternalError("malformed checkpoint state from another rank");
      }
      DET_ASSIGN_OR_RETURN(RngState st, RngStateFromJson(j["rng"]));
      rank_rng.push_back(std::move(st));
      DET_ASSIGN_OR_RETURN(ValueLists lists, ToValueLists(j["pending"], "training metrics"));
      per_rank.push_back(std::move(lists));
    }
    DET_ASSIGN_OR_RETURN(pending_, MeanOverRanks(std::move(per_rank)));
  }
  int64_t previous = last_checkpoint_batch_;
  last_checkpoint_batch_ = batches_trained_;
  nlohmann::json meta = plan_.checkpoint_metadata;
  meta["batches_trained"] = batches_trained_;
  meta["epochs_trained"] = epochs();
  meta["data_position"] = {{"training_batches", batches_trained_}};
  meta["runtime_state"] = RuntimeState();
  auto saved = SaveOnChief(meta, rank_rng);
  if (!saved.ok()) {
    last_checkpoint_batch_ = previous;
    return saved.status();
  }
  latest_checkpoint_ = *saved;
  if (reports()) DET_RETURN_IF_ERROR(reporter_->ReportCheckpoint(*saved, batches_trained_));
  return *saved;
}

absl::Status TrialController::ValidateThenMaybeCheckpoint() {
  DET_ASSIGN_OR_RETURN(MetricsMap metrics, Validate());
  std::optional<double> metric;
  if (auto it = metrics.find(plan_.searcher_metric); it != metrics.end()) metric = it->second;
  const bool wanted =
      CheckpointAfterValidation(plan_.checkpoint_policy, plan_.smaller_is_better, metric, best_validation_);
  if (metric && IsBetterMetric(plan_.smaller_is_better, *metric, best_validation_)) best_validation_ = metric;
  if (wanted && last_checkpoint_batch_ != batches_trained_) DET_RETURN_IF_ERROR(Checkpoint().status());
  return absl::OkStatus();
}

absl::StatusOr<TrialOutcome> TrialController::Run() {
  const int64_t first = batches_trained_;
  DET_RETURN_IF_ERROR(
      ForEachCallback(callbacks_, "on_trial_startup", [&](Callback& cb) { cb.on_trial_startup(first); }));
  if (plan_.perform_initial_validation && batches_trained_ == 0 && last_validation_batch_ < 0) {
    DET_RETURN_IF_ERROR(Validate().status());
  }
  auto since = [](int64_t now, int64_t last) { return now - std::max<int64_t>(last, 0); };
  // A time_metric (e.g. tokens) ends training when it reaches max_time;
  // otherwise max_length (in batches) does.
  const bool by_metric = !plan_.time_metric.empty();
  auto cap = [](int64_t target, int64_t limit) { return target == 0 ? limit : std::min(target, limit); };
  while (by_metric ? !metric_reached_ : batches_trained_ < max_batches_) {
    int64_t target = by_metric ? 0 : max_batches_;  // 0: no cap
    if (validation_period_ > 0) target = cap(target, std::max<int64_t>(last_validation_batch_, 0) + validation_period_);
    if (checkpoint_period_ > 0) target = cap(target, std::max<int64_t>(last_checkpoint_batch_, 0) + checkpoint_period_);
    bool preempted = false;
    if (by_metric) {
      DET_RETURN_IF_ERROR(
          TrainToMetric(plan_.time_metric, static_cast<double>(plan_.max_time), target, &preempted));
    } else {
      DET_RETURN_IF_ERROR(TrainTo(target, &preempted));
    }
    if (preempted) {
      if (!latest_checkpoint_ || last_checkpoint_batch_ != batches_trained_) DET_RETURN_IF_ERROR(Checkpoint().status());
      FinishProfiling();
      DET_RETURN_IF_ERROR(ForEachCallback(callbacks_, "on_trial_shutdown", [](Callback& cb) { cb.on_trial_shutdown(); }));
      return TrialOutcome::kPaused;
    }
    if (validation_period_ > 0 && since(batches_trained_, last_validation_batch_) >= validation_period_) {
      DET_RETURN_IF_ERROR(ValidateThenMaybeCheckpoint());
    }
    if (checkpoint_period_ > 0 && since(batches_trained_, last_checkpoint_batch_) >= checkpoint_period_) {
      DET_RETURN_IF_ERROR(Checkpoint().status());
    }
  }
  if (last_validation_batch_ != batches_trained_) DET_RETURN_IF_ERROR(Validate().status());
  if (!latest_checkpoint_ || last_checkpoint_batch_ != batches_trained_) DET_RETURN_IF_ERROR(Checkpoint().status());
  FinishProfiling();
  DET_RETURN_IF_ERROR(ForEachCallback(callbacks_, "on_trial_shutdown", [](Callback& cb) { cb.on_trial_shutdown(); }));
  return TrialOutcome::kCompleted;
}

}  // namespace det::runtime
